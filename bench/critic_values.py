"""How well a phase's critic values states it never trained on, against a critic of heads alone on the frozen
backbone (``critic.train_backbone`` False) trained on exactly the same steps, in the same run.

A finished pipeline phase records every step its critic trained on (``step_values``). This bench takes those steps,
trains the heads on them (each distinct state encoded once; ``--epochs`` passes, ``--lr``; on the frozen backbone
of each ``--backbone-start``: the base's states or the SFT actor's), and values the start states (``--all-states``:
every state) of the run's evaluation episodes before that phase (held-out test tasks; phase 0: the SFT actor's
greedy episodes, judged by the sandbox evaluators; ``--held-out validate``: the validation episodes of the phase and
before, train-split tasks outside its rollouts) with every critic. Per critic: seconds
to train (the published one: from its manifest), ROC AUC of V(s_0) against the episode's success (what the
curriculum filter asks: will this task be solved?), AUC over every state, mean V(s_0) against the success rate, and
the share of start states the filter's band [value_low, value_high] would keep.

    WEBRL_HOME=<home of the run> .venv/bin/python bench/critic_values.py --run cpu-demo [--phase 1]
        [--epochs 1,20] [--lr 1e-3] [--limit 165] [--backbone-start base,actor] [--held-out eval|validate]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.trainer.critic_heads import CriticHeads, distinct_states, state_features, train_heads_on_states
from services.trainer.data import PromptFn, StepExample, actor_prompt_fn, state_pair_items, trajectory_examples
from services.trainer.training_loop import LoopConfig, make_accelerator
from webrl.config import get_settings
from webrl.db import models as m
from webrl.db.repository import load_trajectory
from webrl.db.session import session_scope
from webrl.method.hyperparams import DEFAULTS
from webrl.models.critic import CriticModel, critic_value, value_head
from webrl.models.examples import encode_prompt, pad_id_of
from webrl.models.orm import roc_auc
from webrl.orchestration.bootstrap import COMPLETION_BUDGET


@dataclass
class HeldOut:
    """The states of the held-out episodes, each with its episode's outcome; ``start`` marks each s_0."""

    prompts: list[str]
    success: list[int]
    start: list[bool]


def run_row(session: Session, name: str) -> m.Run:
    run = session.scalars(select(m.Run).where(m.Run.name == name)).first()
    if run is None:
        raise SystemExit(f"no run named {name!r} in this home (WEBRL_HOME)")
    return run


def critic_of_phase(session: Session, run: m.Run, phase: int) -> m.Checkpoint:
    """The critic that phase ``phase`` of ``run`` published (its pipeline state names the version)."""
    row = session.scalars(select(m.Phase).where(m.Phase.run_id == run.id, m.Phase.index == phase)).first()
    version = (row.state or {}).get("critic_version") if row is not None else None
    checkpoint = session.scalars(select(m.Checkpoint).where(m.Checkpoint.role == "critic",
                                                            m.Checkpoint.version == version)).first()
    if checkpoint is None:
        raise SystemExit(f"phase {phase} of run {run.name!r} has published no critic yet")
    return checkpoint


def trained_steps(session: Session, critic_version: str, prompt: PromptFn, gamma: float) -> list[StepExample]:
    """The steps the published critic trained on (its ``step_values``), as the trainer built them."""
    step_ids = select(m.StepValue.step_id).where(m.StepValue.critic_version == critic_version)
    wanted: dict[int, set[int]] = {}
    for step in session.scalars(select(m.StepRow).where(m.StepRow.id.in_(step_ids))).all():
        wanted.setdefault(step.trajectory_id, set()).add(step.index)
    examples: list[StepExample] = []
    for row in session.scalars(select(m.TrajectoryRow).where(m.TrajectoryRow.id.in_(wanted))).all():
        reward = float(max(row.labels, key=lambda label: label.id).reward)
        examples += [ex for ex in trajectory_examples(load_trajectory(row), row.id, row.phase, reward, prompt, gamma)
                     if ex.index in wanted[row.id]]
    return examples


def held_out(session: Session, run_id: int, phase: int, prompt: PromptFn, limit: int, all_states: bool,
             episodes: str = "eval") -> HeldOut:
    """The states of the run's greedy episodes no critic of phase ``phase`` trained on (start states only unless
    ``all_states``), each labelled with its episode's success by the evaluators: ``eval``, its test evaluations of
    phases before ``phase``; ``validate``, the validation episodes (train-split tasks outside its rollouts) of the
    phase's updated actor and those before it."""
    before = m.TrajectoryRow.phase < phase if episodes == "eval" else m.TrajectoryRow.phase <= phase
    rows = session.scalars(select(m.TrajectoryRow).where(m.TrajectoryRow.run_id == run_id,
                                                          m.TrajectoryRow.purpose == episodes, before)
                           .order_by(m.TrajectoryRow.id).limit(limit)).all()
    if not rows:
        raise SystemExit(f"no {episodes!r} episodes for phase {phase}'s critic to be valued on (a phase 0 evaluation "
                         "read back from a stored one has none: try --held-out validate)")
    out = HeldOut([], [], [])
    for row in rows:
        traj = load_trajectory(row)
        for t in range(len(traj.steps) if all_states else min(1, len(traj.steps))):
            out.prompts.append(prompt(traj.intent, traj.steps[:t], traj.steps[t].observation.html))
            out.success.append(int((row.env_score or 0.0) > 0))
            out.start.append(t == 0)
    return out


