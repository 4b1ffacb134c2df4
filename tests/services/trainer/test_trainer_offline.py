"""A phase's actor update re-run offline: exported from a real phase's database rows, loaded back, re-trained under a
setting; and the bench's smoke path on the shipped stored phase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from services.trainer.intent_contrast import ContrastIntent
from services.trainer.offline import demonstration_steps, export_phase, load_phase, rerun_update, setting
from services.trainer.phase import run_phase
from services.trainer.training_loop import LoopConfig, planned_steps
from webrl.agent.schemas import TaskConfig
from webrl.db import models as m
from webrl.db.repository import save_label, upsert_task
from webrl.db.session import session_scope
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.method.rewards import EVALUATOR_LABELS
from webrl.models.probe import ProbeStep, save_probe
from webrl.orchestration.pipeline import PipelineOptions
from webrl.wire.contracts import PhaseJob

ROOT = Path(__file__).resolve().parents[3]
CLICK, TYPE, EXIT = 'do(action="Click", element="3")', 'do(action="Type", argument="laptop", element="7")', \
    'exit(message="done")'


def _run(db, tiny_dir: Path, hp) -> int:
    with session_scope(db) as s:
        run = m.Run(name="offline", options=PipelineOptions(run="offline", actor=str(tiny_dir),
                                                            hyperparams=hp).to_json())
        s.add(run)
        s.flush()
        return run.id


def test_a_phase_exports_and_its_update_reruns_under_another_setting(tiny_dir: Path, tiny, store_trajectory,
                                                                     db, tmp_path: Path) -> None:
    hp = with_overrides(DEFAULTS, {"batching.batch_size": 4, "actor.lr": 1e-3, "critic.lr": 1e-3})
    run_id = _run(db, tiny_dir, hp)
    for key, phase, responses, reward in [("a", 1, [CLICK, EXIT], 1.0), ("b", 1, [TYPE, TYPE], 0.0),
                                          ("a", 2, [CLICK, TYPE, EXIT], 1.0), ("b", 2, [TYPE], 0.0),
                                          ("c", 2, [CLICK, EXIT], 1.0)]:
        tid = store_trajectory(key, phase, 0, responses, reward=reward, run_id=run_id)
        with session_scope(db) as s:  # the run has no ORM: its rewards are the evaluators' labels
            save_label(s, tid, EVALUATOR_LABELS, p_yes=reward, threshold=0.5)
    result = run_phase(db, PhaseJob(phase=2, run_id=run_id, actor=str(tiny_dir), hyperparams=hp, max_length=400,
                                    orm_version=EVALUATOR_LABELS))
    _, tokenizer = tiny
    early = load_phase(export_phase(db, "offline", 2, tmp_path / "early", tokenizer))  # no train metrics stored yet
    assert early.meta["critic_version"] == result.critic.version
    with session_scope(db) as s:
        s.add(m.Phase(run_id=run_id, index=2, stages_done=["train"],
                      metrics={"train.critic_version": result.critic.version}))
        stored_values = {(t, i): a for t, i, a in s.execute(
            select(m.StepRow.trajectory_id, m.StepRow.index, m.StepValue.advantage)
            .join(m.StepValue, m.StepValue.step_id == m.StepRow.id))}
    folder = export_phase(db, "offline", 2, tmp_path / "stored", tokenizer)
    stored = load_phase(folder)
    assert len(stored.steps) == result.metrics["experience_steps"] == len(stored_values)
    assert {(s.trajectory_id, s.index): s.advantage for s in stored.steps} == pytest.approx(stored_values)
    assert json.loads((folder / "phase.json").read_text())["critic_version"] == result.critic.version
    assert stored.hyperparams == hp

    probe = [ProbeStep(task_key=s.task_key, site=s.site, index=s.index, prompt=s.prompt, completion=s.completion)
             for s in stored.steps[:3]]
    squared = rerun_update(db, stored, tiny_dir, setting(hp, {"actor.objective": "squared", "actor.epochs": 2}),
                           probe=probe)
    assert squared.metrics["trained_steps"] == len(stored.steps)  # the paper's objective: every step
    assert len(squared.epochs) == 2 and "flips" in squared.epochs[-1] and "kl_exact" in squared.epochs[-1]
    assert squared.metrics["kl_exact"] > 0
    published = rerun_update(db, stored, tiny_dir, setting(hp, {"actor.failed_positives": "drop"}))
    assert published.metrics["positives_from_failed"] == 0.0
    assert 0 < published.metrics["trained_steps"] < len(stored.steps)
    anchored = rerun_update(db, stored, tiny_dir, setting(hp, {"actor.anchor_kl": 5.0}), anchors=probe)
    assert anchored.metrics["anchor_kl"] >= 0.0 and anchored.metrics["optimizer_steps"] > 0
    anchors_file = save_probe(probe, db.artifacts_dir / "anchors.jsonl.gz")
    phase_anchored = run_phase(db, PhaseJob(phase=2, run_id=run_id, actor=str(tiny_dir), max_length=400,
                                            hyperparams=setting(hp, {"actor.anchor_kl": 5.0}),
                                            anchors=str(anchors_file), orm_version=EVALUATOR_LABELS))
    assert "anchor_kl" in phase_anchored.metrics and phase_anchored.actor.version != result.actor.version
    with session_scope(db) as s:  # train tasks of two templates: "Show me a" instantiates the first
        for i, (intent, template) in enumerate([("Show me the cart", "Show me {{page}}"),
                                                ("Open the Books page", "Open the {{page}} page")]):
            upsert_task(s, f"templated/{i}", TaskConfig(task_id=i, sites=["shopping"], intent=intent, start_url="/",
                                                        intent_template=template), origin="seed", split="train")
    contrasted = run_phase(db, PhaseJob(phase=2, run_id=run_id, actor=str(tiny_dir), max_length=400,
                                        hyperparams=setting(hp, {"actor.intent_contrast": 1.0}),
                                        orm_version=EVALUATOR_LABELS))
    assert "contrast_log_ratio" in contrasted.metrics and contrasted.actor.version != result.actor.version
    twins = rerun_update(db, stored, tiny_dir, setting(hp, {"actor.intent_contrast": 1.0}),
                         contrast=[ContrastIntent("shopping", "Open the {{page}} page", "Open the Books page"),
                                   ContrastIntent("shopping", "Show me {{page}}", "Show me the cart")])
    assert "contrast_log_ratio" in twins.metrics
    gated = rerun_update(db, stored, tiny_dir, setting(hp, {"actor.min_new_positive_steps": len(stored.steps) + 1}))
    assert gated.metrics["actor_skipped"] == 1 and gated.metrics["trained_steps"] == 0  # too few A > 0: no update
    assert gated.metrics["optimizer_steps"] == 0 and published.metrics["actor_skipped"] == 0


def test_load_phase_names_a_folder_that_is_not_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a stored phase"):
        load_phase(tmp_path)


def test_a_stored_phase_whose_files_disagree_is_refused(tmp_path: Path) -> None:
    """An export killed between its steps and its meta: the meta's count names the mismatch."""
    import shutil

    folder = tmp_path / "phase"
    shutil.copytree(ROOT / "bench" / "fixtures" / "phase1-smollm2", folder)
    meta = json.loads((folder / "phase.json").read_text())
    (folder / "phase.json").write_text(json.dumps({**meta, "steps": meta["steps"] + 1}))
    with pytest.raises(ValueError, match=f"counts {meta['steps'] + 1} steps"):
        load_phase(folder)


