"""The WebRL phase state machine that ``webrl train`` runs (docs/design.md, "The method in one page").

Phase 0 measures the SFT actor: it evaluates it on the test split and rolls it out on a sample of the seed
train tasks, whose failures seed the curriculum. Each phase i >= 1 then runs these stages in order::

    generate -> filter -> rollout -> label -> train -> validate -> evaluate

(``validate`` decides whether the update is published, with ``evaluation.validation_tasks``; else it passes.)

Every stage is a Celery task reached through its typed client in :mod:`webrl.wire.clients` (eager in the embedded mode,
a service worker in the distributed mode), so this file is the same in both modes. The stages finished so
far are persisted in the ``phases`` table *after* each stage's own writes commit, and every stage is
idempotent (trajectories are unique per (task, phase, attempt, run), labels per (trajectory, ORM version),
tasks per key, checkpoints per version), so a process killed at any moment resumes after the last finished
stage, and a half-finished stage redoes only the work that is missing.

Rollouts in the distributed mode go through the actor service (``{"kind": "endpoint"}``): before each one the
pipeline waits until the service reports serving the checkpoint it needs
(:func:`webrl.policies.actor_service.serve_checkpoint`, the trainer's published actor arriving by hot reload), and each
trajectory records the version that answered. The embedded mode loads the checkpoint in the rollout job (``{"kind":
"checkpoint"}``); ``Settings.actor.rollout_policy`` overrides the choice.

What a stage hands the later ones (candidate and kept task keys, the published checkpoints) is the phase's typed
:class:`PhaseState`, stored with the phase; its metrics are for reporting only. The run's stored progress lives in
:mod:`webrl.orchestration.pipeline_state`, what the stages measure in :mod:`webrl.orchestration.pipeline_metrics`;
:data:`PHASE_TABLE` and :data:`BASELINE_TABLE` name each stage's method in the order a phase runs them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.session import session_scope
from webrl.method.acceptance import verdict
from webrl.method.hyperparams import WebRLHyperparams
from webrl.method.rewards import EVALUATOR_LABELS
from webrl.orchestration.evaluate import solved_task_keys
from webrl.orchestration.pipeline_metrics import (
    actor_versions,
    attempted_task_keys,
    evaluation_metrics,
    failed_task_keys,
    metrics_of_scores,
    orm_agreement,
    solved_task_keys_of,
)
from webrl.orchestration.pipeline_state import (
    PhaseState,
    PipelineOptions,
    RunStore,
    StageOutput,
    StageReport,
    options_of_run,
    refuse_changed_folders,
)
from webrl.orchestration.stored_evaluation import greedy_scores
from webrl.policies.actor_service import rollout_policy
from webrl.prompts.actor import COMPLETION_BUDGET
from webrl.store.template_groups import stratified_sample, validation_sample
from webrl.wire import clients
from webrl.wire.contracts import (
    DEMONSTRATION_ATTEMPT,
    DEMONSTRATION_PURPOSE,
    MAX_PARENTS,
    MAX_STATES,
    VALIDATION_ATTEMPT,
    VALIDATION_PURPOSE,
    CheckpointSpec,
    CriticState,
    FilterRequest,
    GenerateRequest,
    InvalidRequest,
    ObserveRequest,
    OracleSpec,
    PhaseJob,
    PolicySpec,
    RolloutRequest,
    ScoreRequest,
    StartValueRequest,
    TrackingSpec,
    ValueRequest,
)

__all__ = ["BASELINE_STAGES", "BASELINE_TABLE", "PHASE_TABLE", "STAGES", "PhaseState", "Pipeline",
           "PipelineOptions", "ProgressHook", "StageOutput", "StageReport", "nearest_to_band"]

log = logging.getLogger(__name__)

ProgressHook = Callable[[str, int, int], None]  # (label, done, total)
#: Added to the phase index as the salt of the sample of a phase's parents (``Pipeline._capped_parents``), apart from
#: the salts of the task samples (0, the phase index).
PARENTS_SALT = 1_000_000


def sampling_seed(seed: int, phase: int, attempt: int) -> int:
    """The seed of a run's sampled rollouts in ``phase``, attempt ``attempt`` (the run's ``seed``)."""
    return (seed * 1_000_003 + phase) * 1_009 + attempt


def nearest_to_band(keys: Sequence[str], values: dict[str, float], low: float, high: float) -> list[str]:
    """``keys`` ordered by the distance of their value V to the band: d = max(low - V, 0, V - high), ties in
    the given order (the filter's top-up, :attr:`webrl.method.hyperparams.Curriculum.fill_filter`)."""
    return sorted(keys, key=lambda k: max(low - values[k], 0.0, values[k] - high))


class Pipeline:
    """Runs (or resumes) the phases of one named run."""

    def __init__(self, settings: Settings, options: PipelineOptions,
                 on_progress: ProgressHook | None = None,
                 on_stage: Callable[[StageReport], None] | None = None,
                 tracking: TrackingSpec | None = None, end_at: int | None = None) -> None:
        self.settings = settings
        self.tracking = tracking  # where the trainer logs each step (webrl.runs.tracking); not stored with the run
        self.end_at = end_at  # a resume's explicit phase count, which may also end the run early (resumed_options)
        self._reused = 0  # episodes the running stage found stored (a resumed stage), from its rollout jobs
        self.on_progress = on_progress or (lambda label, done, total: None)
        self.on_stage = on_stage or (lambda report: None)
        self.store, self.options = RunStore.open(settings, options, end_at)  # a stored run keeps its options
        self.run_id = self.store.run_id

    @classmethod
    def of_run(cls, settings: Settings, run: str, on_progress: ProgressHook | None = None) -> Pipeline:
        """The stored run ``run`` with the options it was started with (none changed), to act on its phases after
        it ran (:meth:`evaluate_in_full`); ``InvalidRequest`` on "run" when no run has that name."""
        return cls(settings, options_of_run(settings, run), on_progress=on_progress)

    @property
    def hp(self) -> WebRLHyperparams:
        """The run's hyperparameters."""
        return self.options.hyperparams

    # ---- the run's stored progress (webrl.orchestration.pipeline_state) -------------------------------
    def stages_done(self, index: int) -> list[str]:
        return self.store.stages_done(index)

    def evaluated_phases(self) -> list[int]:
        """The phases whose evaluate stage has finished, in order (read only: no phase row is created)."""
        return self.store.evaluated_phases()

    def phase_metrics(self, index: int) -> dict[str, Any]:
        return self.store.phase_metrics(index)

    def phase_state(self, index: int) -> PhaseState:
        return self.store.phase_state(index)

    def _finish_stage(self, index: int, stage: str, output: StageOutput, last: bool) -> None:
        self.store.finish_stage(index, stage, output, last)
        self.on_stage(StageReport(index, stage, output[0]))

    # ---- driving ------------------------------------------------------------------------------------
    def run(self) -> None:
        """Run every phase that is not finished yet, resuming inside a phase after its last finished stage."""
        self._run_phase(0, BASELINE_TABLE)
        for index in range(1, self.hp.curriculum.phases + 1):
            self._run_phase(index, PHASE_TABLE)

    def _run_phase(self, index: int, table: StageTable) -> None:
        """The stages of ``table`` that phase ``index`` has not finished, in order, each recorded when done."""
        done = self.stages_done(index)
        last = list(table)[-1]
        for stage, run_stage in table.items():
            if stage in done:
                continue
            refuse_changed_folders(self.options, actor=False)  # the ORM republished mid-run
            log.info("phase %d: %s", index, stage)
            started = time.perf_counter()
            self._reused = 0
            metrics, state = run_stage(self, index, self.phase_state(index))
            metrics["seconds"] = round(time.perf_counter() - started, 2)
            if self._reused:  # a resumed stage: its seconds are this attempt's, its episodes partly an earlier one's
                metrics["reused"] = self._reused
            self._finish_stage(index, stage, (metrics, state), last=stage == last)

    # ---- checkpoints ---------------------------------------------------------------------------------
    def actor_for_phase(self, index: int) -> str:
        """The actor that acts in phase ``index``: the one trained in phase index-1 (the SFT actor for 1)."""
        if index <= 1:
            return self.options.actor
        actor = self.phase_state(index - 1).actor_path
        if actor is None:
            raise RuntimeError(f"phase {index - 1} has not trained an actor yet")
        return actor

    def critic_for_phase(self, index: int) -> str | None:
        if index <= 1:
            return None
        return self.phase_state(index - 1).critic_path

    # ---- stages -------------------------------------------------------------------------------------
    def _stage_evaluate(self, index: int, state: PhaseState) -> StageOutput:
        """Success of the phase's resulting actor on the held-out test tasks, per site and overall: all of them
        (``evaluation.tasks``) in the first and the last phase, the run's fixed sample (:meth:`fixed_sample`) in
        the phases between when ``evaluation.subset`` is set. ``keys`` records the tasks evaluated and ``sample``
        the fixed sample, so every phase compares with every other on named tasks. An evaluation stored under the
        actor's content key is read back (:meth:`_evaluate_actor`)."""
        actor = self.options.actor if index == 0 else state.actor_path
        assert actor is not None, "the train stage records the phase's actor"
        keys = self._task_keys(split="test", origin=None, limit=self.hp.evaluation.tasks)
        sample = self.fixed_sample()
        sampled = sample is not None and 0 < index < self.hp.curriculum.phases
        if sampled:
            keys = sample
        metrics = self._evaluate_actor(index, keys, actor)
        return {**metrics, "subset": sampled, "keys": keys, **({"sample": sample} if sample is not None else {})}, state

    def _evaluate_actor(self, index: int, keys: list[str], actor: str) -> dict[str, Any]:
        """The evaluation of ``actor`` on ``keys``, read back from one stored under its content key on all the run's
        test tasks (``stored``: the key's digest, 12 characters): the start actor's, and a phase's whose actor kept
        the start actor's weights (``actor.min_new_positive_steps``), on the tasks it evaluates. Else it runs, and an
        evaluation of all of them is stored for the next run (:mod:`webrl.orchestration.stored_evaluation`)."""
        suite = self._task_keys(split="test", origin=None, limit=self.hp.evaluation.tasks)
        scores, stored = greedy_scores(self.settings, actor, keys, suite, self.hp.rollout, lambda: self._rollout(
            keys, index, actor, purpose="eval", label=f"phase {index}: evaluate"))
        return {**metrics_of_scores(scores), **({"stored": stored} if stored else {})}

    def fixed_sample(self) -> list[str] | None:
        """The run's fixed stratified sample of ``evaluation.subset`` test tasks (of the first ``evaluation.tasks``),
        the tasks every phase is scored on; None when the run evaluates all of them every phase."""
        keys = self._task_keys(split="test", origin=None, limit=self.hp.evaluation.tasks)
        n = self.hp.evaluation.subset
        return self._stratified(keys, n) if n is not None and n < len(keys) else None

    def evaluate_in_full(self, index: int, tasks: int | None = None, stratified: int | None = None) -> dict[str, Any]:
        """Evaluate the actor phase ``index`` published on the first ``tasks`` test tasks (all when None), after the
        phase evaluated: a run that evaluated few tasks a phase (``--eval-tasks``, a subset) gets its checkpoints
        measured in full later, with the run's own horizon and early stops. ``stratified``: only the run's fixed
        stratified sample of that many of them (:meth:`_stratified`, the sample its middle phases evaluate when it
        is ``evaluation.subset``). The result replaces the phase's evaluate metrics (``evaluate.later`` marks it,
        ``evaluate.keys`` lists the tasks, ``evaluate.sample`` the run's fixed sample as the evaluate stage records
        it; ``evaluate.seconds`` stays the run's own time). Episodes the phase already stored are reused, so it is
        idempotent and resumes after a crash."""
        if not 0 <= index <= self.hp.curriculum.phases:
            raise InvalidRequest("phase", f"run {self.options.run!r} has phases 0-{self.hp.curriculum.phases}")
        if index not in self.evaluated_phases():
            raise InvalidRequest("phase", f"phase {index} of run {self.options.run!r} has not evaluated yet "
                                 "(resume the run with `webrl train --run` first)")
        actor = self.options.actor if index == 0 else self.phase_state(index).actor_path
        assert actor is not None, "the train stage records the phase's actor"
        if tasks is None and stratified is not None and stratified == self.hp.evaluation.subset:
            tasks = self.hp.evaluation.tasks  # the run's fixed sample is drawn from these (fixed_sample)
        keys = self._task_keys(split="test", origin=None, limit=tasks)
        sampled = stratified is not None and stratified < len(keys)
        if sampled:
            keys = self._stratified(keys, stratified)
        started = time.perf_counter()
        ids = self._rollout(keys, index, actor, purpose="eval", label=f"phase {index}: evaluate")
        sample = self.fixed_sample()
        metrics = {**self._evaluation_metrics(ids), "subset": sampled, "later": True, "keys": keys,
                   **({"sample": sample} if sample is not None else {}),
                   "later_seconds": round(time.perf_counter() - started, 2)}
        self.store.replace_evaluation(index, metrics)
        return metrics

    def _stratified(self, keys: list[str], n: int, split: str = "test") -> list[str]:
        """The run's fixed sample of ``n`` of ``keys`` (:func:`webrl.store.template_groups.stratified_sample` under
        the run's seed), so every phase that evaluates a subset evaluates the same one and every template is
        represented."""
        return stratified_sample(self.settings, keys, n, self.options.seed, split)

    def _stage_seed_rollout(self, index: int, state: PhaseState) -> StageOutput:
        """Phase 0: the SFT actor on a sample of seed train tasks; its failures seed the curriculum."""
        keys = self._sample(self._task_keys(split="train", origin="seed"), self.hp.curriculum.seed_tasks, salt=0)
        ids = self._rollout(keys, index, self.options.actor, purpose="train", label="phase 0: seed rollout",
                            temperature=self.hp.rollout.temperature)
        labelled = self._label(ids, "phase 0: ORM")
        return {"rollouts": len(ids), **labelled, **self._demonstrate(index)}, state

    def _demonstrate(self, index: int) -> dict[str, Any]:
        """The anchor's demonstrations (``replay.demo_tasks``): the sandbox oracle on that many seed train tasks,
        templates taken in turn, stored as purpose "sft" (attempt 1) of this run for the trainer to sample."""
        n = self.hp.replay.demo_tasks
        if not n:
            return {}
        from webrl.orchestration.train_orm import evaluator_labels

        seeds = self._task_keys(split="train", origin="seed")
        keys = self._stratified(seeds, min(n, len(seeds)), split="train")
        ids = self._rollout_chunks(keys, index, OracleSpec(corrupt=0.0, seed=self.options.seed),
                                   purpose=DEMONSTRATION_PURPOSE, label="phase 0: demonstrations",
                                   attempt=DEMONSTRATION_ATTEMPT)
        return {"demonstrations": len(ids), "demonstrations_solved": sum(evaluator_labels(self.settings, ids).values())}

    def _stage_generate(self, index: int, state: PhaseState) -> StageOutput:
        """New tasks in breadth from the previous phase's failures (paper, section 3.1); with
        ``curriculum.solved_share``, first new instances of the templates of the tasks the run has solved so far."""
        curriculum = self.hp.curriculum
        if not curriculum.enabled:
            return {"generated": 0}, state
        previous = self._phase_trajectories(index - 1)
        failed = failed_task_keys(previous, self._orm_version())
        # a phase without failures still evolves: from every task it attempted (published code: any seed set)
        parents = failed or attempted_task_keys(previous)
        result = clients.taskgen_generate(GenerateRequest(
            phase=index, parent_keys=self._capped_parents(parents, index), n=curriculum.candidates_per_phase,
            generator=curriculum.generator, seed=self.options.seed * 1000 + index,
        ))
        instances = self._solved_template_instances(index)
        taken = set(instances)
        candidates = instances + [k for k in result.task_keys if k not in taken]
        return ({"failed_parents": len(failed), "generated": len(candidates), "solved_instances": len(instances)},
                state.with_(candidate_keys=candidates))

    def _solved_template_instances(self, index: int) -> list[str]:
        """``curriculum.solved_share`` of the phase's quota as new instances of the templates of the tasks the run's
        training rollouts solved in phases before ``index`` (none when it solved none)."""
        curriculum = self.hp.curriculum
        n = round(curriculum.solved_share * curriculum.tasks_per_phase)
        if not n:  # WebRL's curriculum (the default) reads no earlier phase
            return []
        solved = sorted({key for phase in range(index)
                         for key in solved_task_keys_of(self._phase_trajectories(phase), self._orm_version())})
        if not solved:
            return []
        return clients.taskgen_generate(GenerateRequest(
            phase=index, parent_keys=self._capped_parents(solved, index), n=n, generator="grounded", evolve="instances",
            seed=self.options.seed * 1000 + index,
        )).task_keys

    def _stage_filter(self, index: int, state: PhaseState) -> StageOutput:
        """Keep tasks the current critic finds neither hopeless nor solved: V(start) in [value_low, value_high].

        Phase 1 has no critic yet: the ORM's P(YES) on the start state stands in (as the WebRL authors did);
        with neither (rewards from the sandbox evaluators), the task's template's success so far does
        (:mod:`webrl.store.template_prior`), or every generated task is kept (``curriculum.judge_before_critic``).
        ``curriculum.filter_judge = "templates"`` values tasks by their templates in every phase, critic or not.
        """
        curriculum = self.hp.curriculum
        if not curriculum.enabled:
            keys = self._sample(self._task_keys(split="train", origin="seed"), curriculum.tasks_per_phase,
                                salt=index)
            return {"kept": len(keys)}, state.with_(kept_keys=keys)
        candidates = state.candidate_keys
        values, judge = self._start_values(candidates, index)
        if values is None:
            kept = candidates
        else:
            kept = clients.taskgen_filter(FilterRequest(
                task_keys=candidates, values=values, critic_version=judge,
                low=curriculum.value_low, high=curriculum.value_high,
            )).kept
        if judge == "templates" and values is not None:  # the templates the actor solves sometimes first
            kept = sorted(kept, key=lambda k: -values[k])
        quota = curriculum.tasks_per_phase
        kept = kept[:quota]
        in_band = len(kept)
        if values is not None and curriculum.fill_filter and len(kept) < quota:
            taken = set(kept)
            rest = [k for k in candidates if k not in taken]
            kept += nearest_to_band(rest, values, curriculum.value_low, curriculum.value_high)[: quota - len(kept)]
        return ({"kept": len(kept), "in_band": in_band, "candidates": len(candidates), "judge": judge},
                state.with_(kept_keys=kept))

    def _start_values(self, keys: list[str], index: int) -> tuple[dict[str, float] | None, str]:
        """V(start state) per task from the critic, or the ORM's P(YES) before the first critic exists; or each task's
        template's success so far (:meth:`_stage_filter`)."""
        critic, orm = self.critic_for_phase(index), self.options.orm
        curriculum = self.hp.curriculum
        if keys and (curriculum.filter_judge == "templates"
                     or (not (critic or orm) and curriculum.judge_before_critic == "templates")):
            from webrl.store.template_prior import template_values

            with session_scope(self.settings) as s:
                return template_values(s, keys, range(index), self._orm_version(), run_id=self.run_id), "templates"
        if not keys or not (critic or orm):
            return None, "none"
        starts = clients.rollout_observe(ObserveRequest(task_keys=keys)).states
        if critic:  # a request holds at most MAX_STATES states: the paper's 1,000 candidates take four
            states = [CriticState.of(start) for start in starts]
            values = [value for i in range(0, len(states), MAX_STATES)
                      for value in clients.critic_value(ValueRequest(critic=critic,
                                                                     states=states[i:i + MAX_STATES])).values]
            judge = f"critic:{Path(critic).name}"
        else:
            values = clients.orm_start_value(StartValueRequest(orm=orm, states=starts)).values
            judge = f"orm:{Path(orm).name}"
        return dict(zip(keys, values, strict=True)), judge

    def _stage_rollout(self, index: int, state: PhaseState) -> StageOutput:
        """The actor's sampled episodes on the phase's kept tasks, attempt 0; with ``rollout.min_solved``, further
        attempts at the tasks no episode has solved yet, each round labelled as it ends (labels are idempotent: the
        label stage finds them), until that many tasks are solved or ``rollout.max_attempts`` attempts have run.
        ``solved_by_attempt``: the tasks solved after each attempt. Episodes of a later attempt (stored before a kill)
        do not count before their attempt, so a resumed stage decides and reports as an uninterrupted one did."""
        rollout = self.hp.rollout
        label = f"phase {index}: rollout"
        policy = self._policy(self.actor_for_phase(index), rollout.temperature, label)
        ids: list[int] = []
        keys, solved_by_attempt = state.kept_keys, []
        for attempt in range(rollout.max_attempts):
            shown = label if attempt == 0 else f"{label}, attempt {attempt + 1} ({len(keys)} unsolved)"
            round_ids = self._rollout_chunks(keys, index, policy, purpose="train", label=shown, attempt=attempt)
            ids += round_ids
            if not rollout.min_solved:
                break
            self._label(round_ids, f"phase {index}: ORM, attempt {attempt + 1}")
            later = range(attempt + 1, rollout.max_attempts)
            solved = set(solved_task_keys_of([t for t in self._phase_trajectories(index) if t.attempt not in later],
                                             self._orm_version()))
            solved_by_attempt.append(len(solved))
            keys = [k for k in state.kept_keys if k not in solved]
            if len(solved) >= rollout.min_solved or not keys:
                break
        return ({"rollouts": len(ids), "actor_versions": actor_versions(self.settings, ids),
                 **({"attempts": len(solved_by_attempt), "solved_by_attempt": solved_by_attempt}
                    if rollout.min_solved else {})}, state)

    def _stage_label(self, index: int, state: PhaseState) -> StageOutput:
        ids = [t.id for t in self._phase_trajectories(index)]
        return self._label(ids, f"phase {index}: ORM"), state

    def _train_max_length(self) -> int:
        """Training sequences: the served prompt budget plus the completion, so the trainer re-renders states
        exactly as the policy saw them (the trainer clamps it to the model's context)."""
        return self.settings.actor.max_prompt_tokens + COMPLETION_BUDGET

    def _stage_train(self, index: int, state: PhaseState) -> StageOutput:
        """Critic, then actor, on this phase's experience plus replay; publishes both checkpoints. A phase
        without labelled rollouts (a strict filter kept nothing) trains nothing: actor and critic carry over."""
        if not self._phase_trajectories(index):
            log.warning("phase %d has no rollouts to train on; actor and critic carry over", index)
            return {"skipped": True}, state.with_(actor_path=self.actor_for_phase(index),
                                                  critic_path=self.critic_for_phase(index))
        result = clients.train_phase(self.phase_job(index))
        metrics = {k: v for k, v in result.metrics.items() if isinstance(v, int | float)}
        return ({"actor_version": result.actor.version, "critic_version": result.critic.version, **metrics},
                state.with_(actor_path=result.actor.path, actor_version=result.actor.version,
                            critic_path=result.critic.path, critic_version=result.critic.version))

    def _stage_validate(self, index: int, state: PhaseState) -> StageOutput:
        """Publish the phase's updated actor only when it has not lost significantly more of the validation tasks
        (:meth:`validation_keys`) than it gained against the actor the phase started from (one-sided sign test at
        ``evaluation.validation_alpha``, :mod:`webrl.method.acceptance`), nor more than
        ``evaluation.validation_margin`` of them net where a margin is set; else the start actor is published again
        (the critic's update stays). Passes when ``evaluation.validation_tasks`` is 0 or the actor was not
        updated. Records both actors' solved tasks and the verdict."""
        start = self.actor_for_phase(index)
        trained = self.phase_metrics(index)
        updated = not (trained.get("train.skipped") or trained.get("train.actor_skipped")
                       or trained.get("train.actor_steps") == 0)
        if not self.hp.evaluation.validation_tasks or not updated or state.actor_path in (None, start):
            return {"skipped": True}, state
        assert state.actor_path is not None
        keys = self.validation_keys()
        before = self._start_validation(index, keys, start)
        after = self._validation_solved(index, keys, state.actor_path, VALIDATION_ATTEMPT, "updated")
        result = verdict(keys, before, after, self.hp.evaluation.validation_alpha, self.hp.evaluation.validation_margin)
        published = after if result.accepted else before
        metrics = {**result.to_json(), "keys": keys, "start_solved_tasks": sorted(before),
                   "solved_tasks": sorted(after), "published_solved_tasks": sorted(published)}
        if result.accepted:
            return metrics, state
        log.warning("phase %d: the updated actor lost %d and gained %d of %d validation tasks (p = %.4f, alpha %s, "
                    "margin %s: refused by the %s); the start actor is published again", index, result.lost,
                    result.gained, result.tasks, result.p, self.hp.evaluation.validation_alpha, result.margin,
                    result.refused_by)
        version = self.phase_state(index - 1).actor_version if index > 1 else None
        return metrics, state.with_(actor_path=start, actor_version=version)

    def validation_keys(self) -> list[str]:
        """The ``evaluation.validation_tasks`` train-split tasks a phase's update is validated on
        (:func:`webrl.store.template_groups.validation_sample`: the same for every run and seed, so they share the
        start actor's stored evaluation on them)."""
        return validation_sample(self.settings, self.hp.evaluation.validation_tasks)

    def _start_validation(self, index: int, keys: list[str], start: str) -> set[str]:
        """The start actor's solved validation tasks: what the previous phase published, as its validate stage
        recorded them, else its greedy episodes (:meth:`_validation_solved`)."""
        previous = self.phase_metrics(index - 1) if index > 1 else {}
        if previous.get("validate.keys") == keys and "validate.published_solved_tasks" in previous:
            return set(previous["validate.published_solved_tasks"])
        return self._validation_solved(index, keys, start, VALIDATION_ATTEMPT + 1, "start")

    def _validation_solved(self, index: int, keys: list[str], actor: str, attempt: int, which: str) -> set[str]:
        """The validation tasks ``actor`` solves greedily: read back from an evaluation stored under its content key
        (the SFT actor's, stored by the first run that validated it), else its episodes (purpose "validate",
        ``attempt``), stored for the next run."""
        label = f"phase {index}: validate the {which} actor"
        scores, _ = greedy_scores(self.settings, actor, keys, keys, self.hp.rollout, lambda: self._rollout_chunks(
            keys, index, self._policy(actor, None, label), purpose=VALIDATION_PURPOSE, label=label, attempt=attempt),
            split="train")
        return set(solved_task_keys(scores))

    def phase_job(self, index: int) -> PhaseJob:
        """The ``train.phase`` job of phase ``index``: its checkpoints and the run's hyperparameters."""
        return PhaseJob(phase=index, run_id=self.run_id, actor=self.actor_for_phase(index),
                        critic=self.critic_for_phase(index), critic_base=self.options.actor, seed=self.options.seed,
                        max_length=self._train_max_length(), hyperparams=self.hp, tracking=self.tracking,
                        probe=self.options.probe or None, orm_version=self._orm_version(),
                        # only where the anchor reads them: a job without it keeps the version it had
                        anchors=(self.options.anchors or None) if self.hp.actor.anchor_kl > 0 else None)

    # ---- helpers ------------------------------------------------------------------------------------
    def _task_keys(self, *, split: str, origin: str | None, limit: int | None = None) -> list[str]:
        with session_scope(self.settings) as s:
            keys = [t.key for t in repo.tasks_where(s, split=split, origin=origin)]
        if not keys:
            raise RuntimeError(f"no {split} tasks in the database; run `webrl tasks load` first")
        return keys[:limit] if limit else keys

    def _sample(self, keys: list[str], n: int, salt: int) -> list[str]:
        rng = random.Random(self.options.seed * 7919 + salt)
        return sorted(rng.sample(keys, min(n, len(keys))))

    def _capped_parents(self, keys: list[str], index: int) -> list[str]:
        """The parents of phase ``index``'s generate request: ``keys`` as they are, or, when there are more than one
        request names (:data:`~webrl.wire.contracts.MAX_PARENTS`: the solved tasks of many phases), the run's seeded
        sample of that many, the same on a resume."""
        return keys if len(keys) <= MAX_PARENTS else self._sample(keys, MAX_PARENTS, salt=PARENTS_SALT + index)

    def _policy(self, actor: str, temperature: float | None, label: str) -> PolicySpec:
        """What a rollout of the folder ``actor`` runs (:func:`webrl.policies.actor_service.rollout_policy`), with the
        wait for the actor service to serve it shown as progress. A sampled rollout (``temperature`` given: the
        training rollouts) loads the actor in ``rollout.sampling_dtype``; a greedy one (evaluation) in the
        settings' own."""
        dtype = self.hp.rollout.sampling_dtype if temperature is not None else None
        if not self.settings.rollouts_through_actor:
            return rollout_policy(self.settings, actor, temperature, dtype)
        waiting = f"{label}: actor service loads {Path(actor).name}"
        self.on_progress(waiting, 0, 1)
        policy = rollout_policy(self.settings, actor, temperature)
        self.on_progress(waiting, 1, 1)
        return policy

    def _rollout(self, keys: list[str], phase: int, actor: str, *, purpose: str, label: str,
                 temperature: float | None = None) -> list[int]:
        """Roll out ``actor`` on ``keys`` in chunks; each chunk is an idempotent job (resumable)."""
        return self._rollout_chunks(keys, phase, self._policy(actor, temperature, label), purpose=purpose, label=label)

    def _rollout_chunks(self, keys: list[str], phase: int, policy: PolicySpec, *, purpose: str, label: str,
                        attempt: int = 0) -> list[int]:
        """Run ``policy`` on ``keys``, one idempotent ``rollout.run`` job per chunk, with progress; the ids."""
        ids: list[int] = []
        chunk = self.hp.rollout.chunk
        self.on_progress(label, 0, len(keys))
        for start in range(0, len(keys), chunk):
            request = self.rollout_request(keys[start:start + chunk], phase, policy, purpose, attempt=attempt)
            result = clients.rollout_run(request)
            ids.extend(result.trajectory_ids)
            self._reused += len(result.trajectory_ids) - result.n_new  # episodes stored before (a resume)
            self.on_progress(label, min(start + chunk, len(keys)), len(keys))
        return ids

    def rollout_request(self, keys: list[str], phase: int, policy: PolicySpec, purpose: str, *,
                        attempt: int = 0) -> RolloutRequest:
        """The ``rollout.run`` job of ``keys``: the run's rollout knobs (concurrency, horizon, early stops; an
        evaluation's concurrency is ``evaluation.concurrency`` when set). A sampled
        rollout of a local checkpoint is seeded by the run's seed, the phase and the attempt
        (:func:`webrl.models.model_policies.step_seed` seeds each step from it), so the same run repeats its
        episodes."""
        rollout = self.hp.rollout
        concurrency = rollout.concurrency
        if purpose in ("eval", VALIDATION_PURPOSE) and self.hp.evaluation.concurrency is not None:
            concurrency = self.hp.evaluation.concurrency
        if isinstance(policy, CheckpointSpec) and policy.temperature:
            policy = policy.model_copy(update={"sampling_seed": sampling_seed(self.options.seed, phase, attempt)})
        return RolloutRequest(task_keys=keys, phase=phase, attempt=attempt, run_id=self.run_id, purpose=purpose,
                              policy=policy, concurrency=concurrency, max_steps=rollout.max_steps,
                              max_parse_failures=rollout.max_parse_failures,
                              max_repeated_actions=rollout.max_repeated_actions,
                              screenshots=self.options.screenshots)

    def _orm_version(self) -> str:
        """The version the run's rewards are stored under (:attr:`PipelineOptions.orm_version`)."""
        return self.options.orm_version

    def _label(self, trajectory_ids: list[int], label: str) -> dict[str, Any]:
        """Outcome rewards: the ORM's judgement (or, without an ORM, the sandbox evaluator's score)."""
        self.on_progress(label, 0, len(trajectory_ids))
        if self.options.orm and trajectory_ids:
            scored = clients.orm_score(ScoreRequest(trajectory_ids=trajectory_ids, orm=self.options.orm,
                                                    threshold=self.hp.reward.orm_threshold))
            if scored.orm_version != self._orm_version():  # republished while the job ran: another ORM's labels
                raise InvalidRequest("orm", f"the ORM at {self.options.orm} labelled as {scored.orm_version!r}, not "
                                     f"the run's {self._orm_version()!r}: it was republished while the run went on; "
                                     "put the run's ORM back to resume it, or start a new --run")
        else:
            with session_scope(self.settings) as s:
                for tid in trajectory_ids:
                    traj = s.get(m.TrajectoryRow, tid)
                    p = float(traj.env_score or 0.0) if traj is not None else 0.0
                    repo.save_label(s, tid, EVALUATOR_LABELS, p_yes=p, threshold=self.hp.reward.orm_threshold)
        self.on_progress(label, len(trajectory_ids), len(trajectory_ids))
        return orm_agreement(self.settings, trajectory_ids, self._orm_version(), judged=bool(self.options.orm))

    def _evaluation_metrics(self, trajectory_ids: list[int]) -> dict[str, Any]:
        """Success on the evaluated tasks (:func:`pipeline_metrics.evaluation_metrics`): the evaluate stage's and
        :meth:`evaluate_in_full`'s one read of their trajectories."""
        return evaluation_metrics(self.settings, trajectory_ids)

    def _phase_trajectories(self, phase: int) -> list[m.TrajectoryRow]:
        """This run's training rollouts of ``phase`` (tasks and labels loaded, readable after the session): never
        another run's, though every run numbers its phases alike."""
        with session_scope(self.settings) as s:
            return repo.trajectories_for_phase(s, phase, purpose="train", run_id=self.run_id)


#: A stage: the pipeline, the phase's index and its state so far -> the stage's metrics and the state after it.
Stage = Callable[[Pipeline, int, PhaseState], StageOutput]
#: Stages by name in the order a phase runs them; a resumed phase skips those it finished.
StageTable = dict[str, Stage]

#: Phase 0 measures the SFT actor: evaluate it, then roll it out on seed tasks whose failures seed the curriculum.
BASELINE_TABLE: StageTable = {
    "evaluate": Pipeline._stage_evaluate,
    "seed-rollout": Pipeline._stage_seed_rollout,
}
#: Each phase i >= 1 (docs/design.md, "The method in one page"): steps 1 (generate, filter), 2, 3, 4-6 and 7, with
#: this project's acceptance check of the update (validate) before the evaluation.
PHASE_TABLE: StageTable = {
    "generate": Pipeline._stage_generate,
    "filter": Pipeline._stage_filter,
    "rollout": Pipeline._stage_rollout,
    "label": Pipeline._stage_label,
    "train": Pipeline._stage_train,
    "validate": Pipeline._stage_validate,
    "evaluate": Pipeline._stage_evaluate,
}
#: The stage names alone, as the viewer and the report list them.
STAGES: tuple[str, ...] = tuple(PHASE_TABLE)
BASELINE_STAGES: tuple[str, ...] = tuple(BASELINE_TABLE)
