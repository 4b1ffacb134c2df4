"""The run report: ``report.md`` with the phase table, PNG plots, the last phase against the SFT actor on the same
test tasks (:mod:`webrl.method.paired_stats`), the test tasks solved per phase and the checkpoint lineage.

Phases are compared only on the same tasks: each phase names the test tasks it evaluated (``evaluate.keys``) and the
run's fixed sample (``evaluate.sample``), and every phase whose tasks hold the sample is also scored on it.

Tasks of one intent template succeed or fail together, so when the evaluated tasks' templates are known
(``evaluate.templates``, and which of them training saw: ``evaluate.seen_templates``) every interval is the
template-cluster bootstrap and success is also split into seen-template, held-out-template and the macro average
over templates (:mod:`webrl.method.template_split`)."""

from __future__ import annotations

import contextlib
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.method.paired_stats import RESAMPLES, PairedComparison, paired_comparison
from webrl.method.rewards import EVALUATOR_LABELS
from webrl.method.seed_comparison import TemplateMovement, task_numbers, template_movements
from webrl.method.template_split import (
    GroupComparison,
    GroupSuccess,
    TemplateGroups,
    group_comparison,
    group_success,
)
from webrl.store.checkpoints import list_checkpoints
from webrl.store.template_groups import template_groups_in

SITES = ("shopping", "shopping_admin", "reddit", "gitlab")
CALIBRATION_BINS = 10
#: The "ORM acc." cell of a phase whose rewards came from the sandbox evaluators: no ORM judged, so there is no
#: agreement to measure (the evaluators compared with themselves would read 100%).
NO_ORM = "no ORM"
FLIPS_NOTE = ("flips: the share of a fixed set of probe steps whose greedy action the phase's training changed, "
              "overall and per site.")
ORM_COLUMN_NOTE = ("ORM acc.: how often the ORM's reward agreed with the sandbox evaluators on the phase's rollouts; "
                   f'"{NO_ORM}": the evaluators gave the reward, so no ORM was measured.')


def phase_rows(settings: Settings, run: str) -> list[dict[str, Any]]:
    """One dict per phase of ``run`` with the metrics each stage recorded, and ``run.orm``: the ORM the run
    was started with ("" when the sandbox evaluators gave the rewards)."""
    with session_scope(settings) as s:
        return phase_rows_in(s, run)


def phase_rows_in(session: Session, run: str) -> list[dict[str, Any]]:
    """:func:`phase_rows` read in ``session`` (the viewer's is read-only). Raises ValueError for an unknown run."""
    run_row = _run(session, run)
    phases = session.scalars(select(m.Phase).where(m.Phase.run_id == run_row.id).order_by(m.Phase.index)).all()
    orm = str((run_row.options or {}).get("orm") or "")
    rows = [{"phase": p.index, "status": p.status, "run.orm": orm, **p.metrics} for p in phases]
    add_evaluated_keys(session, run_row.id, rows)
    add_subset_success(rows, subset_keys(rows))
    add_templates(session, rows)
    return rows


def _run(session: Session, run: str) -> m.Run:
    run_row = session.scalar(select(m.Run).where(m.Run.name == run))
    if run_row is None:
        raise ValueError(f"no run named {run!r}")
    return run_row


def add_evaluated_keys(session: Session, run_id: int, rows: list[dict[str, Any]]) -> None:
    """Give every evaluated phase that does not name its tasks ``evaluate.keys``: the test tasks of its evaluation
    episodes (phases recorded before the evaluate stage named them; ``webrl eval --run`` always did)."""
    unnamed = {r["phase"] for r in rows if "evaluate.solved" in r and "evaluate.keys" not in r}
    if not unnamed:
        return
    episodes = session.execute(
        select(m.TrajectoryRow.phase, m.Task.key).join(m.Task, m.TrajectoryRow.task_id == m.Task.id)
        .where(m.TrajectoryRow.run_id == run_id, m.TrajectoryRow.purpose == "eval", m.TrajectoryRow.phase.in_(unnamed)))
    keys: dict[int, set[str]] = {}
    for phase, key in episodes:
        keys.setdefault(phase, set()).add(key)
    for row in rows:
        if row["phase"] in unnamed and keys.get(row["phase"]):
            row["evaluate.keys"] = sorted(keys[row["phase"]])


def add_templates(session: Session, rows: list[dict[str, Any]]) -> None:
    """Give every phase that names its test tasks ``evaluate.templates`` ({task: template} of those whose template
    is known) and ``evaluate.seen_templates`` (the ones among them a train-split task shares)."""
    if not any(task_set(r) for r in rows):
        return
    groups = template_groups_in(session)
    for row in rows:
        keys = task_set(row) or frozenset()
        templates = {key: groups.template_of[key] for key in sorted(keys) if key in groups.template_of}
        if templates:
            row["evaluate.templates"] = templates
            row["evaluate.seen_templates"] = sorted(set(templates.values()) & groups.seen)