@pytest.mark.skipif(not (ROOT / "bench" / "fixtures" / "phase1-smollm2" / "phase.json").is_file(),
                    reason="the shipped stored phase is missing")
def test_the_offline_bench_smoke_path_on_the_shipped_phase(tmp_path: Path) -> None:
    """``bench/phase_offline.py run --smoke``: two settings on the shipped phase's first trained steps with the tiny
    actor, flips on 4 probe steps; results.json and the plot are written."""
    env = {**os.environ, "WEBRL_HOME": str(tmp_path / "home")}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "phase_offline.py"), "run", "--smoke", "--output",
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())["results"]
    assert [r["setting"] for r in results] == ["smooth-l1", "squared"]
    for r in results:
        assert r["trained_steps"] == 2 and r["optimizer_steps"] == 1
        assert 0.0 <= r["flips"] <= 1.0 and r["kl_exact"] >= 0.0
    assert (out / "flips_kl.png").stat().st_size > 1000


@pytest.mark.skipif(not (ROOT / "bench" / "fixtures" / "phase1-smollm2" / "phase.json").is_file(),
                    reason="the shipped stored phase is missing")
def test_the_memory_bench_smoke_path_on_the_shipped_phase(tmp_path: Path) -> None:
    """``bench/phase_memory.py --smoke``: two updates in one process, the memory held and returned after each."""
    env = {**os.environ, "WEBRL_HOME": str(tmp_path / "home")}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "phase_memory.py"), "--smoke", "--updates", "2",
                           "--output", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert [u["update"] for u in results["updates"]] == [1, 2] and results["max_steps"] == 2
    for update in results["updates"]:
        assert 0 < update["returned_mb"] <= update["held_mb"] + 1 and update["held_mb"] <= update["peak_mb"]


