"""The run report: ``report.md`` with the phase table, PNG plots and the checkpoint lineage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.session import session_scope

SITES = ("shopping", "shopping_admin", "reddit", "gitlab")
CALIBRATION_BINS = 10
#: The "ORM acc." cell of a phase whose rewards came from the sandbox evaluators: no ORM judged, so there is no
#: agreement to measure (the evaluators compared with themselves would read 100%).
NO_ORM = "no ORM"
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
    add_subset_success(rows, subset_keys(session, run_row.id, rows))
    return rows


def _run(session: Session, run: str) -> m.Run:
    run_row = session.scalar(select(m.Run).where(m.Run.name == run))
    if run_row is None:
        raise ValueError(f"no run named {run!r}")
    return run_row


def run_id_of(session: Session, run: str) -> int:
    """The id of the run named ``run`` (ValueError when there is none)."""
    return _run(session, run).id


def subset_keys(session: Session, run_id: int, rows: list[dict[str, Any]]) -> set[str]:
    """The test tasks the run's subset evaluations ran (the phases between the first and the last evaluate one fixed
    stratified subset); empty when every phase evaluated every task."""
    row = next((r for r in rows if r.get("evaluate.subset")), None)
    if row is None:
        return set()
    if "evaluate.keys" in row:  # evaluated after the run (`webrl eval --run --stratified`): the tasks it names
        return set(row["evaluate.keys"])
    phase = row["phase"]
    return set(session.scalars(
        select(m.Task.key).join(m.Trajectory, m.Trajectory.task_id == m.Task.id)
        .where(m.Trajectory.run_id == run_id, m.Trajectory.phase == phase, m.Trajectory.purpose == "eval")))


def add_subset_success(rows: list[dict[str, Any]], keys: set[str]) -> None:
    """Give every evaluated phase ``evaluate.success_subset``: its success on the subset ``keys`` (a phase that
    evaluated every task is counted on those alone), so the phases compare on the same tasks."""
    if not keys:
        return
    for row in rows:
        if "evaluate.solved" in row:
            row["evaluate.success_subset"] = len(set(row["evaluate.solved"]) & keys) / len(keys)
            row["evaluate.subset_size"] = len(keys)


def _fmt(value: Any, pct: bool = False) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{100 * value:.1f}%" if pct else f"{value:.4g}"
    return str(value)


def phase_seconds(row: dict[str, Any]) -> float:
    """Wall-clock seconds of a phase: the sum of its stages' ``<stage>.seconds``."""
    return float(sum(v for k, v in row.items() if k.endswith(".seconds") and isinstance(v, int | float)))


def orm_accuracy_cell(row: dict[str, Any]) -> str:
    """The phase's ORM agreement with the evaluators, or :data:`NO_ORM` when no ORM judged its rollouts."""
    judge = row.get("label.judge", row.get("seed-rollout.judge"))
    if judge is None and "run.orm" in row:  # phases recorded before stages named their judge: the run's --orm
        judge = "orm" if row["run.orm"] else "evaluators"
    if judge == "evaluators":
        return NO_ORM
    return _fmt(row.get("label.orm_accuracy", row.get("seed-rollout.orm_accuracy")), pct=True)


