"""The bounds of the requests between services, and the run's record bounded by them: a request over a bound is a
validation error naming its field (REST: 422), and a record the CLI accepts never makes a request its own phases
may not send."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.method.presets import PRESETS
from webrl.orchestration.pipeline import Pipeline
from webrl.orchestration.pipeline_state import PipelineOptions
from webrl.wire.contracts import (
    MAX_CONCURRENCY,
    MAX_GENERATE,
    MAX_KEYS,
    MAX_PARENTS,
    MAX_RUN_NAME,
    MAX_SEED,
    FilterRequest,
    GenerateRequest,
    ObserveRequest,
    OrmHeadJob,
    PhaseJob,
    RolloutRequest,
    ScoreRequest,
    SftJob,
    TrackingSpec,
    ValueRequest,
)

KEYS = [f"k{i}" for i in range(MAX_KEYS + 1)]
IDS = list(range(1, MAX_KEYS + 2))

#: (model, a valid payload, the field given one item more than its bound, that many items)
TOO_MANY: list[tuple[type[BaseModel], dict[str, Any], str, list[Any]]] = [
    (RolloutRequest, {"policy": {"kind": "oracle"}}, "task_keys", KEYS),
    (ObserveRequest, {}, "task_keys", KEYS),
    (ValueRequest, {}, "task_keys", KEYS),
    (ScoreRequest, {}, "trajectory_ids", IDS),
    (SftJob, {"base": "/b", "output": "/o"}, "trajectory_ids", IDS),
    (FilterRequest, {"values": {k: 0.5 for k in KEYS}, "critic_version": "c"}, "task_keys", KEYS),
    (GenerateRequest, {"phase": 1, "n": 1}, "parent_keys", KEYS[:MAX_PARENTS + 1]),
]


@pytest.mark.parametrize(("model", "payload", "field", "items"), TOO_MANY,
                         ids=lambda value: value.__name__ if isinstance(value, type) else "")
def test_a_list_longer_than_one_request_carries_is_refused_naming_its_field(
        model: type[BaseModel], payload: dict[str, Any], field: str, items: list[Any]) -> None:
    """Each key or id is a bound parameter of an SQL ``IN (...)``: past the bound the request is refused, not the
    database."""
    model.model_validate({**payload, field: items[:-1]})  # the bound itself is a valid request
    with pytest.raises(ValidationError) as refused:
        model.model_validate({**payload, field: items})
    assert [error["loc"] for error in refused.value.errors()] == [(field,)], refused.value


@pytest.mark.parametrize("model", [RolloutRequest, ObserveRequest])
def test_concurrency_is_bounded_by_the_shared_constant(model: type[BaseModel]) -> None:
    payload = {"task_keys": ["k"], **({"policy": {"kind": "oracle"}} if model is RolloutRequest else {})}
    assert model.model_validate({**payload, "concurrency": MAX_CONCURRENCY}).concurrency == MAX_CONCURRENCY
    with pytest.raises(ValidationError, match="concurrency"):
        model.model_validate({**payload, "concurrency": MAX_CONCURRENCY + 1})


@pytest.mark.parametrize(("model", "payload"), [
    (SftJob, {"base": "/b", "output": "/o", "phase": 0}),
    (PhaseJob, {"phase": 1, "actor": "/a"}),
    (OrmHeadJob, {"base": "/b", "output": "/o", "trajectory_ids": [1, 2]}),
])
@pytest.mark.parametrize("seed", [-1, MAX_SEED + 1])
def test_a_training_seed_numpy_refuses_is_refused_naming_the_field(model: type[BaseModel], payload: dict[str, Any],
                                                                   seed: int) -> None:
    assert model.model_validate({**payload, "seed": MAX_SEED}).seed == MAX_SEED
    with pytest.raises(ValidationError) as refused:
        model.model_validate({**payload, "seed": seed})
    assert [error["loc"] for error in refused.value.errors()] == [("seed",)]


def test_a_run_name_fits_the_runs_name_column() -> None:
    assert MAX_RUN_NAME == 80  # runs.name is String(80)
    TrackingSpec(run="r" * MAX_RUN_NAME)
    with pytest.raises(ValidationError, match="at most 80 characters"):
        TrackingSpec(run="r" * (MAX_RUN_NAME + 1))


def test_an_sft_job_names_what_it_trains_on() -> None:
    """Without trajectory ids or a phase it would train on every stored trajectory."""
    for refused in ({}, {"purpose": "sft"}, {"kind": "orm", "purpose": "orm"}):
        with pytest.raises(ValidationError, match="give trajectory_ids or phase"):
            SftJob.model_validate({"base": "/b", "output": "/o", **refused})
    SftJob(base="/b", output="/o", trajectory_ids=[1])
    SftJob(base="/b", output="/o", phase=0, purpose="sft")
    SftJob(base="/b", output="/o", trajectory_ids=[1, 2], phase=0, purpose="sft")  # webrl bootstrap's


@pytest.mark.parametrize(("override", "field"), [
    ({"curriculum.candidates_per_phase": MAX_GENERATE + 1}, "candidates_per_phase"),
    ({"curriculum.tasks_per_phase": MAX_PARENTS + 1, "curriculum.candidates_per_phase": MAX_GENERATE},
     "tasks_per_phase"),
    ({"curriculum.seed_tasks": MAX_KEYS + 1}, "seed_tasks"),
    ({"rollout.chunk": MAX_KEYS + 1}, "chunk"),
    ({"rollout.concurrency": MAX_CONCURRENCY + 1}, "concurrency"),
    ({"evaluation.concurrency": MAX_CONCURRENCY + 1}, "concurrency"),
    ({"curriculum.candidates_per_phase": MAX_GENERATE, "curriculum.solved_share": 0.5}, "one filter request"),
    ({"rollout.min_solved": 1, "rollout.max_attempts": MAX_KEYS // DEFAULTS.curriculum.tasks_per_phase + 1},
     "one labelling request"),
])
def test_the_record_refuses_counts_its_requests_could_not_carry(override: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        with_overrides(DEFAULTS, override)


def test_every_preset_and_the_bounds_themselves_are_records() -> None:
    for record in PRESETS.values():
        assert record.curriculum.filtered_at_most <= MAX_KEYS and record.labelled_at_most <= MAX_KEYS
    with_overrides(DEFAULTS, {"curriculum.candidates_per_phase": MAX_GENERATE,
                              "curriculum.tasks_per_phase": MAX_PARENTS, "curriculum.seed_tasks": MAX_KEYS,
                              "rollout.chunk": MAX_KEYS, "rollout.concurrency": MAX_CONCURRENCY})


def _pipeline(seed: int) -> Pipeline:
    """A pipeline with only its options: what the parents' sample reads."""
    pipeline = Pipeline.__new__(Pipeline)
    pipeline.options = PipelineOptions(seed=seed)
    return pipeline