@pytest.mark.skipif(not (ROOT / "bench" / "fixtures" / "phase1-smollm2" / "phase.json").is_file(),
                    reason="the shipped stored phase is missing")
def test_an_offline_update_reports_its_optimizer_steps_done_of_those_planned(settings) -> None:
    """The bench's progress bar: (0, planned) before the first step, then one call per optimizer step, ending at
    planned, which is the number of steps the update took (3 batches of 2, accumulated 2 by 2: 2 steps an epoch)."""
    stored = load_phase(ROOT / "bench" / "fixtures" / "phase1-smollm2")
    hp = setting(stored.hyperparams, {"actor.epochs": 2, "batching.batch_size": 2, "batching.grad_accum": 2})
    calls: list[tuple[int, int]] = []
    result = rerun_update(settings, stored, ROOT / "webrl" / "assets" / "actor-sft", hp, max_steps=6,
                          on_progress=lambda done, total: calls.append((done, total)))
    steps = result.metrics["optimizer_steps"]
    assert steps == 4
    assert calls == [(done, steps) for done in range(steps + 1)]
    assert planned_steps(3, LoopConfig(epochs=2, grad_accum=2)) == 4


@pytest.mark.skipif(not (ROOT / "bench" / "fixtures" / "phase1-smollm2" / "phase.json").is_file(),
                    reason="the shipped stored phase is missing")
def test_the_seed_orders_the_updates_batches_and_changes_nothing_else(settings) -> None:
    """``bench/phase_offline.py --seed``: one seed gives the same adapter twice; another seed trains the same steps
    with the same number of optimizer steps from the same start, in another batch order, so the weights differ."""
    stored = load_phase(ROOT / "bench" / "fixtures" / "phase1-smollm2")
    hp = setting(stored.hyperparams, {"actor.epochs": 1, "batching.batch_size": 2})
    tiny = ROOT / "webrl" / "assets" / "actor-sft"

    def update(seed: int) -> tuple[dict, dict]:
        result = rerun_update(settings, stored, tiny, hp, max_steps=6, seed=seed, keep_model=True)
        return result.metrics, {k: v.detach().clone() for k, v in result.model.state_dict().items()}

    (first, a), (again, b), (other, c) = update(0), update(0), update(1)
    assert first == {**again, "train_seconds": first["train_seconds"]}
    assert all(bool((a[k] == b[k]).all()) for k in a)  # the same seed: the same adapter, bit for bit
    assert (other["trained_steps"], other["optimizer_steps"]) == (first["trained_steps"], first["optimizer_steps"])
    assert other["optimizer_steps"] >= 2  # more than one batch, so there is an order to change
    assert any(not bool((a[k] == c[k]).all()) for k in a)  # another order of the same batches: other weights


