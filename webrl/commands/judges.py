"""``webrl train-orm``: train WebRL's outcome reward model on labelled sandbox trajectories and measure it.

WebRL released an ORM checkpoint but neither its training code nor its data, and never reported how often the
ORM is wrong. This command makes both: trajectories from policies of different quality, labels from the rule
evaluators, SFT towards YES/NO, and accuracy / precision / recall / F1 / calibration on held-out tasks.

1. Rollouts (``rollout.run``) on the train and test split tasks with every policy: the oracle, the oracle with
   its actions randomly corrupted (failures that look like real attempts) and the SFT actor. Each policy is
   one ``attempt`` (:data:`ORM_ATTEMPT_BASE` + its index) of phase 0, purpose ``"orm"``, so reruns reuse
   what is stored.
2. Labels: the evaluator's env score (1 = success). Train trajectories are balanced by down-sampling the
   larger class (seeded).
3. ``train.sft`` with kind "orm", starting from the SFT actor.
4. ``orm.score`` on the held-out test-split trajectories with the trained ORM and with the untrained start;
   metrics against the evaluator labels, a reliability diagram (PNG) and a JSON report.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import typer

from webrl.config import Settings, get_settings

log = logging.getLogger("webrl.judges")

#: ORM data is stored as phase 0 (before the curriculum), purpose "orm", attempts ORM_ATTEMPT_BASE + policy
#: index: far from the few attempts bootstrap and evaluation use, so (task, phase, attempt) keys never collide,
#: and the purpose keeps it out of every actor or critic training set.
ORM_DATA_PHASE = 0
ORM_ATTEMPT_BASE = 1000
ORM_PURPOSE = "orm"
SUCCESS_SCORE = 0.5  # env scores are 0/1; WebRL's build_rm_data labels YES when score > 0.5

#: Default policies: quality from perfect to poor, so both labels appear on every kind of task.
DEFAULT_POLICIES = ("oracle", "oracle:0.3", "oracle:0.6", "sft")


def parse_policy(text: str, sft_path: str, seed: int) -> dict[str, Any]:
    """``oracle`` | ``oracle:<corrupt>`` | ``sft`` | ``checkpoint:<path>`` | ``endpoint:<url>`` -> a policy spec."""
    kind, _, arg = text.partition(":")
    if kind == "oracle":
        corrupt = float(arg) if arg else 0.0
        if not 0.0 <= corrupt <= 1.0:
            raise ValueError(f"policy {text!r}: corruption must be in [0, 1]")
        return {"kind": "oracle", "corrupt": corrupt, "seed": seed}
    if kind == "sft":
        return {"kind": "checkpoint", "path": sft_path}
    if kind == "checkpoint" and arg:
        return {"kind": "checkpoint", "path": arg}
    if kind == "endpoint" and arg:
        return {"kind": "endpoint", "url": arg}
    raise ValueError(f"unknown policy {text!r}; use oracle, oracle:<corrupt>, sft, checkpoint:<path>, endpoint:<url>")


@dataclass
class TrainOrmOptions:
    """What ``webrl train-orm`` does; every field is a command-line option."""

    base: str  # the SFT actor: the ORM starts from it (and "sft" rollouts use it)
    output: str  # where the trained ORM is published
    policies: list[str] = field(default_factory=lambda: list(DEFAULT_POLICIES))
    train_tasks: int | None = None  # at most this many train-split tasks (all when None)
    test_tasks: int | None = None  # at most this many test-split tasks
    epochs: int = 2
    lr: float = 1e-4  # tiny model from the SFT actor; WebRL's 8B ORM used 5e-6 (llama3_full_orm_web.yaml)
    seed: int = 0
    max_minutes: float | None = None
    concurrency: int = 4
    threshold: float = 0.5
    report_dir: str | None = None  # default <artifacts>/reports/orm


def split_keys(settings: Settings, split: str, limit: int | None, seed: int) -> list[str]:
    """Task keys of a split (seeded sample of ``limit``)."""
    from webrl.db.repository import tasks_where
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        keys = [t.key for t in tasks_where(session, split=split)]
    if not keys:
        raise ValueError(f"no {split}-split tasks in the database; run `webrl tasks load` first")
    if limit is not None and limit < len(keys):
        keys = sorted(random.Random(seed).sample(keys, limit))
    return keys


def collect(keys: Sequence[str], policies: Sequence[dict[str, Any]], concurrency: int) -> list[int]:
    """Run every policy on every task (one attempt per policy); the stored trajectory ids."""
    from webrl.queue import dispatch

    ids: list[int] = []
    for attempt, policy in enumerate(policies):
        result = dispatch("rollout.run", {"task_keys": list(keys), "phase": ORM_DATA_PHASE,
                                          "attempt": ORM_ATTEMPT_BASE + attempt,
                                          "purpose": ORM_PURPOSE, "policy": policy, "concurrency": concurrency})
        log.info("policy %s: %d trajectories, mean env score %.3f", policy, len(result["trajectory_ids"]),
                 result.get("mean_env_score", 0.0))
        ids.extend(int(i) for i in result["trajectory_ids"])
    return ids


def evaluator_labels(settings: Settings, ids: Sequence[int]) -> dict[int, int]:
    """Trajectory id -> 1 (success) / 0 from the rule evaluators; unscored trajectories are left out."""
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        rows = session.execute(select(m.Trajectory.id, m.Trajectory.env_score).where(m.Trajectory.id.in_(list(ids))))
        return {int(i): int(score >= SUCCESS_SCORE) for i, score in rows if score is not None}


def balance(labels: dict[int, int], seed: int) -> list[int]:
    """Equal numbers of successes and failures: the larger class down-sampled (seeded), ids sorted."""
    yes = sorted(i for i, y in labels.items() if y == 1)
    no = sorted(i for i, y in labels.items() if y == 0)
    n = min(len(yes), len(no))
    if n == 0:
        raise ValueError(f"cannot balance {len(yes)} successes against {len(no)} failures: need both; "
                         "add a weaker policy (oracle:<corrupt>) or a stronger one (oracle)")
    rng = random.Random(seed)
    return sorted(rng.sample(yes, n) + rng.sample(no, n))


def score_with(orm_path: str, ids: Sequence[int], threshold: float) -> list[float]:
    """P(YES) of each trajectory under the ORM at ``orm_path`` (``orm.score``; labels stored)."""
    from webrl.queue import dispatch

    result = dispatch("orm.score", {"trajectory_ids": list(ids), "orm": orm_path, "threshold": threshold})
    return [float(p) for p in result["p"]]


def measure(named_paths: dict[str, str], labels: dict[int, int], threshold: float, report_dir: Path
            ) -> dict[str, Any]:
    """Metrics of each ORM against the evaluator labels, plus the calibration PNG of all of them."""
    from webrl.models.orm import classification_metrics, expected_calibration_error, plot_calibration

    ids = sorted(labels)
    y = [labels[i] for i in ids]
    curves: dict[str, tuple[list[float], list[int]]] = {}
    metrics: dict[str, Any] = {}
    for name, path in named_paths.items():
        p = score_with(path, ids, threshold)
        curves[name] = (p, y)
        metrics[name] = {**classification_metrics(p, y, threshold), "ece": expected_calibration_error(p, y)}
    report_dir.mkdir(parents=True, exist_ok=True)
    png = plot_calibration(curves, report_dir / "calibration.png")
    return {"metrics": metrics, "calibration_png": str(png)}


def train_orm(settings: Settings, options: TrainOrmOptions) -> dict[str, Any]:
    """Collect, label, balance, train, measure; returns (and writes) the report."""
    from webrl.queue import dispatch

    policies = [parse_policy(p, options.base, options.seed + i) for i, p in enumerate(options.policies)]
    train_keys = split_keys(settings, "train", options.train_tasks, options.seed)
    test_keys = split_keys(settings, "test", options.test_tasks, options.seed)
    train_labels = evaluator_labels(settings, collect(train_keys, policies, options.concurrency))
    test_labels = evaluator_labels(settings, collect(test_keys, policies, options.concurrency))
    balanced = balance(train_labels, options.seed)
    log.info("ORM data: %d train trajectories (%d successes) -> %d balanced; %d test", len(train_labels),
             sum(train_labels.values()), len(balanced), len(test_labels))
    trained = dispatch("train.sft", {"base": options.base, "output": options.output, "kind": "orm",
                                     "trajectory_ids": balanced, "epochs": options.epochs, "lr": options.lr,
                                     "seed": options.seed, "max_minutes": options.max_minutes})
    report_dir = Path(options.report_dir or Path(str(settings.artifacts_dir)) / "reports" / "orm")
    measured = measure({"untrained": options.base, "trained": trained["path"]}, test_labels, options.threshold,
                       report_dir)
    report = {"options": asdict(options), "policies": policies, "orm": trained,
              "data": {"train_trajectories": len(train_labels), "train_successes": sum(train_labels.values()),
                       "train_balanced": len(balanced), "test_trajectories": len(test_labels),
                       "test_successes": sum(test_labels.values())},
              **measured}
    (report_dir / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def register(app: typer.Typer) -> None:
    @app.command("train-orm")
    def train_orm_command(
        base: str = typer.Option(None, help="SFT actor folder to start from. Default: <artifacts>/models/actor-sft."),
        output: str = typer.Option(None, help="Where to publish the ORM. Default: <artifacts>/models/orm."),
        policy: list[str] = typer.Option(list(DEFAULT_POLICIES), help="Rollout policies: oracle, oracle:<corrupt>, "
                                         "sft, checkpoint:<path>, endpoint:<url>. Repeat the option."),
        train_tasks: int = typer.Option(None, min=1, help="At most this many train-split tasks."),
        test_tasks: int = typer.Option(None, min=1, help="At most this many test-split tasks."),
        epochs: int = typer.Option(2, min=1),
        lr: float = typer.Option(1e-4, min=0.0),
        seed: int = typer.Option(0),
        max_minutes: float = typer.Option(None, min=0.0, help="Wall-clock budget of the SFT."),
        concurrency: int = typer.Option(4, min=1, help="Episodes in flight per rollout."),
        threshold: float = typer.Option(0.5, min=0.0, max=1.0, help="reward = 1 if p >= threshold."),
        report_dir: str = typer.Option(None, help="Report folder. Default: <artifacts>/reports/orm."),
    ) -> None:
        """Train the ORM on evaluator-labelled sandbox trajectories and report how often it is wrong."""
        settings = get_settings()
        artifacts = Path(str(settings.artifacts_dir))
        base = base or str(artifacts / "models" / "actor-sft")
        if not (Path(base) / "config.json").is_file():
            raise typer.BadParameter(f"{base} is not a model folder; run `webrl bootstrap` or pass --base")
        try:
            [parse_policy(p, base, seed) for p in policy]
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--policy") from exc
        options = TrainOrmOptions(base=base, output=output or str(artifacts / "models" / "orm"), policies=policy,
                                  train_tasks=train_tasks, test_tasks=test_tasks, epochs=epochs, lr=lr, seed=seed,
                                  max_minutes=max_minutes, concurrency=concurrency, threshold=threshold,
                                  report_dir=report_dir)
        from webrl.commands.train import sandbox_if_needed
        from webrl.db.migrate import upgrade

        try:
            upgrade(settings)
            with sandbox_if_needed(settings):
                report = train_orm(settings, options)
        except ValueError as exc:
            typer.echo(f"train-orm: {exc}", err=True)
            raise typer.Exit(2) from exc
        for name, values in report["metrics"].items():
            typer.echo(f"{name}: accuracy {values['accuracy']:.3f} precision {values['precision']:.3f} "
                       f"recall {values['recall']:.3f} F1 {values['f1']:.3f} ECE {values['ece']:.3f} "
                       f"(n={int(values['n'])})")
        typer.echo(f"ORM at {report['orm']['path']}; calibration plot {report['calibration_png']}")