def test_a_phase_names_at_most_the_parents_one_generate_request_carries() -> None:
    """The solved tasks of many phases (or the failures of a large phase 0) are sampled to MAX_PARENTS, the same
    sample on a resume; fewer go as they are, in their order."""
    few = [f"task/{i}" for i in reversed(range(10))]
    assert _pipeline(0)._capped_parents(few, 2) == few
    many = [f"task/{i}" for i in range(MAX_PARENTS * 2)]
    capped = _pipeline(0)._capped_parents(many, 2)
    assert len(capped) == MAX_PARENTS and set(capped) <= set(many) and len(set(capped)) == MAX_PARENTS
    assert capped == _pipeline(0)._capped_parents(list(many), 2)
    assert capped != _pipeline(1)._capped_parents(many, 2)
    GenerateRequest(phase=2, parent_keys=capped, n=MAX_GENERATE)


def test_a_sampling_temperature_above_what_a_served_actor_takes_is_refused_where_it_is_given() -> None:
    """The actor's act request takes temperatures up to 2 (as OpenAI-compatible servers do): a rollout's policy or
    a run's record above it is refused when given, not at a rollout's first step after the job was accepted."""
    from webrl.wire.contracts import MAX_TEMPERATURE, ActRequest

    assert MAX_TEMPERATURE == 2.0
    for kind in ("endpoint", "checkpoint"):
        policy = {"kind": kind, "temperature": 2.5, **({"path": "/models/actor"} if kind == "checkpoint" else {})}
        with pytest.raises(ValidationError, match="less than or equal to 2"):
            RolloutRequest(task_keys=["k"], policy=policy)
        RolloutRequest(task_keys=["k"], policy={**policy, "temperature": 2.0})
    with pytest.raises(ValidationError, match="less than or equal to 2"):
        ActRequest(batch=[], temperature=2.5)
    with pytest.raises(ValueError, match=r"rollout\.temperature"):
        with_overrides(DEFAULTS, {"rollout.temperature": 2.5})