def row_groups(rows: list[dict[str, Any]]) -> TemplateGroups:
    """The templates the phases' rows name (:func:`add_templates`), as one :class:`TemplateGroups`."""
    template_of = {key: t for r in rows for key, t in (r.get("evaluate.templates") or {}).items()}
    seen = frozenset(t for r in rows for t in r.get("evaluate.seen_templates", ()))
    return TemplateGroups(template_of=template_of, seen=seen)


def task_set(row: dict[str, Any]) -> frozenset[str] | None:
    """The test tasks the phase evaluated (``evaluate.keys``); None when unknown or not evaluated."""
    keys = row.get("evaluate.keys")
    return frozenset(keys) if keys else None


def subset_keys(rows: list[dict[str, Any]]) -> set[str]:
    """The run's fixed sample of test tasks, the one every phase is scored on: as the evaluate stage records it
    (``evaluate.sample``), else the tasks of the first phase that evaluated a subset (runs recorded before the
    sample was); empty when every phase evaluated every task."""
    sample = next((r["evaluate.sample"] for r in rows if r.get("evaluate.sample")), None)
    if sample is not None:
        return set(sample)
    subset = next((task_set(r) for r in rows if r.get("evaluate.subset") and task_set(r)), None)
    return set(subset or ())


def add_subset_success(rows: list[dict[str, Any]], keys: set[str]) -> None:
    """Give every phase that evaluated all of the sample ``keys`` ``evaluate.success_subset``: its success on those
    tasks alone (a phase that evaluated every task is counted on the sample), so the phases compare on the same
    tasks; a phase that evaluated other tasks gets none."""
    if not keys:
        return
    for row in rows:
        evaluated = task_set(row)
        if "evaluate.solved" in row and evaluated is not None and keys <= evaluated:
            row["evaluate.success_subset"] = len(set(row["evaluate.solved"]) & keys) / len(keys)
            row["evaluate.subset_size"] = len(keys)


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None or value == "":
        return "-"
    if pct and isinstance(value, int | float) and not isinstance(value, bool):
        return f"{100 * value:.1f}%"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def phase_seconds(row: dict[str, Any]) -> float:
    """Wall-clock seconds of a phase: the sum of its stages' ``<stage>.seconds``."""
    return float(sum(v for k, v in row.items() if k.endswith(".seconds") and isinstance(v, int | float)))


#: The phase table's minutes columns: each names the stages whose ``<stage>.seconds`` it adds up ("min other": the
#: phase's stages named by none of them, generate, filter and label). The validate stage's greedy episodes count as
#: evaluation.
MINUTES_COLUMNS: dict[str, tuple[str, ...]] = {
    "min rollout": ("rollout", "seed-rollout"),
    "min train": ("train",),
    "min eval": ("evaluate", "validate"),
}


def stage_minutes(row: dict[str, Any]) -> list[Any]:
    """The phase's minutes per :data:`MINUTES_COLUMNS` column, then the rest ("min other"), each rounded to 0.1
    (None where the phase recorded none of the column's stages)."""
    columns: list[float | None] = []
    for stages in MINUTES_COLUMNS.values():
        seconds = [row[f"{stage}.seconds"] for stage in stages if isinstance(row.get(f"{stage}.seconds"), int | float)]
        columns.append(float(sum(seconds)) if seconds else None)
    other = max(phase_seconds(row) - sum(v for v in columns if v is not None), 0.0)
    return [round(v / 60, 1) if v is not None else None for v in [*columns, other]]


def orm_accuracy_cell(row: dict[str, Any]) -> str:
    """The phase's ORM agreement with the evaluators, or :data:`NO_ORM` when no ORM judged its rollouts."""
    judge = row.get("label.judge", row.get("seed-rollout.judge"))
    if judge is None and "run.orm" in row:  # phases recorded before stages named their judge: the run's --orm
        judge = "orm" if row["run.orm"] else "evaluators"
    if judge == "evaluators":
        return NO_ORM
    return _fmt(row.get("label.orm_accuracy", row.get("seed-rollout.orm_accuracy")), pct=True)


def log_ratio_k1(row: dict[str, Any]) -> Any:
    """The phase's k1 estimate, mean per-token log(pi / pi_ref) on the trained samples (``train.log_ratio_k1``;
    phases recorded before the exact KL was measured stored it as ``train.kl``)."""
    return row.get("train.log_ratio_k1", row.get("train.kl"))


def rollouts_cell(row: dict[str, Any]) -> str:
    """The phase's training episodes, with the attempts they took where its unsolved tasks were tried again
    (``rollout.min_solved``): "46 (2 attempts)"."""
    cell = _fmt(row.get("rollout.rollouts", row.get("seed-rollout.rollouts")))
    attempts = row.get("rollout.attempts")
    return f"{cell} ({attempts} attempts)" if isinstance(attempts, int) and attempts > 1 else cell


