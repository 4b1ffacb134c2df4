"""Fixtures for the trainer tests: a tiny real Llama + BPE tokenizer folder, and a database holding two
phases of labelled trajectories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from webrl.config import Settings

CORPUS = [
    "Show me the products in the Electronics category",
    '<html><body><a id="3">Electronics</a><a id="4">Books</a><input id="7" placeholder="Search"/></body></html>',
    'do(action="Click", element="3")',
    'do(action="Type", argument="laptop", element="7")',
    'exit(message="done")',
] * 4


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face folder: the tiny BPE tokenizer and a 1-layer Llama (``webrl.models.tiny`` "test" size)."""
    from webrl.models.tiny import build_tiny_llama, build_tokenizer, save_tiny

    out = tmp_path_factory.mktemp("tiny")
    tokenizer = build_tokenizer(CORPUS, out, vocab_size=600)
    save_tiny(build_tiny_llama(tokenizer, "test", seed=0), tokenizer, out)
    return out


@pytest.fixture
def tiny(tiny_dir: Path):
    """(model, tokenizer) freshly loaded from :func:`tiny_dir` (fp32, train mode)."""
    from services.trainer.sft import load_for_training

    return load_for_training(tiny_dir)


@pytest.fixture
def push(tiny):
    """``push(examples, objective, probe, **update_actor_kwargs) -> (the change of each probe item's log-prob, the
    last epoch's record)``: an unbounded push of every example's action (A = 1, lr 3e-3, 15 epochs, batches of 2)
    on a fresh copy of :func:`tiny`'s model, so levers compare on the same start."""
    import copy

    import torch

    from services.trainer.actor_update import reference_pass, update_actor
    from services.trainer.training_loop import LoopConfig, make_accelerator, prepare
    from webrl.models.examples import pad_id_of

    model, tokenizer = tiny
    state = copy.deepcopy(model.state_dict())

    def run(examples, objective, probe, **kwargs) -> tuple[list[float], dict]:
        fresh = copy.deepcopy(model)
        fresh.load_state_dict(state)
        before = reference_pass(fresh, probe, pad_id_of(tokenizer), 2, torch.device("cpu")).lp
        loop = LoopConfig(lr=3e-3, epochs=15, batch_size=2, gradient_checkpointing=False)
        accelerator = make_accelerator(loop)
        prepared = prepare(accelerator, fresh, loop)
        summary = update_actor(accelerator, prepared, tokenizer, examples, [1.0] * len(examples), objective, loop,
                               max_length=256, **kwargs)
        after = reference_pass(prepared.model, probe, pad_id_of(tokenizer), 2, torch.device("cpu")).lp
        return [a - b for a, b in zip(after, before, strict=True)], summary.epochs[-1]

    return run


@pytest.fixture
def db(settings: Settings) -> Iterator[Settings]:
    """Settings whose SQLite database has the schema."""
    from webrl.db.migrate import upgrade

    upgrade(settings)
    yield settings


PAGE = '<html><body><a id="3">Electronics</a><a id="4">Books</a><input id="7" placeholder="Search"/></body></html>'


def _store(settings: Settings, task_key: str, phase: int, attempt: int, responses: list[str],
           reward: float | None, env_score: float | None = None, purpose: str = "train", run_id: int = 0) -> int:
    from webrl.agent.actions import parse_action
    from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
    from webrl.db.repository import save_label, save_trajectory, upsert_task
    from webrl.db.session import session_scope

    config = TaskConfig(task_id=task_key, sites=["shopping"], intent=f"Show me {task_key}",
                        start_url="__SHOPPING__/")
    steps = [Step(index=i, observation=Observation(html=PAGE, url=f"http://shop/{i}"), response=r,
                  action=parse_action(r)) for i, r in enumerate(responses)]
    traj = Trajectory(task_id=task_key, intent=config.intent, steps=steps, env_score=env_score,
                      last_observation=Observation(html=PAGE.replace("Books", "Done"), url="http://shop/end"))
    with session_scope(settings) as session:
        task = upsert_task(session, task_key, config, origin="seed", split="train", phase=phase)
        row = save_trajectory(session, task.id, phase, attempt, traj, purpose=purpose, run_id=run_id)
        if reward is not None:
            save_label(session, row.id, "orm-test", p_yes=reward, threshold=0.5)
        return row.id


@pytest.fixture
def store_trajectory(db: Settings):
    """``store(task_key, phase, attempt, responses, reward, env_score=None, purpose="train", run_id=0) -> trajectory
    id``; ``reward`` is stored as the ORM p (1.0 -> reward 1, 0.0 -> reward 0, None -> unlabelled)."""

    def store(task_key: str, phase: int, attempt: int, responses: list[str], reward: float | None,
              env_score: float | None = None, purpose: str = "train", run_id: int = 0) -> int:
        return _store(db, task_key, phase, attempt, responses, reward, env_score, purpose, run_id)

    return store


@pytest.fixture
def write_trajectory():
    """``write(settings, task_key, phase, attempt, responses, reward, env_score=None, purpose="train") -> id``
    for any database (the Postgres test passes its own settings)."""
    return _store
