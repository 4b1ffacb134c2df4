"""How long the rest of a ``webrl train`` run will take, from the stages it has timed so far.

The run's plan is phase 0's stages (:data:`webrl.orchestration.pipeline.BASELINE_STAGES`) then every stage of
:data:`~webrl.orchestration.pipeline.STAGES` for phases 1..N (N = ``curriculum.phases``). A stage left to run is
estimated, in this order, from:

1. the same stage timed earlier in this run: for a stage whose time grows with its episodes (:data:`EPISODIC`:
   a rollout or an evaluation) its seconds per episode times the episodes it will run (a rollout
   ``curriculum.tasks_per_phase``, a middle phase's evaluation ``evaluation.subset``, the first and the last
   ``evaluation.tasks``), else the mean of its timings;
2. for an episodic stage, the seconds per episode of any episodic stage timed so far (the one running included,
   from its progress);
3. nothing: unknown, and the line says which stages are not timed yet.

The stage that is running counts what it has left: its estimate less the time it has run, or, when its progress
is known, its elapsed time per episode done times the episodes left. An evaluation read back from a stored one
(``evaluate.stored``) or replaced after the run (``evaluate.later``) took no time worth learning from.

    eta = RunEta(run_plan(hyperparams))   # or RunEta.of_rows(plan, phase_rows(settings, run)) on a resume
    eta.record(phase, stage, metrics)     # the pipeline's on_stage hook
    eta.progress(label, done, total)      # its on_progress hook
    eta.line()  # "run: phase 1 of 2, rollout · ~34 min left"
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webrl.method.hyperparams import WebRLHyperparams
from webrl.orchestration.pipeline import BASELINE_STAGES, STAGES

#: Stages whose time grows with the episodes they run, and the metric that counts those episodes (the validate
#: stage's: the updated actor's, one per validation task).
EPISODIC: dict[str, str] = {"seed-rollout": "rollouts", "rollout": "rollouts", "evaluate": "n", "validate": "tasks"}


@dataclass(frozen=True)
class PlannedStage:
    """One stage of the run's plan and the episodes it will run (None: not episodic, or not known)."""

    phase: int
    stage: str
    episodes: int | None = None

    @property
    def progress_label(self) -> str:
        """The label of the pipeline's progress bar for this stage's episodes ("phase 1: rollout")."""
        return f"phase {self.phase}: {self.stage.replace('-', ' ')}"


@dataclass(frozen=True)
class Timing:
    """A finished stage's seconds and the episodes it ran (None: not episodic or not recorded)."""

    seconds: float
    episodes: int | None = None


def run_plan(hp: WebRLHyperparams) -> list[PlannedStage]:
    """Every stage the run will run, in order, with the episodes of the episodic ones; the validate stage only where
    the run validates its updates (``evaluation.validation_tasks``: else it passes at once)."""
    phases, tasks, subset = hp.curriculum.phases, hp.evaluation.tasks, hp.evaluation.subset
    validated = hp.evaluation.validation_tasks

    def evaluated(index: int) -> int:
        return subset if subset is not None and subset < tasks and 0 < index < phases else tasks

    episodes = {"seed-rollout": hp.curriculum.seed_tasks, "rollout": hp.curriculum.tasks_per_phase,
                "validate": validated}
    plan = [PlannedStage(0, stage, evaluated(0) if stage == "evaluate" else episodes.get(stage))
            for stage in BASELINE_STAGES]
    return plan + [PlannedStage(index, stage, evaluated(index) if stage == "evaluate" else episodes.get(stage))
                   for index in range(1, phases + 1) for stage in STAGES if stage != "validate" or validated]


def timing_of(stage: str, metrics: Mapping[str, Any]) -> Timing | None:
    """The :class:`Timing` of a finished stage's metrics; None when its seconds are missing or measured nothing
    (an evaluation read back from a stored one, or replaced after the run, or a resumed stage whose episodes had all
    been run before). A resumed stage counts only the episodes it ran (``reused``: those stored before)."""
    seconds = metrics.get("seconds")
    if not isinstance(seconds, int | float) or metrics.get("stored") or metrics.get("later"):
        return None
    episodes = metrics.get(EPISODIC[stage]) if stage in EPISODIC else None
    reused = metrics.get("reused") or 0
    if isinstance(episodes, int | float) and reused:
        episodes -= reused
        if episodes <= 0:
            return None
    return Timing(float(seconds), int(episodes) if isinstance(episodes, int | float) and episodes > 0 else None)


def _per_episode(timings: Iterable[Timing]) -> float | None:
    """Pooled seconds per episode of the timings that counted episodes: sum(seconds) / sum(episodes)."""
    counted = [t for t in timings if t.episodes]
    return sum(t.seconds for t in counted) / sum(t.episodes or 0 for t in counted) if counted else None