def test_the_rehearsal_pool_is_whole_oracle_demonstrations_of_the_first_tasks() -> None:
    """``replay.demo_tasks`` tasks of an oracle step file, each step as a successful demonstration's step: reward 1,
    G_t = gamma^(T-1-t), done at its last step, one trajectory per task (ids no stored trajectory has)."""
    steps = [ProbeStep("t/1", "shopping", i, f"s{i}", CLICK) for i in range(3)] + \
        [ProbeStep("t/2", "reddit", i, f"r{i}", EXIT) for i in range(2)] + [ProbeStep("t/3", "gitlab", 0, "g", EXIT)]
    pool = demonstration_steps(steps, 2, gamma=0.5)
    assert [(e.task_key, e.index) for e in pool] == [("t/1", 0), ("t/1", 1), ("t/1", 2), ("t/2", 0), ("t/2", 1)]
    assert [e.mc_return for e in pool] == [0.25, 0.5, 1.0, 0.5, 1.0]
    assert [e.done for e in pool] == [False, False, True, False, True]
    assert {e.reward for e in pool} == {1.0} and {e.completion_ids for e in pool} == {()}
    assert len({e.trajectory_id for e in pool}) == 2 and all(e.trajectory_id < 0 for e in pool)
    assert demonstration_steps(steps, 0, gamma=0.5) == []


@pytest.mark.skipif(not (ROOT / "bench" / "fixtures" / "phase1-smollm2" / "phase.json").is_file(),
                    reason="the shipped stored phase is missing")
def test_an_offline_update_rehearses_demonstrations_as_a_phase_does(settings) -> None:
    """With ``replay.demo_tasks`` the update trains on floor(demo_ratio x positives) demonstration steps besides the
    phase's own, with A = +1: more batches than the same update without them, and another adapter."""
    stored = load_phase(ROOT / "bench" / "fixtures" / "phase1-smollm2")
    tiny = ROOT / "webrl" / "assets" / "actor-sft"
    hp = setting(stored.hyperparams, {"actor.epochs": 1, "batching.batch_size": 2})
    pool = demonstration_steps([ProbeStep(f"t/{k}", "shopping", i, f"page {k}.{i}", CLICK)
                                for k in range(3) for i in range(2)], 3, hp.advantage.gamma)
    plain = rerun_update(settings, stored, tiny, hp, max_steps=4, demonstrations=pool)  # demo_tasks 0: not read
    rehearsed = rerun_update(settings, stored, tiny, setting(hp, {"replay.demo_tasks": 3, "replay.demo_ratio": 0.1}),
                             max_steps=4, demonstrations=pool)
    assert plain.metrics["demonstration_steps"] == 0 and plain.metrics["trained_steps"] == 4
    assert 0 < rehearsed.metrics["demonstration_steps"] <= len(pool)
    assert rehearsed.metrics["trained_steps"] == 4
    assert rehearsed.metrics["optimizer_steps"] > plain.metrics["optimizer_steps"]


SEED1_FIXTURE = ROOT / "bench" / "fixtures" / "phase1-seed1-smollm2"


@pytest.mark.skipif(not (SEED1_FIXTURE / "phase.json").is_file(), reason="the second stored phase is missing")
def test_the_second_stored_phase_loads_and_the_gate_keeps_its_actor(tmp_path: Path) -> None:
    """The second shipped phase (cpu-demo seed 1, phase 1: rollouts that solved nothing, so its 14 steps with A > 0
    are all replayed from phase 0): the preset's gate runs no update on it; without the gate the update trains on the
    replayed steps alone."""
    stored = load_phase(SEED1_FIXTURE)
    positives = [s for s in stored.steps if s.advantage > 0]
    assert stored.meta["phase"] == 1 and len(stored.steps) == 113
    assert len(positives) == 14 and all(s.phase == 0 for s in positives)
    assert stored.hyperparams.actor.min_new_positive_steps == 5
    env = {**os.environ, "WEBRL_HOME": str(tmp_path / "home")}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "phase_offline.py"), "run", "--smoke", "--fixture",
                           str(SEED1_FIXTURE), "--setting", "gated:", "--setting",
                           "replay-only:actor.min_new_positive_steps=0", "--output", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    gated, replay_only = json.loads((out / "results.json").read_text())["results"]
    assert (gated["actor_skipped"], gated["trained_steps"], gated["optimizer_steps"]) == (1, 0, 0)
    assert (replay_only["actor_skipped"], replay_only["trained_steps"], replay_only["optimizer_steps"]) == (0, 2, 1)


T03_FIXTURE = ROOT / "bench" / "fixtures" / "phase1-seed0-t03-smollm2"


