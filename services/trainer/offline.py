"""One phase's actor update, re-run offline from its stored experience: settings of the update compare on the same
data in minutes, without rollouts, labels or a critic (``bench/phase_offline.py``; the objective's tests).

A stored phase is a folder: ``steps.jsonl.gz`` holds every experience step the phase's training used (this phase's
and the replayed ones), each with its prompt, the action's token ids as generated, its trajectory's reward, and the
clamped advantage the phase's critic gave it (``step_values``); ``phase.json`` says where it came from (run, phase,
start actor, critic, hyperparameters). :func:`export_phase` writes one from a run's database; :func:`rerun_update`
trains the phase's start actor on it under a setting (hyperparameters) with :func:`actor_update.update_actor`, the
code a phase runs, and returns what the update did to the policy.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from sqlalchemy import select

from services.trainer import replay
from services.trainer.actor_update import (
    actor_loop_config,
    gate,
    kl_bound_record,
    last_epoch,
    positives_from_failed,
    positives_in_confidence_band,
    step_advantages,
    trained_steps,
    update_actor,
)
from services.trainer.data import StepExample, actor_prompt_fn, trajectory_examples
from services.trainer.intent_contrast import ContrastIntent
from services.trainer.sft import COMPLETION_BUDGET, load_for_training
from services.trainer.training_loop import ProgressHook, make_accelerator, prepare
from webrl.config import Settings
from webrl.db import models as m
from webrl.db.repository import label_of, load_trajectory
from webrl.db.session import session_scope
from webrl.method.hyperparams import WebRLHyperparams, parse_hyperparams
from webrl.method.returns import binarise
from webrl.models.probe import ProbeStep
from webrl.orchestration.pipeline_state import PipelineOptions
from webrl.whole_files import write_text_whole, written_whole

STEPS_FILE = "steps.jsonl.gz"
META_FILE = "phase.json"
#: What a re-run reports about the policy after its last epoch (and by epoch).
DRIFT_KEYS = ("kl_exact", "log_ratio_k1", "anchor_kl", "contrast_log_ratio", "stop_log_ratio", "flips",
              "flips_shopping", "flips_shopping_admin", "flips_reddit", "flips_gitlab", "beta_r_hat_mean",
              "braked_fraction", "actor_loss")


@dataclass(frozen=True)
class StoredStep:
    """One experience step of a stored phase."""

    trajectory_id: int
    task_key: str
    site: str
    phase: int
    index: int
    reward: float
    mc_return: float
    done: bool
    prompt: str
    completion: str
    completion_ids: list[int]
    advantage: float
    """The clamped A the phase's critic gave the step, before binarising."""

    def example(self, with_ids: bool = True) -> StepExample:
        """The step as the trainer reads it; ``with_ids`` False: the action as text, for an actor with another
        tokenizer than the one that generated it."""
        return StepExample(trajectory_id=self.trajectory_id, task_key=self.task_key, phase=self.phase,
                           index=self.index, prompt=self.prompt, next_prompt=self.prompt, completion=self.completion,
                           completion_ids=tuple(self.completion_ids) if with_ids else (), reward=self.reward,
                           done=self.done, mc_return=self.mc_return)


@dataclass(frozen=True)
class StoredPhase:
    steps: list[StoredStep]
    meta: dict[str, Any]

    @property
    def hyperparams(self) -> WebRLHyperparams:
        return parse_hyperparams(self.meta["hyperparams"])


def _critic_version(session: Any, run_id: int, phase: int) -> str:
    """The critic whose values the phase's actor trained on: the one its train stage recorded, or (a phase whose
    actor update has not finished) the latest critic that stored values for the run's steps of that phase."""
    row = session.scalar(select(m.Phase).where(m.Phase.run_id == run_id, m.Phase.index == phase))
    version = (row.metrics or {}).get("train.critic_version") if row is not None else None
    if not version:
        version = session.scalar(
            select(m.StepValue.critic_version).join(m.StepRow, m.StepRow.id == m.StepValue.step_id)
            .join(m.TrajectoryRow, m.TrajectoryRow.id == m.StepRow.trajectory_id)
            .where(m.StepValue.phase == phase, m.TrajectoryRow.run_id == run_id)
            .order_by(m.StepValue.id.desc()).limit(1))
    if not version:
        raise ValueError(f"phase {phase} of the run has no critic values yet (its critic has not trained)")
    return str(version)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of the tokenizer's vocabulary: a stored phase's action ids are reused only under the same one."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]