def positive_steps_cell(row: dict[str, Any]) -> str:
    """The steps with A > 0 the phase's actor update had (``train.positive_steps``) with the replayed ones among them,
    and "actor kept" where the phase's own were fewer than ``actor.min_new_positive_steps`` so the actor was published
    unchanged, or "update refused" where the validate stage published the start actor again
    (``evaluation.validation_tasks``): "12 (3 replayed), update refused (validation: 9 lost, 1 gained of 40)", with
    "; net loss above the margin of 2" where the non-inferiority margin refused it and the sign test would not."""
    cell = _fmt(row.get("train.positive_steps"))
    if row.get("train.replayed_positive_steps") is not None:
        cell += f" ({_fmt(row['train.replayed_positive_steps'])} replayed)"
    if row.get("validate.accepted") is False:
        why = (f"; net loss above the margin of {row.get('validate.margin')}"
               if row.get("validate.refused_by") == "margin" else "")
        return (f"{cell}, update refused (validation: {row.get('validate.lost')} lost, "
                f"{row.get('validate.gained')} gained of {row.get('validate.tasks')}{why})")
    return f"{cell}, actor kept" if row.get("train.actor_skipped") else cell


def kl_cell(row: dict[str, Any]) -> str:
    """The phase's exact KL after its last epoch, and where ``actor.kl_bound`` stopped its update: "0.0612 (stopped
    before step 19 at 0.1043)"."""
    cell = _fmt(row.get("train.kl_exact"))
    step = row.get("train.kl_stopped_at_step")
    if step is None:
        return cell
    return f"{cell} (stopped before step {step} at {_fmt(row.get('train.kl_exact_at_stop'))})"


def kl_bound_note(rows: list[dict[str, Any]]) -> str:
    """The sentence under the phase table that checks each trained phase's exact KL against the run's
    ``actor.kl_bound``; "" when no phase recorded a bound."""
    bounded = [r for r in rows if r.get("train.kl_bound") is not None]
    if not bounded:
        return ""
    bounds = sorted({float(r["train.kl_bound"]) for r in bounded})
    beyond = [r["phase"] for r in bounded if r.get("train.kl_stopped_at_step") is not None
              or (r.get("train.kl_exact") is not None and r["train.kl_exact"] > r["train.kl_bound"])]
    verdict = (f"phase {', '.join(map(str, beyond))} reached it (the update stopped there)" if beyond
               else "every phase's update stayed within it")
    return (f"KL exact: KL(pi_ref || pi_theta) per action token, the mean over the last epoch's batches; bound "
            f"{' / '.join(_fmt(b) for b in bounds)} (`actor.kl_bound`, on the mean over an epoch's worth of batches, "
            "checked before each optimizer step): "
            f"{verdict}.")


def phase_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The phase table of ``report.md``, the viewer and the terminal (``webrl train``): header and one row per
    phase ("-" where a phase did not record the number)."""
    subset = any("evaluate.success_subset" in r for r in rows)
    header = ["phase", "generated", "kept", "rollouts", "ORM acc.", "reward rate",
              *[f"test {s}" for s in SITES], "test overall", *(["test subset"] if subset else []),
              "A > 0 steps", "actor loss", "critic loss", "KL exact", "k1", "flips", "pos. from failed",
              *MINUTES_COLUMNS,
              "min other", "minutes"]
    body = []
    for r in rows:
        reward = r.get("label.reward_rate", r.get("seed-rollout.reward_rate"))
        body.append([
            str(r["phase"]), _fmt(r.get("generate.generated")), _fmt(r.get("filter.kept")), rollouts_cell(r),
            orm_accuracy_cell(r), _fmt(reward, pct=True),
            *[_fmt(r.get(f"evaluate.success_{s}"), pct=True) for s in SITES],
            _fmt(r.get("evaluate.success"), pct=True),
            *([_fmt(r.get("evaluate.success_subset"), pct=True)] if subset else []),
            positive_steps_cell(r), _fmt(r.get("train.actor_loss")), _fmt(r.get("train.critic_loss")),
            kl_cell(r),
            _fmt(log_ratio_k1(r)), _fmt(r.get("train.flips"), pct=True),
            _fmt(r.get("train.positives_from_failed"), pct=True), *map(_fmt, stage_minutes(r)),
            _fmt(round(phase_seconds(r) / 60, 1)),
        ])
    return header, body


def flips_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per site, the share of the probe steps whose greedy action the phase's training changed (``train.flips``,
    ``train.flips_<site>``): one row per phase that measured it."""
    header = ["phase", "flips", *[f"flips {s}" for s in SITES]]
    body = [[str(r["phase"]), _fmt(r["train.flips"], pct=True),
             *[_fmt(r.get(f"train.flips_{s}"), pct=True) for s in SITES]] for r in rows if "train.flips" in r]
    return header, body


