"""``webrl train-orm --base smollm2-135m``: the ORM is a LoRA adapter on the pretrained base whose folder records
the prompt budget it trained on, and the ORM service loads it and judges with it. Also which model is which on
the command line (``--base`` starts the ORM, ``--actor`` is rolled out by the "sft" policy) and its errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from webrl.agent.schemas import Observation, Step, Trajectory
from webrl.commands.judges import resolve_models
from webrl.config import Settings
from webrl.orchestration import train_orm
from webrl.orchestration.train_orm import TrainOrmOptions, default_policies

SUCCESS_PAGE = '<html><h1 id="3">Thank you for your purchase</h1><div id="5">Your order is placed</div></html>'
FAILURE_PAGE = '<html><h1 id="3">Something went wrong</h1><div id="5">Error: out of stock</div></html>'


def _trajectory(item: str, success: bool) -> Trajectory:
    steps = [Step(index=0, observation=Observation(html='<input id="13"/>', url="http://s/"),
                  response=f'do(action="Search", argument="{item}", element="13")'),
             Step(index=1, observation=Observation(html=SUCCESS_PAGE if success else FAILURE_PAGE, url="http://s/c"),
                  response='exit(message="done")')]
    return Trajectory(task_id=f"sandbox/orm/{item}-{int(success)}", intent=f"Buy the {item}", steps=steps,
                      env_score=1.0 if success else 0.0)


def _rollouts_stored(store_trajectories: Callable[..., list[int]], monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[dict[str, list[int]], list[Trajectory]]:
    """Two items' trajectories stored in the train split and two in the test split, and train-orm's rollout stage
    made to return them (collect itself needs Chromium): (ids by split, the test trajectories)."""
    items = ["kettle", "lamp", "chair", "mug"]
    train = [_trajectory(item, success) for item in items[:2] for success in (True, False)]
    test = [_trajectory(item, success) for item in items[2:] for success in (True, False)]
    ids = {"train": store_trajectories(train, "train"), "test": store_trajectories(test, "test")}
    monkeypatch.setattr(train_orm, "split_keys", lambda settings, split, limit, seed: [split])
    monkeypatch.setattr(train_orm, "collect", lambda policies, keys, concurrency: ids[keys[0][0]])
    return ids, test


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


@pytest.mark.slow  # converts SmolLM2 once per session (~30 s), trains one LoRA step on it, scores twice
def test_train_orm_on_the_pretrained_base_publishes_an_adapter_the_orm_service_judges_with(
        with_smollm2: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_trajectories) -> None:
    import torch

    from services.orm.scoring import LocalOrm
    from webrl.db.migrate import upgrade
    from webrl.store.checkpoints import read_manifest

    upgrade(with_smollm2)
    ids, test = _rollouts_stored(store_trajectories, monkeypatch)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: one thread per matmul waits less
    try:
        options = TrainOrmOptions(base="smollm2-135m", output=str(Path(with_smollm2.artifacts_dir) / "orm"),
                                  policies=["oracle"], max_prompt_tokens=256, objective="answer", epochs=1,
                                  batch_size=4, lr=1e-3, seed=0,
                                  report_dir=str(tmp_path / "report"))
        heard: list[str] = []
        report = train_orm.train_orm(with_smollm2, options, say=heard.append)
    finally:
        torch.set_num_threads(before)

    orm, start = Path(report["orm"]["path"]), Path(report["start"]["path"])
    assert report["start"]["lora"] and report["start"]["max_length"] == 256 + 256
    assert report["orm"]["metrics"]["steps"] == 1 and report["data"]["train_balanced"] == 4
    for folder in (orm, start):
        assert (folder / "adapter_config.json").is_file() and not (folder / "config.json").exists()
        assert _folder_bytes(folder) < 30e6  # rank 16: ~20 MB of adapter, not the 540 MB base
    assert set(report["metrics"]) == {"untrained", "trained"} and report["metrics"]["trained"]["n"] == 4
    assert len(heard) == 3 and "-> 4 balanced; 4 held out" in heard[1]  # each stage said as it starts
    assert heard[2] == "scoring the 4 held-out trajectories with the untrained and the trained ORM"

    judge = LocalOrm(orm, with_smollm2)
    assert judge.max_tokens == 256  # the budget it trained with, from its folder (WEBRL_ORM__MAX_PROMPT_TOKENS: 16384)
    p = judge.probabilities(test)
    assert all(0.0 < x < 1.0 for x in p)
    stored = _stored_p(with_smollm2, ids["test"])  # what train-orm's measurement (orm.score) recorded
    assert p == pytest.approx(stored[judge.version], abs=1e-4)
    untrained = stored[read_manifest(start)["version"]]
    assert max(abs(a - b) for a, b in zip(p, untrained, strict=True)) > 1e-3  # one step moved the adapter


@pytest.mark.slow  # converts SmolLM2 once per session (~30 s), reads 4 prompts with it, scores twice
def test_train_orm_with_a_head_on_the_pretrained_base_publishes_an_orm_the_service_judges_with(
        with_smollm2: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_trajectories) -> None:
    from services.orm.scoring import LocalOrm
    from webrl.db.migrate import upgrade
    from webrl.models.orm_head import is_orm_classifier

    upgrade(with_smollm2)
    ids, test = _rollouts_stored(store_trajectories, monkeypatch)
    options = TrainOrmOptions(base="smollm2-135m", output=str(Path(with_smollm2.artifacts_dir) / "orm"),
                              policies=["oracle"], max_prompt_tokens=256, objective="head", seed=0,
                              report_dir=str(tmp_path / "report"))
    heard: list[str] = []
    report = train_orm.train_orm(with_smollm2, options, say=heard.append)

    orm = Path(report["orm"]["path"])
    assert is_orm_classifier(orm) and (orm / "adapter_config.json").is_file()  # the B = 0 start adapter + a head
    assert _folder_bytes(orm) < 30e6
    assert report["data"]["train_used"] == 4 and report["orm"]["metrics"]["train_balanced_accuracy"] == 1.0
    assert "fitting a classification head on the frozen backbone's states of all 4" in heard[1]
    judge = LocalOrm(orm, with_smollm2)
    assert judge.classifier is not None and judge.max_tokens == 256
    p = judge.probabilities(test)
    assert p == pytest.approx(_stored_p(with_smollm2, ids["test"])[judge.version], abs=1e-4)
    assert set(report["metrics"]) == {"untrained", "trained"}  # the zero-shot YES/NO start against the head
    written = json.loads((tmp_path / "report" / "report.json").read_text())  # names no machine's folders
    assert written["orm"]["path"] == written["options"]["output"] == "orm" and orm.is_absolute()


def _stored_p(settings: Settings, ids: list[int]) -> dict[str, list[float]]:
    """ORM version -> P(YES) of each trajectory in ``ids`` (in order), from the stored labels."""
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        rows = session.execute(select(m.OrmLabel.orm_version, m.OrmLabel.trajectory_id, m.OrmLabel.p_yes)
                               .where(m.OrmLabel.trajectory_id.in_(ids))).all()
    by_version: dict[str, dict[int, float]] = {}
    for version, tid, p_yes in rows:
        by_version.setdefault(version, {})[tid] = p_yes
    return {version: [found[i] for i in ids] for version, found in by_version.items()}


def test_the_sft_policy_needs_an_actor(tmp_path: Path) -> None:
    assert default_policies(None) == ["oracle", "oracle:0.3", "oracle:0.6"]
    assert default_policies("/models/actor-sft")[-1] == "sft"
    with pytest.raises(ValueError, match="--actor"):
        train_orm.parse_policy("sft", None, 0)


def test_base_and_actor_are_told_apart(tmp_path: Path) -> None:
    import typer

    artifacts = tmp_path / "artifacts"
    actor = artifacts / "models" / "actor-sft"
    other = tmp_path / "other"
    for folder in (actor, other):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
    assert resolve_models(artifacts, None, None) == (str(actor), str(actor))  # as before: the SFT actor
    assert resolve_models(artifacts, "smollm2-135m", None) == ("smollm2-135m", str(actor))
    assert resolve_models(artifacts, "smollm2-135m", str(other)) == ("smollm2-135m", str(other))
    assert resolve_models(artifacts, str(other), None) == (str(other), str(other))  # --base FOLDER kept its meaning
    (actor / "config.json").unlink()
    assert resolve_models(artifacts, "smollm2-135m", None) == ("smollm2-135m", None)
    with pytest.raises(typer.BadParameter, match="--base smollm2-135m"):
        resolve_models(artifacts, None, None)


@pytest.mark.parametrize(("args", "option", "words"), [
    (["--base", "no-such-base"], "--base", "neither a pretrained base"),
    (["--base", "smollm2-135m", "--policy", "oracle", "--policy", "sft"], "--policy", "--actor"),
    (["--base", "smollm2-135m", "--policy", "oracle", "--policy", "oracle:0.3@0"], "--policy", "at least 1"),
    (["--base", "smollm2-135m", "--actor", "/no/such/actor"], "--actor", "not a model"),
    (["--base", "ADAPTER", "--lora-rank", "8"], "--lora-rank", "already a LoRA adapter"),
    (["--base", "FULL", "--max-prompt-tokens", "512"], "--max-prompt-tokens", "WEBRL_ORM__MAX_PROMPT_TOKENS"),
])
def test_bad_options_are_named(settings: Settings, tmp_path: Path, args: list[str], option: str, words: str) -> None:
    from webrl.cli import app

    adapter, full = tmp_path / "adapter", tmp_path / "full"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    full.mkdir()
    (full / "config.json").write_text("{}")
    args = [{"ADAPTER": str(adapter), "FULL": str(full)}.get(a, a) for a in args]
    result = CliRunner().invoke(app, ["train-orm", *args])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())  # rich wraps the error box
    assert option in text and words in text, text