def export_phase(settings: Settings, run: str, phase: int, output: Path, tokenizer: Any) -> Path:
    """Write run ``run``'s phase ``phase`` (its experience with the critic's advantages) to the folder ``output``;
    prompts are rendered with ``tokenizer`` as the phase rendered them."""
    with session_scope(settings) as session:
        run_row = session.scalar(select(m.Run).where(m.Run.name == run))
        if run_row is None:
            raise ValueError(f"no run named {run!r}")
        critic = _critic_version(session, run_row.id, phase)
        values = session.execute(select(m.StepRow.trajectory_id, m.StepRow.index, m.StepValue.advantage)
                                 .join(m.StepValue, m.StepValue.step_id == m.StepRow.id)
                                 .where(m.StepValue.critic_version == critic)).all()
        clamped = {(t, i): a for t, i, a in values}
        prompt = actor_prompt_fn(tokenizer, max_tokens=settings.actor.max_prompt_tokens)
        options = run_row.options or {}
        gamma = parse_hyperparams(options["hyperparams"]).advantage.gamma
        orm_version = PipelineOptions.from_json(options).orm_version
        steps = []
        for row in session.scalars(select(m.TrajectoryRow).where(m.TrajectoryRow.id.in_({t for t, _ in clamped}))
                                   .order_by(m.TrajectoryRow.id)):
            label = label_of(row, orm_version)
            if label is None:
                raise ValueError(f"trajectory {row.id} has values of phase {phase} but no label by the run's ORM "
                                 f"({orm_version})")
            reward = float(label.reward)
            for ex in trajectory_examples(load_trajectory(row), row.id, row.phase, reward, prompt, gamma):
                if (row.id, ex.index) in clamped:
                    steps.append(StoredStep(row.id, ex.task_key, row.task.site, ex.phase, ex.index, ex.reward,
                                            ex.mc_return, ex.done, ex.prompt, ex.completion, list(ex.completion_ids),
                                            float(clamped[(row.id, ex.index)])))
        meta = {"run": run, "phase": phase, "critic_version": critic, "actor": Path(str(options.get("actor"))).name,
                "hyperparams": options["hyperparams"], "steps": len(steps),
                "tokenizer": tokenizer_fingerprint(tokenizer),
                "exported": time.strftime("%Y-%m-%d")}
    output.mkdir(parents=True, exist_ok=True)
    # each file appears whole; the meta, written last, counts the steps
    with written_whole(output / STEPS_FILE) as partial, partial.open("wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        for step in steps:
            out.write((json.dumps(asdict(step), sort_keys=True) + "\n").encode())
    write_text_whole(output / META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return output


def load_phase(folder: str | Path) -> StoredPhase:
    """The stored phase in ``folder``; ValueError naming the file when it is not one."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / META_FILE).read_text())
        with gzip.open(folder / STEPS_FILE, "rt", encoding="utf-8") as lines:
            steps = [StoredStep(**json.loads(line)) for line in lines]
    except (OSError, TypeError, ValueError) as exc:
        raise ValueError(f"{folder} is not a stored phase ({META_FILE} + {STEPS_FILE}): {exc}") from exc
    if meta.get("steps", len(steps)) != len(steps):  # an export killed between its two files
        raise ValueError(f"{folder}: {META_FILE} counts {meta['steps']} steps, {STEPS_FILE} holds {len(steps)}; "
                         "export the phase again")
    return StoredPhase(steps, meta)


def demonstration_steps(steps: list[ProbeStep], tasks: int, gamma: float) -> list[StepExample]:
    """The rehearsal pool of an offline update (``replay.demo_tasks``): every step of the first ``tasks`` tasks of an
    oracle step file (``webrl probe anchors``: one train task per template, templates in turn), as the trainer reads
    a run's successful demonstrations (reward 1, G_t = gamma^(T-1-t)). The phase's own pool is the demonstrations
    its phase 0 recorded (``data.demonstration_examples``); the file holds the same oracle on the same kind of task."""
    lengths: dict[str, int] = {}  # T of each task, in the file's order of tasks
    for s in steps:
        lengths[s.task_key] = max(lengths.get(s.task_key, 0), s.index + 1)
    ids = {key: -(number + 1) for number, key in enumerate(list(lengths)[:tasks])}  # no stored trajectory's id
    return [StepExample(trajectory_id=ids[s.task_key], task_key=s.task_key, phase=0, index=s.index, prompt=s.prompt,
                        next_prompt=s.prompt, completion=s.completion, completion_ids=(), reward=1.0,
                        done=s.index == lengths[s.task_key] - 1,
                        mc_return=gamma ** (lengths[s.task_key] - 1 - s.index))
            for s in steps if s.task_key in ids]


@dataclass
class UpdateResult:
    """What one re-run of the update did: its drift measurements, the per-epoch records, counts and time."""

    metrics: dict[str, Any]
    epochs: list[dict[str, float]]
    seconds: float
    model: Any = None
    tokenizer: Any = None


def rerun_update(settings: Settings, stored: StoredPhase, actor: str | Path, hp: WebRLHyperparams, *,
                 probe: list[ProbeStep] | None = None, max_steps: int | None = None, seed: int = 0,
                 keep_model: bool = False, probe_every_epoch: bool = False,
                 anchors: list[ProbeStep] | None = None,
                 contrast: list[ContrastIntent] | None = None,
                 demonstrations: list[StepExample] | None = None,
                 on_progress: ProgressHook | None = None) -> UpdateResult:
    """Train ``actor`` on ``stored``'s experience under ``hp`` (its objective, positives filter, optimisation and
    batching) and measure the update: the exact KL in every batch, the probe's flips after the last epoch (or every
    one). ``max_steps``: only the first that many trained steps (smoke runs). ``anchors``: the anchor steps
    ``actor.anchor_kl`` holds the policy on; ``contrast``: the train intents ``actor.intent_contrast`` draws twins
    from; ``demonstrations``: the rehearsal pool ``replay.demo_ratio`` samples from as a phase does when
    ``replay.demo_tasks`` > 0 (A = +1 steps joining the update, :func:`demonstration_steps`); ``on_progress``: the
    update's optimizer steps done of those planned."""
    started = time.perf_counter()
    model, tokenizer = load_for_training(str(actor), settings)
    context = int(getattr(model.config, "max_position_embeddings", 2048))
    max_length = min(settings.actor.max_prompt_tokens + COMPLETION_BUDGET, context)
    config = actor_loop_config(hp, seed)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    same_tokenizer = stored.meta.get("tokenizer") == tokenizer_fingerprint(tokenizer)  # else: re-tokenise the text
    examples = [s.example(with_ids=same_tokenizer) for s in stored.steps]
    clamped = torch.tensor([s.advantage for s in stored.steps])  # (N,)
    a = binarise(clamped, hp.advantage)  # (N,)
    trained, outside_band = positives_in_confidence_band(accelerator, prepared.model, tokenizer, examples, a,
                                                         trained_steps(a, clamped, examples, hp.actor), hp.actor,
                                                         batch_size=hp.batching.batch_size, max_length=max_length)
    gated = gate(a, trained, examples, stored.meta["phase"], hp.actor)
    chosen = gated.steps[:max_steps]
    pool = demonstrations if demonstrations and hp.replay.rehearses else []
    rehearsed = replay.select_demonstrations(pool, 0 if gated.skipped else gated.positives,
                                             seed=seed + int(stored.meta["phase"]), replay=hp.replay)
    summary = update_actor(accelerator, prepared, tokenizer, [examples[i] for i in chosen] + rehearsed,
                           step_advantages(a, chosen, len(rehearsed), hp.advantage), hp.actor, config,
                           max_length=max_length,
                           probe=probe, probe_every_epoch=probe_every_epoch, anchors=anchors, contrast=contrast,
                           experience=examples, on_progress=on_progress)
    metrics = {**last_epoch(summary.epochs, DRIFT_KEYS), **kl_bound_record(hp.actor, summary),
               "trained_steps": len(chosen), "demonstration_steps": len(rehearsed),
               "positives": sum(bool(a[i] > 0) for i in chosen), "optimizer_steps": summary.steps,
               "actor_skipped": int(gated.skipped), "positives_outside_confidence_band": outside_band,
               "positives_from_failed": positives_from_failed(a, examples, chosen),
               "train_seconds": round(summary.seconds, 1)}
    model = accelerator.unwrap_model(prepared.model) if keep_model else None
    return UpdateResult(metrics, summary.epochs, time.perf_counter() - started, model,
                        tokenizer if keep_model else None)


def setting(hp: WebRLHyperparams, overrides: dict[str, Any]) -> WebRLHyperparams:
    """``hp`` with ``{"group.field": value}`` replaced (``webrl.method.hyperparams.with_overrides``), validated."""
    from webrl.method.hyperparams import with_overrides

    return with_overrides(hp, overrides) if overrides else dataclasses.replace(hp)