def calibration_points(settings: Settings, run: str) -> list[tuple[float, float]]:
    """(ORM P(YES), evaluator score) for every trajectory of ``run`` an ORM judged and an evaluator scored: none
    for a run rewarded by the evaluators, whatever else the home's ORMs judged."""
    with session_scope(settings) as s:
        run_id = s.scalar(select(m.Run.id).where(m.Run.name == run))
        return calibration_points_in(s, run_id=run_id) if run_id is not None else []


def calibration_points_in(session: Session, run_id: int | None = None) -> list[tuple[float, float]]:
    """:func:`calibration_points` read in ``session``: of the trajectories of run ``run_id``, or of every one."""
    query = (select(m.OrmLabel.p_yes, m.TrajectoryRow.env_score)
             .join(m.TrajectoryRow, m.TrajectoryRow.id == m.OrmLabel.trajectory_id)
             .where(m.TrajectoryRow.env_score.is_not(None), m.OrmLabel.orm_version != EVALUATOR_LABELS))
    if run_id is not None:
        query = query.where(m.TrajectoryRow.run_id == run_id)
    return [(float(p), float(score)) for p, score in session.execute(query).all()]


@dataclass(frozen=True)
class SuccessSeries:
    """One line of the success plot: its values at the phases scored on one set of tasks."""

    label: str  # names the tasks and their count
    values: list[float | None]  # success (0..1) per evaluated phase, in order; None: not on these tasks
    style: str  # "overall" (bold), "sample", "site" or "other"
    site: str | None = None  # the site of a "site" line


def success_series(rows: list[dict[str, Any]]) -> tuple[list[int], list[SuccessSeries]]:
    """The evaluated phases and the lines of the success plot. A line only has values at phases scored on one set
    of tasks, so it never joins numbers from different task sets: the fixed sample (``evaluate.success_subset``,
    every phase that evaluated it), then each distinct set of evaluated tasks, the largest as the bold overall line
    with the per-site lines. A phase whose tasks are unknown stands alone."""
    evaluated = [r for r in rows if "evaluate.success" in r]
    groups = _task_groups(evaluated)
    sample = frozenset(subset_keys(rows))
    series: list[SuccessSeries] = []
    if any("evaluate.success_subset" in r for r in evaluated) and groups[0][0] != sample:
        series.append(SuccessSeries(f"fixed sample, {len(sample)} tasks",
                                    [r.get("evaluate.success_subset") for r in evaluated], "sample"))
    for rank, (tasks, members) in enumerate(groups):
        if series and tasks == sample:  # the sample's own phases: on the sample line already
            continue
        n = len(tasks) if isinstance(tasks, frozenset) else evaluated[members[0]].get("evaluate.n", "?")
        if rank == 0:
            series.append(SuccessSeries(f"overall, {n} tasks", _on(evaluated, members, "evaluate.success"), "overall"))
            series += [SuccessSeries(f"{site} (of the {n})", _on(evaluated, members, f"evaluate.success_{site}"),
                                     "site", site) for site in SITES]
        else:
            series.append(SuccessSeries(f"overall, {n} other tasks", _on(evaluated, members, "evaluate.success"),
                                        "other"))
    return [r["phase"] for r in evaluated], [s for s in series if any(v is not None for v in s.values)]


def _task_groups(evaluated: list[dict[str, Any]]) -> list[tuple[Any, list[int]]]:
    """The phases (positions in ``evaluated``) grouped by the tasks they evaluated, the most tasks first (a phase
    whose tasks are unknown is a group of its own, after the known ones)."""
    groups: dict[Any, list[int]] = {}
    for i, r in enumerate(evaluated):
        groups.setdefault(task_set(r) or ("unknown", r["phase"]), []).append(i)
    return sorted(groups.items(), key=lambda item: -len(item[0]) if isinstance(item[0], frozenset) else 1)


def _on(evaluated: list[dict[str, Any]], members: list[int], key: str) -> list[float | None]:
    """``key`` of each evaluated phase among ``members``, None at the others."""
    return [r.get(key) if i in members else None for i, r in enumerate(evaluated)]


#: How each kind of line is drawn (matplotlib format and keyword arguments).
SERIES_STYLE: dict[str, tuple[str, dict[str, Any]]] = {
    "overall": ("o-", {"lw": 2.5, "color": "black"}),
    "sample": ("s:", {"lw": 2.5, "color": "tab:red"}),
    "site": ("o--", {"lw": 1.2}),
    "other": ("D", {"color": "grey"}),
}
#: Each site's colour (none of them the sample's red).
SITE_COLORS = {"shopping": "tab:blue", "shopping_admin": "tab:orange", "reddit": "tab:green", "gitlab": "tab:purple"}


