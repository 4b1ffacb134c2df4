"""The start actor's evaluation is stored under its content key and read back by the next run (and by a phase whose
actor kept its weights, for the tasks it evaluates); any change to what the key names evaluates afresh;
re-evaluating stored tasks gives the stored results (the shipped SFT actor's too)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.session import session_scope
from webrl.method.hyperparams import with_overrides
from webrl.method.presets import PRESETS
from webrl.method.rewards import is_success
from webrl.orchestration.evaluate import evaluation_episodes
from webrl.orchestration.pipeline import PhaseState, Pipeline, PipelineOptions
from webrl.orchestration.stored_evaluation import key_for, storable_key, stored_scores, task_results
from webrl.store.evaluations import SHIPPED, code_sha256, find

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SHIPPED_ACTOR = Path(__file__).resolve().parents[3] / "webrl" / "assets" / "actor-sft-smollm2"


def _eval_episodes(settings: Settings) -> int:
    with session_scope(settings) as s:
        return s.scalar(select(func.count()).select_from(m.TrajectoryRow).where(m.TrajectoryRow.purpose == "eval"))


def _phase0(settings: Settings, run: str) -> dict[str, Any]:
    from webrl.runs.report import phase_rows

    return next(r for r in phase_rows(settings, run) if r["phase"] == 0)


def test_the_next_run_reads_the_start_actors_evaluation_back(smoke_world: Settings, tiny_actor: Path) -> None:
    world = smoke_world
    from webrl.sandbox.server import running_sandbox, sandbox_ports

    hp = PRESETS["smoke"]
    smoke = _phase0(world, "smoke")
    keys = smoke["evaluate.keys"]
    assert "evaluate.stored" not in smoke  # the first run evaluated it ...
    key = storable_key(world, str(tiny_actor), keys, hp.rollout)
    assert key is not None
    scores = stored_scores(world, key, keys)  # ... and stored it
    assert scores is not None and [s.key for s in scores] == keys
    assert sorted(s.key for s in scores if is_success(s.score)) == smoke["evaluate.solved"]

    episodes = _eval_episodes(world)
    pipeline = Pipeline(world, PipelineOptions(run="again", actor=str(tiny_actor), hyperparams=hp))
    metrics, _ = pipeline._stage_evaluate(0, PhaseState())
    assert metrics["stored"] == key.digest()[:12]
    assert _eval_episodes(world) == episodes  # read back: not one episode ran
    assert {k: metrics[k] for k in ("success", "n", "solved", "keys")} == {
        k: smoke[f"evaluate.{k}"] for k in ("success", "n", "solved", "keys")}

    # a later phase whose actor kept the start actor's weights, on the run's fixed sample: read back from the
    # evaluation of all the run's test tasks, the sample's tasks only
    sampled = with_overrides(hp, {"evaluation.subset": 3, "curriculum.phases": 2})
    later = Pipeline(world, PipelineOptions(run="kept", actor=str(tiny_actor), hyperparams=sampled))
    metrics, _ = later._stage_evaluate(1, PhaseState(actor_path=str(tiny_actor)))
    sample = metrics["keys"]
    assert metrics["subset"] and len(sample) == 3 and set(sample) < set(keys)
    assert metrics["stored"] == key.digest()[:12] and _eval_episodes(world) == episodes
    assert metrics["n"] == 3 and metrics["solved"] == sorted(set(smoke["evaluate.solved"]) & set(sample))

    # the same actor on fewer tasks, a longer horizon or in bf16 has another key: nothing is read back
    fewer = with_overrides(hp, {"evaluation.tasks": len(keys) - 1})
    assert stored_scores(world, key_for(world, tiny_actor, keys[:-1], fewer.rollout), keys[:-1]) is None
    longer = with_overrides(hp, {"rollout.max_steps": hp.rollout.max_steps + 1})
    assert stored_scores(world, key_for(world, tiny_actor, keys, longer.rollout), keys) is None
    assert storable_key(world.model_copy(update={"models": world.models.model_copy(update={"dtype": "bfloat16"})}),
                     str(tiny_actor), keys, hp.rollout) is None  # bf16 is not batch-invariant: never stored
    served = world.model_copy(update={"actor": world.actor.model_copy(update={"rollout_policy": "endpoint"})})
    assert storable_key(served, str(tiny_actor), keys, hp.rollout) is None  # the actor service's dtype decides there

    # a different actor (one changed byte of its weights) evaluates afresh, and is then stored too
    changed = world.artifacts_dir / "models" / "actor-changed"
    shutil.copytree(tiny_actor, changed)
    weights = changed / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    fresh = Pipeline(world, PipelineOptions(run="changed", actor=str(changed), hyperparams=hp))
    with running_sandbox(world, ports=sandbox_ports(world)):
        metrics, _ = fresh._stage_evaluate(0, PhaseState())
    assert "stored" not in metrics and _eval_episodes(world) == episodes + len(keys)
    assert find(world, key_for(world, changed, keys, hp.rollout)) is not None


def test_the_key_follows_the_code_that_shapes_an_episode(tmp_path: Path) -> None:
    for rel in ("webrl/prompts/actor.py", "webrl/sandbox/site.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    paths = ("webrl/prompts/actor.py", "webrl/sandbox")
    before = code_sha256(tmp_path, paths)
    (tmp_path / "webrl" / "sandbox" / "notes.md").write_text("not code")  # a suffix that does not count
    assert code_sha256(tmp_path, paths) == before
    (tmp_path / "webrl" / "sandbox" / "site.py").write_text("x = 2\n")
    assert code_sha256(tmp_path, paths) != before
    with pytest.raises(FileNotFoundError, match=r"gone\.py"):
        code_sha256(tmp_path, (*paths, "gone.py"))


def test_the_shipped_sft_evaluation_matches_the_code_and_reproduces(with_smollm2: Settings,
                                                                    free_sites: Settings) -> None:
    """The shipped SFT actor's stored evaluation is the one `make demo` reads back: its key must be the current
    code's and settings' (else the demo evaluates it again, a quarter of an hour), and three of its tasks, two solved
    and one not, re-evaluated now give the stored scores and step counts."""
    from webrl.db.migrate import upgrade
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.sandbox.tasks.suite import load_suite

    settings = free_sites
    upgrade(settings)
    load_suite(settings, settings.seed)
    hp = PRESETS["cpu-demo"]
    with session_scope(settings) as s:
        keys = [t.key for t in repo.tasks_where(s, split="test")]
    key = key_for(settings, SHIPPED_ACTOR, keys, hp.rollout)
    stored = find(settings, key, folders=(SHIPPED,))
    assert stored is not None, (
        f"no shipped evaluation under the current key {key.digest()[:12]}: the code or settings it names changed; "
        "refresh it: WEBRL_HOME=<fresh> webrl evaluation store --actor webrl/assets/actor-sft-smollm2 "
        "--into webrl/assets/evaluations (and remove the stale file)")
    by_steps = sorted(stored.results, key=lambda k: stored.results[k].steps)  # the shortest episodes: quickest
    solved = [k for k in by_steps if is_success(stored.results[k].score)]
    again = solved[:2] + [k for k in by_steps if k not in solved][:1]
    actor = settings.artifacts_dir / "models" / "actor-sft-smollm2"  # a copy: episodes of its own attempt number
    shutil.copytree(SHIPPED_ACTOR, actor)
    with running_sandbox(settings, ports=sandbox_ports(settings)):
        ids = evaluation_episodes(settings, actor, again, concurrency=3, max_steps=hp.rollout.max_steps)
    assert task_results(settings, ids) == {k: stored.results[k] for k in again}


def test_the_shipped_sft_validation_evaluation_matches_the_code_and_reproduces(with_smollm2: Settings,
                                                                               free_sites: Settings) -> None:
    """The shipped SFT actor's stored evaluation on the preset's 40 validation tasks is what ``make demo`` (and any
    run with ``--validation-tasks 40``) reads back for its first phase's start actor: its key must be the current
    code's, it names train-split tasks only, and one solved and one failed task re-evaluated now give the stored
    results; ``webrl evaluation show --validation-tasks 40`` finds it."""
    from typer.testing import CliRunner

    from webrl.cli import app
    from webrl.db.migrate import upgrade
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.sandbox.tasks.suite import load_suite
    from webrl.store.template_groups import validation_sample

    settings = free_sites
    upgrade(settings)
    load_suite(settings, settings.seed)
    hp = PRESETS["cpu-demo"]
    assert hp.evaluation.validation_tasks == 40  # the shipped evaluation's sample: refresh it if the preset changes
    keys = validation_sample(settings, hp.evaluation.validation_tasks)
    with session_scope(settings) as s:
        assert {t.split for t in repo.tasks_by_keys(s, keys)} == {"train"}
    key = key_for(settings, SHIPPED_ACTOR, keys, hp.rollout, split="train")
    stored = find(settings, key, folders=(SHIPPED,))
    assert stored is not None, (
        f"no shipped validation evaluation under the current key {key.digest()[:12]}; refresh it: WEBRL_HOME=<fresh> "
        "webrl evaluation store --actor webrl/assets/actor-sft-smollm2 --validation-tasks 40 "
        "--into webrl/assets/evaluations (and remove the stale file)")
    assert sorted(stored.results) == sorted(keys)
    by_steps = sorted(stored.results, key=lambda k: stored.results[k].steps)
    solved = [k for k in by_steps if is_success(stored.results[k].score)]
    again = solved[:1] + [k for k in by_steps if k not in solved][:1]
    actor = settings.artifacts_dir / "models" / "actor-sft-smollm2"
    shutil.copytree(SHIPPED_ACTOR, actor)
    with running_sandbox(settings, ports=sandbox_ports(settings)):
        ids = evaluation_episodes(settings, actor, again, concurrency=2, max_steps=hp.rollout.max_steps)
    assert task_results(settings, ids) == {k: stored.results[k] for k in again}
    shown = CliRunner().invoke(app, ["evaluation", "show", "--actor", str(SHIPPED_ACTOR), "--validation-tasks", "40"])
    assert shown.exit_code == 0, shown.output
    assert key.digest()[:12] in shown.output and f"│ {len(solved)} " in shown.output.split("overall")[1][:40]