@pytest.mark.skipif(not (T03_FIXTURE / "phase.json").is_file(), reason="the third stored phase is missing")
def test_the_third_stored_phase_loads_with_the_options_it_ran_under() -> None:
    """The third shipped phase (`make demo` seed 0 with `--solved-share 0.5 --rollout-temperature 0.3`, phase 1: 8
    of 24 rollouts solved): 53 steps with A > 0, 40 of them its own; a field its run predates takes its default."""
    stored = load_phase(T03_FIXTURE)
    positives = [s for s in stored.steps if s.advantage > 0]
    assert stored.meta["phase"] == 1 and len(stored.steps) == 122
    assert len(positives) == 53 and sum(s.phase == 1 for s in positives) == 40
    hp = stored.hyperparams
    assert (hp.curriculum.solved_share, hp.rollout.temperature, hp.actor.max_grad_norm) == (0.5, 0.3, 0.01)
    assert hp.actor.max_positive_confidence == DEFAULTS.actor.max_positive_confidence == 1.0


GATED_FIXTURE = ROOT / "bench" / "fixtures" / "phase1-seed1-gated-smollm2"


@pytest.mark.skipif(not (GATED_FIXTURE / "phase.json").is_file(), reason="the fourth stored phase is missing")
def test_the_fourth_stored_phase_is_an_update_on_few_positives_of_its_own_that_passed_the_gate() -> None:
    """The fourth shipped phase (`make demo` seed 1 at the final preset, phase 1: 2 of 24 rollouts solved): 11 steps
    with A > 0, 9 of them its own, so the gate (5) let the update run; its actor fell from 14 to 5 of the 65."""
    stored = load_phase(GATED_FIXTURE)
    positives = [s for s in stored.steps if s.advantage > 0]
    assert stored.meta["run"] == "cpu-demo-seed1" and stored.meta["phase"] == 1 and len(stored.steps) == 98
    assert len(positives) == 11 and sum(s.phase == 1 for s in positives) == 9
    hp = stored.hyperparams
    assert hp.actor.min_new_positive_steps == 5 and (hp.actor.max_grad_norm, hp.actor.epochs) == (0.01, 3)
    assert (hp.actor.intent_contrast, hp.actor.anchor_kl, hp.curriculum.solved_share) == (0.0, 0.0, 0.0)


def test_the_fourth_stored_phases_stops_get_the_states_their_episodes_went_on_from(tiny) -> None:
    """Its positives end four episodes on ``exit``: the two of its own rollouts get their earlier states as the stop
    contrast's twins (2 and 5), the two replayed ones, stored without their earlier steps, get none."""
    from services.trainer.stop_contrast import is_stop, stop_twin_items

    _, tokenizer = tiny
    stored = load_phase(GATED_FIXTURE)
    examples = [s.example(with_ids=False) for s in stored.steps]
    positives = [i for i, s in enumerate(stored.steps) if s.advantage > 0]
    stops = [i for i in positives if is_stop(examples[i].completion)]
    assert len(stops) == 4 and {stored.steps[i].phase for i in stops} == {0, 1}
    twins = stop_twin_items(tokenizer, examples, positives, examples, first_index=len(examples), max_length=None,
                            flags={})
    assert sorted(len(group) for group in twins.values()) == [2, 5]
    assert all(stored.steps[i].phase == 1 for i in twins)


T03_SEED1_FIXTURE = ROOT / "bench" / "fixtures" / "phase1-seed1-t03-smollm2"


def test_the_fifth_stored_phase_is_seed_1_under_the_data_lever() -> None:
    """The fifth shipped phase (`make demo` seed 1 with `--solved-share 0.5 --rollout-temperature 0.3`, phase 1: 11
    of 24 rollouts solved): 72 steps with A > 0, 66 of them its own, under the final preset's update."""
    stored = load_phase(T03_SEED1_FIXTURE)
    positives = [s for s in stored.steps if s.advantage > 0]
    assert stored.meta["run"] == "cpu-demo-seed1-t03" and stored.meta["phase"] == 1 and len(stored.steps) == 123
    assert len(positives) == 72 and sum(s.phase == 1 for s in positives) == 66
    hp = stored.hyperparams
    assert (hp.curriculum.solved_share, hp.rollout.temperature) == (0.5, 0.3)
    assert (hp.actor.max_grad_norm, hp.actor.epochs, hp.actor.min_new_positive_steps) == (0.01, 3, 5)