def draw_success(ax: Any, rows: list[dict[str, Any]]) -> None:
    """Draw :func:`success_series` on the matplotlib axes ``ax``: each line has points only at the phases scored on
    its tasks, so it joins those phases (the SFT actor and the last phase on all test tasks, over the middle phases
    that evaluated a sample) and never a phase scored on other tasks; a lone phase is a marker."""
    phases, series = success_series(rows)
    highest = 0.0
    for s in series:
        points = [(phase, 100 * v) for phase, v in zip(phases, s.values, strict=True) if v is not None]
        fmt, kwargs = SERIES_STYLE[s.style]
        ax.plot([x for x, _ in points], [y for _, y in points], fmt, label=s.label, **kwargs,
                **({"color": SITE_COLORS[s.site]} if s.site else {}))
        highest = max([highest, *(y for _, y in points)])
    top = 100 if highest > 50 else max(10, 10 * (int(highest * 1.25) // 10 + 1))  # small rates stay readable
    ax.set(xlabel="phase (0 = SFT actor)", ylabel="test success (%)",
           title="Test success per phase (a line joins phases scored on the same tasks)", xticks=phases,
           ylim=(0, top))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_success(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    draw_success(ax, rows)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def plot_calibration(points: list[tuple[float, float]], out: Path) -> Path | None:
    """Reliability diagram: mean evaluator success per bin of ORM P(YES)."""
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins: list[list[float]] = [[] for _ in range(CALIBRATION_BINS)]
    for p, score in points:
        bins[min(int(p * CALIBRATION_BINS), CALIBRATION_BINS - 1)].append(score)
    centres = [(i + 0.5) / CALIBRATION_BINS for i, b in enumerate(bins) if b]
    rates = [sum(b) / len(b) for b in bins if b]
    fig, ax = plt.subplots(figsize=(4.8, 4.2), dpi=120)
    ax.plot([0, 1], [0, 1], ":", color="grey", label="perfect calibration")
    ax.plot(centres, rates, "o-", label=f"ORM ({len(points)} trajectories)")
    ax.set(xlabel="ORM P(YES)", ylabel="evaluator success rate", title="ORM calibration", xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def solved_table(rows: list[dict[str, Any]], intents: dict[str, str],
                 subset: set[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Which test tasks each phase's actor solved: one row per task solved in any phase, a mark per phase ("-": the
    phase did not evaluate the task: not in its ``evaluate.keys``, or, when those are unknown, a phase that
    evaluated only ``subset``).

    ``rows`` are :func:`phase_rows` (``evaluate.solved`` lists task keys); ``intents`` maps keys to intents. Rows
    are ordered by the first phase that solved the task, so tasks the training gained come after the SFT actor's.
    """
    evaluated = [r for r in rows if "evaluate.solved" in r]
    solved = {r["phase"]: set(r["evaluate.solved"]) for r in evaluated}
    keys = {key for phase_keys in solved.values() for key in phase_keys}
    first = {key: min(p for p, phase_keys in solved.items() if key in phase_keys) for key in keys}
    header = ["task", "intent", *[f"phase {r['phase']}" for r in evaluated]]
    def mark(key: str, row: dict[str, Any]) -> str:
        if key in solved[row["phase"]]:
            return "solved"
        tasks = task_set(row)
        if tasks is not None:
            return "" if key in tasks else "-"
        return "-" if row.get("evaluate.subset") and subset and key not in subset else ""

    body = [[key, intents.get(key, "?"), *[mark(key, r) for r in evaluated]]
            for key in sorted(keys, key=lambda k: (first[k], k))]
    return header, body


def task_intents(settings: Settings, keys: set[str]) -> dict[str, str]:
    with session_scope(settings) as s:
        return dict(s.execute(select(m.Task.key, m.Task.intent).where(m.Task.key.in_(sorted(keys)))).all())


#: The phase metrics that name the checkpoints a phase's train stage published.
PUBLISHED_KEYS = ("train.actor_version", "train.critic_version")


def run_versions(rows: list[dict[str, Any]]) -> set[str]:
    """The checkpoint versions the run's own phases published (a home holds every run's checkpoints)."""
    return {str(row[key]) for row in rows for key in PUBLISHED_KEYS if row.get(key)}


def shown_path(settings: Settings, path: str) -> str:
    """``path`` relative to the artifacts store when it lies inside it, so a report reads the same on any machine."""
    if settings.artifacts_dir is None:
        return path
    with contextlib.suppress(ValueError):
        return Path(path).resolve().relative_to(settings.artifacts_dir.resolve()).as_posix()
    return path


def lineage(settings: Settings, versions: set[str]) -> list[list[str]]:
    """The checkpoints of ``versions`` and their ancestors, oldest first: role, version, parent, phase, sha256, path."""
    with session_scope(settings) as s:
        rows = list_checkpoints(s)
    by_version = {(c.role, c.version): c for c in rows}
    wanted = {key for key in by_version if key[1] in versions}
    frontier = list(wanted)
    while frontier:
        role, version = frontier.pop()
        parent = by_version[(role, version)].parent_version
        if parent and (role, parent) in by_version and (role, parent) not in wanted:
            wanted.add((role, parent))
            frontier.append((role, parent))
    return [[c.role, c.version, c.parent_version or "-", str(c.phase if c.phase is not None else "-"),
             c.sha256[:12], shown_path(settings, c.path)] for c in rows if (c.role, c.version) in wanted]


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in body]
    return "\n".join(lines)


def evaluation_note(rows: list[dict[str, Any]]) -> str:
    """What the test columns count, when the phases evaluated different numbers of tasks or one was evaluated
    after the run (``webrl eval --run``); "" when every phase evaluated the same tasks during the run."""
    evaluated = [r for r in rows if "evaluate.n" in r]
    later = [r["phase"] for r in evaluated if r.get("evaluate.later")]
    if len({r["evaluate.n"] for r in evaluated}) <= 1 and not later:
        return ""
    counts = ", ".join(f"phase {r['phase']}: {r['evaluate.n']}" for r in evaluated)
    after = f"; evaluated after the run (`webrl eval --run`): phase {', '.join(map(str, later))}" if later else ""
    return f"Test columns: success on the test tasks each phase evaluated (how many: {counts}){after}."


def _last_and_sft(rows: list[dict[str, Any]]) -> tuple[int, frozenset[str], list[str], list[str]] | None:
    """(the last evaluated phase, the test tasks it and phase 0 both evaluated, phase 0's solved, its solved); None
    before a phase after 0 has evaluated, or when either's tasks are unknown or none are shared."""
    evaluated = {r["phase"]: r for r in rows if "evaluate.solved" in r and task_set(r)}
    last = max(evaluated, default=0)
    if 0 not in evaluated or last == 0:
        return None
    shared = (task_set(evaluated[0]) or frozenset()) & (task_set(evaluated[last]) or frozenset())
    if not shared:
        return None
    return last, shared, evaluated[0]["evaluate.solved"], evaluated[last]["evaluate.solved"]


def last_against_sft(rows: list[dict[str, Any]]) -> tuple[int, PairedComparison] | None:
    """The last evaluated phase against phase 0 (the SFT actor) on the test tasks both evaluated, resampling
    templates when every shared task's template is known (tasks otherwise); None as :func:`_last_and_sft`."""
    found = _last_and_sft(rows)
    if found is None:
        return None
    last, shared, before, after = found
    groups = row_groups(rows)
    return last, paired_comparison(shared, before, after,
                                   template_of=groups.template_of if groups.covers(shared) else None)


def _last_and_sft_by_template(rows: list[dict[str, Any]]
                              ) -> tuple[int, frozenset[str], list[str], list[str], TemplateGroups] | None:
    """:func:`_last_and_sft` and the rows' templates; None also unless every shared task's template is known."""
    found = _last_and_sft(rows)
    groups = row_groups(rows)
    if found is None or not groups.covers(found[1]):
        return None
    return (*found, groups)


def last_against_sft_by_group(rows: list[dict[str, Any]]) -> tuple[int, GroupComparison] | None:
    """:func:`last_against_sft` overall, on the seen-template and the held-out-template tasks, and in the macro
    average over templates; None unless every shared task's template is known."""
    found = _last_and_sft_by_template(rows)
    if found is None:
        return None
    last, shared, before, after, groups = found
    return last, group_comparison(shared, groups, before, after)


def _signed_points(rate: float) -> str:
    return f"{100 * rate:+.1f}"


def _span(interval: tuple[float, float]) -> str:
    return f"{_signed_points(interval[0])} to {_signed_points(interval[1])}"


def _solved_change(c: PairedComparison) -> str:
    """"solved 3 -> 4 (37.5% -> 50.0%), +12.5 points"."""
    return (f"solved {c.solved_before} -> {c.solved_after} ({_fmt(c.solved_before / c.n, pct=True)} -> "
            f"{_fmt(c.solved_after / c.n, pct=True)}), {_signed_points(c.difference)} points")


def _gained_lost(c: PairedComparison) -> list[str]:
    return [f"Gained ({len(c.gained)}): {', '.join(c.gained) or 'none'}.",
            f"Lost ({len(c.lost)}): {', '.join(c.lost) or 'none'}."]


def comparison_lines(rows: list[dict[str, Any]]) -> list[str]:
    """:func:`last_against_sft` in words, one line each (report.md, the viewer and the terminal); [] when there is
    nothing to compare. With every compared task's template known: :func:`template_comparison_lines`."""
    by_group = last_against_sft_by_group(rows)
    if by_group is not None:
        last, groups = by_group
        return template_comparison_lines(groups, f"Phase {last} against phase 0 (the SFT actor)")
    found = last_against_sft(rows)
    if found is None:
        return []
    last, c = found
    return [
        f"Phase {last} against phase 0 (the SFT actor) on the {c.n} test tasks both evaluated: {_solved_change(c)}.",
        f"95% interval of the difference: {_span(c.interval)} points (paired bootstrap over the tasks, "
        f"{RESAMPLES:,} resamples); {_span(c.interval_wald)} (Wald for paired proportions, continuity-corrected). "
        f"McNemar's exact test: p = {c.p_value:.3g} "
        f"({len(c.gained)} gained, {len(c.lost)} lost).",
        *_gained_lost(c),
    ]


def _interval_words(c: PairedComparison, interval: tuple[float, float]) -> str:
    """"95% interval a to b points", or why a single template gives none."""
    if c.templates == 1:
        return "one template, so no interval (its tasks move together)"
    return f"95% interval {_span(interval)} points"


def _group_line(name: str, c: PairedComparison | None) -> str:
    if c is None:
        return f"{name}: none of the compared tasks."
    of = f"{c.templates} template{'' if c.templates == 1 else 's'}"
    return (f"{name} ({c.n} tasks of {of}): {_solved_change(c)}, {_interval_words(c, c.interval)}; "
            f"{len(c.gained)} gained, {len(c.lost)} lost.")


def template_comparison_lines(g: GroupComparison, who: str) -> list[str]:
    """``who`` ("Phase 2 against phase 0 (the SFT actor)") overall, on seen-template and held-out-template tasks
    and in the macro average over templates, every interval the template-cluster bootstrap; then the tasks gained
    and lost."""
    c = g.overall
    assert c.macro_before is not None and c.macro_after is not None and c.interval_macro is not None
    return [
        f"{who} on the {c.n} test tasks both evaluated: {_solved_change(c)}.",
        f"95% interval of the difference: {_span(c.interval)} points (bootstrap over the {c.templates} templates, "
        f"each drawn with all its tasks, since a template's tasks succeed or fail together; {RESAMPLES:,} "
        "resamples).",
        _group_line("Seen templates", g.seen),
        _group_line("Held-out templates", g.held_out),
        f"Macro average over the {c.templates} templates (each weighs the same): "
        f"{_fmt(c.macro_before, pct=True)} -> {_fmt(c.macro_after, pct=True)}, "
        f"{_signed_points(c.macro_after - c.macro_before)} points, {_interval_words(c, c.interval_macro)}.",
        *_gained_lost(c),
    ]


def moved_templates(rows: list[dict[str, Any]]) -> tuple[int, list[TemplateMovement]] | None:
    """The templates on which the last evaluated phase solved another number of the test tasks both it and phase 0
    (the SFT actor) evaluated, those it lost tasks on first; None as :func:`last_against_sft_by_group`."""
    found = _last_and_sft_by_template(rows)
    if found is None:
        return None
    last, shared, before, after, groups = found
    return last, template_movements(shared, groups, before, [after])


def moved_templates_table(last: int, moved: list[TemplateMovement],
                          intents: dict[str, str]) -> tuple[list[str], list[list[str]]]:
    """:func:`moved_templates` as a table: a row per template, named by its site and number and its first task's
    intent, with its group, its tasks and how many of them phase 0 and the last phase solved."""
    header = ["template", "group", "tasks", "phase 0", f"phase {last}", "change"]
    body = [[f"{m.template}: {intents.get(m.tasks[0], '?')} ({task_numbers(m.tasks)})",
             m.group, str(len(m.tasks)), str(m.start), str(m.per_cell[0]), f"{m.per_cell[0] - m.start:+d}"]
            for m in moved]
    return header, body


MOVED_NOTE = ("A row per template whose solved tasks changed; named by one of its tasks' intents, with the task "
              "numbers of all it has among the compared tasks. Templates of lost tasks come first.")


def _share(solved: int, n: int) -> str:
    return f"{solved}/{n} = {_fmt(solved / n, pct=True)}" if n else "-"


def group_cells(g: GroupSuccess) -> list[str]:
    """One evaluation's :class:`GroupSuccess` as cells: all tasks, templates, seen, held-out, macro."""
    return [_share(g.overall.solved, g.overall.n), f"{g.templates} ({g.seen_templates} seen, "
            f"{g.held_out_templates} held-out)", _share(g.seen.solved, g.seen.n),
            _share(g.held_out.solved, g.held_out.n), _fmt(g.macro, pct=True)]


#: The header of :func:`group_cells` (after a first column naming the evaluation).
GROUP_HEADER = ["tasks", "templates", "seen templates", "held-out templates", "macro over templates"]


def group_rows(g: GroupSuccess) -> tuple[list[str], list[list[str]]]:
    """One evaluation's :class:`GroupSuccess` as a narrow table: a row per group (all tasks, seen templates,
    held-out templates, the macro average over templates) with its tasks, templates and success."""
    return ["group", "tasks", "templates", "success"], [
        ["all tasks", str(g.overall.n), str(g.templates), _share(g.overall.solved, g.overall.n)],
        ["seen templates", str(g.seen.n), str(g.seen_templates), _share(g.seen.solved, g.seen.n)],
        ["held-out templates", str(g.held_out.n), str(g.held_out_templates), _share(g.held_out.solved, g.held_out.n)],
        ["macro over templates", str(g.overall.n), str(g.templates), _fmt(g.macro, pct=True)],
    ]


def template_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Per phase that evaluated tasks of known templates: its success on those tasks, on the seen-template and the
    held-out-template ones, and the macro average over templates (each phase on the tasks it evaluated)."""
    groups = row_groups(rows)
    header = ["phase", *GROUP_HEADER]
    body = []
    for r in rows:
        tasks = task_set(r)
        if "evaluate.solved" not in r or tasks is None or not groups.covers(tasks):
            continue
        body.append([str(r["phase"]), *group_cells(group_success(tasks, groups, r["evaluate.solved"]))])
    return header, body


TEMPLATE_NOTE = ("Seen templates: test tasks whose intent template training also instantiates; held-out: templates "
                 "no training task shares. Macro: the mean over templates of each template's success.")


def machine_line() -> str:
    """"Machine: <CPU model>, <N> cores": /proc/cpuinfo's "model name" (else ``platform.processor()``) and
    ``os.cpu_count()``, the machine that wrote the report."""
    model = ""
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next((line.partition(":")[2].strip() for line in lines if line.startswith("model name")), "")
    return f"Machine: {model or platform.processor() or 'unknown CPU'}, {os.cpu_count() or '?'} cores"


def _solved_section(settings: Settings, rows: list[dict[str, Any]]) -> list[str]:
    """report.md's "Test tasks solved per phase": the table and what its "-" means."""
    solved_keys = {key for r in rows for key in r.get("evaluate.solved", [])}
    subset = subset_keys(rows)
    header, body = solved_table(rows, task_intents(settings, solved_keys), subset)
    parts = ["## Test tasks solved per phase", "",
             markdown_table(header, body) if body else "No test task was solved in any phase.", ""]
    if any("-" in row[2:] for row in body):
        sample = f" (the phases between the first and the last evaluate the fixed sample of {len(subset)})"
        parts += [f'"-": the phase did not evaluate this task{sample if subset else ""}.', ""]
    return parts


def _moved_section(settings: Settings, rows: list[dict[str, Any]]) -> list[str]:
    """report.md's "Templates that moved": :func:`moved_templates_table` and its note; nothing when no template moved
    or templates are unknown."""
    found = moved_templates(rows)
    if found is None or not found[1]:
        return []
    last, moved = found
    header, body = moved_templates_table(last, moved, task_intents(settings, {m.tasks[0] for m in moved}))
    return [f"## Templates that moved, phase {last} against the SFT actor", "", markdown_table(header, body), "",
            MOVED_NOTE, ""]


def write_report(settings: Settings, run: str, out_dir: Path) -> Path:
    """Write ``report.md`` and its PNGs into ``out_dir``; returns the report's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = phase_rows(settings, run)
    header, body = phase_table(rows)
    success_png = plot_success(rows, out_dir / "success_per_phase.png")
    calibration_png = plot_calibration(calibration_points(settings, run), out_dir / "orm_calibration.png")
    notes = [n for n in (evaluation_note(rows), kl_bound_note(rows)) if n]
    parts = [f"# webrl run `{run}`", "", machine_line(), "", "## Phases", "", markdown_table(header, body), "",
             ORM_COLUMN_NOTE, "", *[part for n in notes for part in (n, "")],
             f"![test success per phase]({success_png.name})", ""]
    template_header, template_body = template_table(rows)
    if template_body:
        parts += ["## Success by template group", "", markdown_table(template_header, template_body), "",
                  TEMPLATE_NOTE, ""]
    flips_header, flips_body = flips_table(rows)
    if flips_body:
        parts += ["## Probe steps whose greedy action changed", "", markdown_table(flips_header, flips_body), "",
                  FLIPS_NOTE, ""]
    compared = comparison_lines(rows)
    if compared:
        parts += ["## Last phase against the SFT actor, on the same tasks", "",
                  *[part for line in compared for part in (line, "")]]
    parts += _moved_section(settings, rows)
    parts += _solved_section(settings, rows)
    if calibration_png is not None:
        parts += ["## ORM calibration", "", f"![ORM calibration]({calibration_png.name})", ""]
    parts += ["## Checkpoint lineage", "",
              markdown_table(["role", "version", "parent", "phase", "sha256", "path"],
                             lineage(settings, run_versions(rows))), ""]
    report = out_dir / "report.md"
    report.write_text("\n".join(parts))
    return report