def phase_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The phase table of ``report.md`` and of the terminal (``webrl train``): header and one row per phase."""
    subset = any("evaluate.success_subset" in r for r in rows)
    header = ["phase", "generated", "kept", "rollouts", "ORM acc.", "reward rate",
              *[f"test {s}" for s in SITES], "test overall", *(["test subset"] if subset else []),
              "actor loss", "critic loss", "KL", "minutes"]
    body = []
    for r in rows:
        reward = r.get("label.reward_rate", r.get("seed-rollout.reward_rate"))
        rollouts = r.get("rollout.rollouts", r.get("seed-rollout.rollouts"))
        body.append([
            str(r["phase"]), _fmt(r.get("generate.generated")), _fmt(r.get("filter.kept")), _fmt(rollouts),
            orm_accuracy_cell(r), _fmt(reward, pct=True),
            *[_fmt(r.get(f"evaluate.success_{s}"), pct=True) for s in SITES],
            _fmt(r.get("evaluate.success"), pct=True),
            *([_fmt(r.get("evaluate.success_subset"), pct=True)] if subset else []),
            _fmt(r.get("train.actor_loss")), _fmt(r.get("train.critic_loss")), _fmt(r.get("train.kl")),
            _fmt(round(phase_seconds(r) / 60, 1)),
        ])
    return header, body


def calibration_points(settings: Settings) -> list[tuple[float, float]]:
    """(ORM P(YES), evaluator score) for every labelled trajectory that has both."""
    with session_scope(settings) as s:
        return calibration_points_in(s)


def calibration_points_in(session: Session) -> list[tuple[float, float]]:
    """:func:`calibration_points` read in ``session``."""
    rows = session.execute(
        select(m.OrmLabel.p_yes, m.Trajectory.env_score)
        .join(m.Trajectory, m.Trajectory.id == m.OrmLabel.trajectory_id)
        .where(m.Trajectory.env_score.is_not(None), m.OrmLabel.orm_version != "env-evaluator")
    ).all()
    return [(float(p), float(score)) for p, score in rows]


def plot_success(rows: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [r for r in rows if "evaluate.success" in r]
    xs = [r["phase"] for r in evaluated]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    overall = [100 * r["evaluate.success"] for r in evaluated]
    ax.plot(xs, overall, "o-", lw=2.5, color="black", label="overall (the tasks each phase evaluated)")
    highest = max(overall, default=0.0)
    on_subset = [r for r in evaluated if "evaluate.success_subset" in r]
    if on_subset:  # every phase on the same tasks: the intermediate phases evaluate a subset
        ys = [100 * r["evaluate.success_subset"] for r in on_subset]
        ax.plot([r["phase"] for r in on_subset], ys, "s:", lw=2.5, color="tab:red",
                label=f"overall on the same {on_subset[0]['evaluate.subset_size']} tasks")
        highest = max([highest, *ys])
    for site in SITES:
        ys = [100 * r.get(f"evaluate.success_{site}", float("nan")) for r in evaluated]
        ax.plot(xs, ys, "o--", lw=1.2, label=site)
        highest = max([highest, *(y for y in ys if y == y)])  # y == y drops NaN (site not evaluated)
    top = 100 if highest > 50 else max(10, 10 * (int(highest * 1.25) // 10 + 1))  # small rates stay readable
    ax.set(xlabel="phase (0 = SFT actor)", ylabel="test success (%)", title="Test success per phase",
           xticks=xs, ylim=(0, top))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
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
    """Which test tasks each phase's actor solved: one row per task solved in any phase, a mark per phase ("-": a
    phase that evaluated only ``subset`` did not evaluate the task).

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
        return "-" if row.get("evaluate.subset") and subset and key not in subset else ""

    body = [[key, intents.get(key, "?"), *[mark(key, r) for r in evaluated]]
            for key in sorted(keys, key=lambda k: (first[k], k))]
    return header, body


def task_intents(settings: Settings, keys: set[str]) -> dict[str, str]:
    with session_scope(settings) as s:
        return dict(s.execute(select(m.Task.key, m.Task.intent).where(m.Task.key.in_(sorted(keys)))).all())


def lineage(settings: Settings) -> list[list[str]]:
    with session_scope(settings) as s:
        rows = s.scalars(select(m.Checkpoint).order_by(m.Checkpoint.id)).all()
        return [[c.role, c.version, c.parent_version or "-", str(c.phase if c.phase is not None else "-"),
                 c.sha256[:12], c.path] for c in rows]


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


def write_report(settings: Settings, run: str, out_dir: Path) -> Path:
    """Write ``report.md`` and its PNGs into ``out_dir``; returns the report's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = phase_rows(settings, run)
    header, body = phase_table(rows)
    success_png = plot_success(rows, out_dir / "success_per_phase.png")
    calibration_png = plot_calibration(calibration_points(settings), out_dir / "orm_calibration.png")
    note = evaluation_note(rows)
    parts = [f"# webrl run `{run}`", "", "## Phases", "", markdown_table(header, body), "", ORM_COLUMN_NOTE, "",
             *([note, ""] if note else []), f"![test success per phase]({success_png.name})", ""]
    solved_keys = {key for r in rows for key in r.get("evaluate.solved", [])}
    with session_scope(settings) as s:
        subset = subset_keys(s, run_id_of(s, run), rows)
    solved_header, solved_body = solved_table(rows, task_intents(settings, solved_keys), subset)
    none_solved = "No test task was solved in any phase."
    parts += ["## Test tasks solved per phase", "",
              markdown_table(solved_header, solved_body) if solved_body else none_solved, ""]
    if subset:
        parts += [f'"-": the phase evaluated only the stratified {len(subset)} tasks, not this one.', ""]
    if calibration_png is not None:
        parts += ["## ORM calibration", "", f"![ORM calibration]({calibration_png.name})", ""]
    parts += ["## Checkpoint lineage", "",
              markdown_table(["role", "version", "parent", "phase", "sha256", "path"], lineage(settings)), ""]
    report = out_dir / "report.md"
    report.write_text("\n".join(parts))
    return report