class RunEta:
    """The run's plan, what of it has finished, and the estimate of what is left (module docstring)."""

    def __init__(self, plan: list[PlannedStage], clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        self.clock = clock
        self.finished: set[tuple[int, str]] = set()
        self.timings: dict[tuple[int, str], Timing] = {}
        self.stage_started = clock()
        self.live: tuple[int, int] | None = None  # (done, total) episodes of the running stage, from its progress
        self.live_label: str | None = None  # the progress label ``live`` counts (a rollout's attempt has its own)
        self.live_started = self.stage_started  # when that label's episodes began

    @classmethod
    def of_rows(cls, plan: list[PlannedStage], rows: Iterable[Mapping[str, Any]],
                clock: Callable[[], float] = time.monotonic) -> RunEta:
        """A resumed run's estimator: the stages its phase rows (:func:`webrl.runs.report.phase_rows`) finished."""
        eta = cls(plan, clock)
        for row in rows:
            for step in plan:
                if step.phase == row.get("phase") and f"{step.stage}.seconds" in row:
                    prefix = f"{step.stage}."
                    eta.record(step.phase, step.stage, {k[len(prefix):]: v for k, v in row.items()
                                                        if k.startswith(prefix)})
        return eta

    def record(self, phase: int, stage: str, metrics: Mapping[str, Any]) -> None:
        """Stage ``stage`` of ``phase`` finished with ``metrics`` (its ``seconds`` among them)."""
        self.finished.add((phase, stage))
        timing = timing_of(stage, metrics)
        if timing is not None:
            self.timings[(phase, stage)] = timing
        self.stage_started = self.live_started = self.clock()
        self.live, self.live_label = None, None

    def progress(self, label: str, done: int, total: int) -> None:
        """A progress report of the pipeline; kept when it counts the running stage's episodes."""
        current = self.current()
        if current is None or current.stage not in EPISODIC or total <= 0:
            return
        first = current.progress_label
        if label != first and not label.startswith(f"{first}, attempt "):  # --min-solved's later attempts count too
            return
        if label != self.live_label:  # a later attempt: its own episodes, timed from its own start
            self.live_label = label
            self.live_started = self.stage_started if label == first else self.clock()
        self.live = (done, total)

    def current(self) -> PlannedStage | None:
        """The first stage of the plan not finished (None: the run is done)."""
        return next((step for step in self.plan if (step.phase, step.stage) not in self.finished), None)

    def remaining(self) -> list[PlannedStage]:
        return [step for step in self.plan if (step.phase, step.stage) not in self.finished]

    def _live_per_episode(self) -> float | None:
        if self.live is None or self.live[0] <= 0:
            return None
        return (self.clock() - self.live_started) / self.live[0]

    def estimate(self, step: PlannedStage) -> float | None:
        """Seconds the whole of ``step`` takes, from this run's timings (module docstring); None: unknown."""
        same = [t for (_, stage), t in self.timings.items() if stage == step.stage]
        if step.episodes is not None and step.stage in EPISODIC:
            per_episode = _per_episode(same)
            if per_episode is None:
                episodic = [t for (_, stage), t in self.timings.items() if stage in EPISODIC]
                per_episode = _per_episode(episodic) or self._live_per_episode()
            if per_episode is not None:
                return per_episode * step.episodes
        return sum(t.seconds for t in same) / len(same) if same else None

    def _current_left(self, step: PlannedStage) -> float | None:
        """Seconds the running stage has left: from its progress when known, else its estimate less its time."""
        elapsed = self.clock() - self.stage_started
        if self.live is not None and self.live[0] > 0:
            done, total = self.live
            return (self.clock() - self.live_started) / done * max(total - done, 0)
        whole = self.estimate(step)
        return None if whole is None else max(whole - elapsed, 0.0)

    def seconds_left(self) -> tuple[float, list[str]]:
        """(the estimated seconds left, the stages left whose time is unknown, named once each in plan order)."""
        left, unknown = 0.0, []
        for i, step in enumerate(self.remaining()):
            seconds = self._current_left(step) if i == 0 else self.estimate(step)
            if seconds is None:
                unknown.append(step.stage)
            else:
                left += seconds
        return left, list(dict.fromkeys(unknown))

    def line(self) -> str:
        """One line for the terminal: "run: phase 1 of 2, rollout · ~34 min left"."""
        current = self.current()
        if current is None:
            return "run: done"
        phases = max(step.phase for step in self.plan)
        where = f"run: phase {current.phase} of {phases}, {current.stage}"
        left, unknown = self.seconds_left()
        if not unknown:
            return f"{where} · ~{minutes(left)} left"
        if left == 0.0:
            return f"{where} · estimating..."
        return f"{where} · more than {minutes(left)} left (not timed yet: {', '.join(unknown)})"


def minutes(seconds: float) -> str:
    """"<1 min", "34 min", "2 h 05 min"."""
    whole = round(seconds / 60)
    if whole < 1:
        return "<1 min"
    return f"{whole} min" if whole < 120 else f"{whole // 60} h {whole % 60:02d} min"