def scores(values: list[float], data: HeldOut, low: float, high: float) -> dict:
    """AUC of V(s0) and of V(s) over every held-out state, mean V(s0), success rate, share of s0 in the band."""
    starts = [v for v, s in zip(values, data.start, strict=True) if s]
    start_labels = [y for y, s in zip(data.success, data.start, strict=True) if s]
    auc_start, auc_all = roc_auc(starts, start_labels), roc_auc(values, data.success)
    return {"auc_start": None if auc_start is None else round(auc_start, 3),
            "auc_states": None if auc_all is None else round(auc_all, 3),
            "mean_v_start": round(statistics.mean(starts), 3), "success_rate": round(statistics.mean(start_labels), 3),
            "in_band": round(sum(low <= v <= high for v in starts) / len(starts), 3)}


def backbone_starts(text: str) -> str:
    """``--backbone-start``: each of "base" and "actor" at most once."""
    starts = text.split(",")
    if not starts or any(s not in ("base", "actor") for s in starts) or len(set(starts)) < len(starts):
        raise argparse.ArgumentTypeError(f"{text!r}: give base, actor or both, comma-separated")
    return text


def main(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    settings = get_settings()
    band = (DEFAULTS.curriculum.value_low, DEFAULTS.curriculum.value_high)
    max_tokens = settings.actor.max_prompt_tokens
    with session_scope(settings) as session:
        run = run_row(session, args.run)
        published = critic_of_phase(session, run, args.phase)
        tokenizer = AutoTokenizer.from_pretrained(published.path, local_files_only=True)
        prompt = actor_prompt_fn(tokenizer, max_tokens=max_tokens)
        items = trained_steps(session, published.version, prompt, DEFAULTS.advantage.gamma)
        data = held_out(session, run.id, args.phase, prompt, args.limit, args.all_states, args.held_out)
        actor = run.options["actor"]
    max_length = max_tokens + COMPLETION_BUDGET  # the pipeline's training length (Pipeline._train_max_length)
    encoded = state_pair_items(tokenizer, items, max_length)
    states = [encode_prompt(tokenizer, p, max_length=max_length) for p in data.prompts]
    pad = pad_id_of(tokenizer)
    print(f"{len(items)} trained steps ({sum(ex.mc_return > 0 for ex in items)} with G > 0); held out: "
          f"{sum(data.start)} episodes, {len(states)} states", flush=True)

    rows = {}
    whole = CriticModel.from_pretrained(published.path, settings=settings).eval()
    started = time.perf_counter()
    with torch.no_grad():
        v = critic_value(CriticHeads(whole)(state_features(whole, states, pad, 4))).tolist()
    kind = "heads only" if published.metrics.get("train_backbone") is False else "LoRA + heads"
    rows[f"published ({kind}, {published.metrics.get('steps')} steps)"] = {
        "train_seconds": round(float(published.metrics.get("seconds", 0.0)), 1),
        "value_seconds": round(time.perf_counter() - started, 1), **scores(v, data, *band)}
    del whole
    train_rows = distinct_states(encoded)
    for start in args.backbone_start.split(","):
        # the heads-only critics of one start share its frozen backbone: every state is encoded once for all of them
        frozen = CriticModel.from_backbone(actor, seed=0, settings=settings, head_init_std=None,
                                           from_actor=start == "actor")
        started = time.perf_counter()
        train_features = state_features(frozen, train_rows.states, pad, 4)
        encode_seconds = time.perf_counter() - started
        test_features = state_features(frozen, states, pad, 4)
        for epochs in (int(e) for e in args.epochs.split(",")):
            config = LoopConfig(lr=args.lr, epochs=epochs, batch_size=4, seed=0)
            torch.manual_seed(0)
            hidden = int(frozen.config.hidden_size)
            critic = CriticModel(frozen.backbone, value_head(hidden, None), value_head(hidden, None))
            started = time.perf_counter()
            train_heads_on_states(make_accelerator(config), critic, train_features, train_rows, encoded, config)
            seconds = encode_seconds + time.perf_counter() - started
            with torch.no_grad():
                v = critic_value(CriticHeads(critic)(test_features)).tolist()
            rows[f"heads only on the {start}'s states, {epochs} pass(es)"] = {
                "train_seconds": round(seconds, 1), **scores(v, data, *band)}
        del frozen
    table = Table(title=f"critic of phase {args.phase} of run {args.run}: held-out values")
    columns = ["critic", "train s (published: in its run)", "AUC V(s0)", "AUC all states", "mean V(s0)", "success",
               "s0 in band"]
    for column in columns:
        table.add_column(column)
    for name, r in rows.items():
        table.add_row(name, str(r["train_seconds"]), str(r["auc_start"]), str(r["auc_states"]),
                      str(r["mean_v_start"]), str(r["success_rate"]), str(r["in_band"]))
    Console().print(table)
    print(json.dumps({"run": args.run, "phase": args.phase, "trained_steps": len(items), "rows": rows}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default="cpu-demo", help="the pipeline run's name")
    parser.add_argument("--phase", type=int, default=1, help="the phase whose critic and steps to use")
    parser.add_argument("--epochs", default="1,20", help="passes of the heads-only critic, comma-separated")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate of the heads-only critic")
    parser.add_argument("--backbone-start", default="base,actor", type=backbone_starts,
                        help="the heads-only critics' backbones (critic.backbone_start), comma-separated: base (the "
                        "pretrained base's states), actor (the SFT actor's; the same on a full-folder actor)")
    parser.add_argument("--limit", type=int, default=165, help="held-out episodes at most")
    parser.add_argument("--held-out", choices=("eval", "validate"), default="eval",
                        help="the episodes to value: the run's test evaluations before the phase (eval), or the "
                        "validation episodes of the phase and before (validate)")
    parser.add_argument("--all-states", action="store_true", help="value every state of the held-out episodes, not "
                        "only their start states (a forward pass per state and critic)")
    main(parser.parse_args())
