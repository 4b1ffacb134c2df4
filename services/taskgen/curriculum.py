"""The taskgen service's logic: generate tasks from a phase's failures, store them with their lineage,
and filter them by the critic's value of their start state."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.taskgen.dedup import Deduplicator
from services.taskgen.grounded import GroundedGenerator, generated_task_id
from services.taskgen.llm import NO_API_KEY, LLMGenerator, OpenAICompatibleLLM, Rejection, llm_task_config
from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.session import session_scope
from webrl.method.hyperparams import DEFAULTS, check_band
from webrl.safety.allow_list import endpoint_problem, origin
from webrl.wire.contracts import (
    FilterRequest,
    FilterResult,
    GenerateRequest,
    GenerateResult,
    InvalidRequest,
    NotServing,
    Rejected,
)

log = logging.getLogger(__name__)


@dataclass
class GenerationResult:
    task_keys: list[str]
    rejected: list[Rejection] = field(default_factory=list)
    duplicates: int = 0


def _parents(settings: Settings, parent_keys: list[str]) -> list[m.Task]:
    with session_scope(settings) as s:
        rows = repo.tasks_by_keys(s, parent_keys)
        missing = sorted(set(parent_keys) - {r.key for r in rows})
        if missing:
            raise KeyError(f"unknown parent task keys: {missing[:5]}")
        s.expunge_all()
        return rows


def _existing_intents(settings: Settings) -> list[str]:
    with session_scope(settings) as s:
        return list(s.scalars(select(m.Task.intent)).all())


def _store(settings: Settings, phase: int, generator: str, items: list[tuple[str, TaskConfig, int | None]],
           request: str | None = None) -> tuple[list[str], bool]:
    """Store (key, TaskConfig, parent id) triples in one transaction, with the ``request`` digest that made them
    (:func:`request_digest`) when given. Returns the keys and True; or, when a copy of the same request (another
    delivery of the job) stored its batch first, that batch's keys and False, and nothing of this one is stored.
    The digest's row goes in first: a concurrent copy's insert waits for this transaction, then finds the batch."""
    keys = [key for key, _, _ in items]
    with session_scope(settings) as s:
        if request is not None:
            stored = _generation_row(s, request)
            if stored is None:
                row = m.GenerationRequest(digest=request, task_keys=keys)
                stored = repo.insert_once(s, row, lambda: _generation_row(s, request))
                stored = None if stored is row else stored
            if stored is not None:
                return list(stored.task_keys), False
        for key, config, parent_id in items:
            repo.upsert_task(s, key, config, origin="generated", split="train", phase=phase,
                             parent_id=parent_id, generator=generator)
    return keys, True


def _generation_row(s: Session, digest: str) -> m.GenerationRequest | None:
    return s.scalar(select(m.GenerationRequest).where(m.GenerationRequest.digest == digest))


def request_digest(settings: Settings, request: GenerateRequest) -> str:
    """What decides a request's tasks besides the tasks already stored: the request, the suite's seed (the grounded
    generator's sites) and, for the llm generator, the configured judge it falls back to."""
    judge = [settings.llm_judge.endpoint, settings.llm_judge.model] if request.generator == "llm" else None
    payload = json.dumps({"request": request.model_dump(mode="json"), "suite_seed": settings.seed, "judge": judge},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def stored_generation(settings: Settings, digest: str) -> list[str] | None:
    """The task keys a request with this digest stored, None when it never did."""
    with session_scope(settings) as s:
        row = s.get(m.GenerationRequest, digest)
        return None if row is None else list(row.task_keys)


def generate_grounded(settings: Settings, phase: int, parent_keys: list[str], n: int,
                      seed: int, *, instances_only: bool = False, request: str | None = None) -> GenerationResult:
    parents = _parents(settings, parent_keys)
    dedup = Deduplicator(_existing_intents(settings))
    generator = GroundedGenerator(suite_seed=settings.seed)
    try:
        proposals = generator.propose([(p.key, repo.task_config(p)) for p in parents], n, seed, phase,
                                      admit=dedup.admit, instances_only=instances_only)
    finally:
        generator.close()
    ids = {p.key: p.id for p in parents}
    items = [(f"generated/p{phase}/{p.config.task_id}", p.config, ids[p.parent_key]) for p in proposals]
    return GenerationResult(_store(settings, phase, "grounded", items, request)[0])


class EndpointRefused(InvalidRequest):
    """An LLM endpoint that is not configured: taskgen does not send requests wherever a caller asks (REST
    answers 422 naming ``endpoint``; the Celery task fails with this message)."""

    def __init__(self, message: str) -> None:
        super().__init__("endpoint", message)


def endpoint_api_key(settings: Settings, endpoint: str) -> str:
    """The bearer key for ``endpoint``: ``llm_judge.api_key`` when it is the configured ``llm_judge.endpoint`` (same
    origin), else vLLM's placeholder "EMPTY" (the OpenAI client wants some key), so the key goes to its own server
    only, never to another endpoint a request names."""
    configured = settings.llm_judge.endpoint
    if settings.llm_judge.api_key and configured and origin(endpoint) == origin(configured):
        return settings.llm_judge.api_key
    return NO_API_KEY


def generate_llm(settings: Settings, phase: int, parent_keys: list[str], n: int, seed: int, *,
                 endpoint: str, model: str, mode: str = "chat", feasibility: bool = True,
                 request: str | None = None) -> GenerationResult:
    """Group failures by site, ask the LLM for tasks in breadth, drop infeasible and duplicate ones.
    ``endpoint`` must be a configured one (``Settings.endpoint_allow_list``), else :class:`EndpointRefused`."""
    problem = endpoint_problem(endpoint, settings.endpoint_allow_list())
    if problem:
        raise EndpointRefused(problem)
    parents = _parents(settings, parent_keys)
    by_site: dict[str, list[m.Task]] = {}
    for p in parents:
        by_site.setdefault(p.site, []).append(p)
    llm = LLMGenerator(OpenAICompatibleLLM(endpoint, model, api_key=endpoint_api_key(settings, endpoint), mode=mode))
    dedup = Deduplicator(_existing_intents(settings))
    rng = random.Random(seed)
    result = GenerationResult(task_keys=[])
    items: list[tuple[str, TaskConfig, int | None]] = []
    per_site: dict[str, int] = {}
    for site, tasks in sorted(by_site.items()):
        quota = max(1, n * len(tasks) // len(parents))
        examples = rng.sample(tasks, min(len(tasks), 10))
        good, bad = llm.evolve(site, [t.intent for t in examples])
        result.rejected.extend(bad)
        for intent in good:
            if per_site.get(site, 0) >= quota:
                break
            if not dedup.admit(intent):
                result.duplicates += 1
                continue
            if feasibility and not llm.feasible(site, intent):
                result.rejected.append(Rejection(intent, "feasibility judge answered NO"))
                continue
            task_id = generated_task_id(phase, intent)
            items.append((f"generated/p{phase}/{task_id}", llm_task_config(site, intent, task_id), examples[0].id))
            per_site[site] = per_site.get(site, 0) + 1
    result.task_keys, ours = _store(settings, phase, "llm", items, request)
    return result if ours else GenerationResult(result.task_keys)  # another copy's batch: its report was its own


def filter_by_value(settings: Settings, task_keys: list[str], values: dict[str, float], *,
                    critic_version: str, low: float = DEFAULTS.curriculum.value_low,
                    high: float = DEFAULTS.curriculum.value_high) -> list[str]:
    """Keep tasks whose start-state value V lies in [low, high]; every value is stored (idempotent).

    V is the critic's P(success) of the task's start state (the min of its two heads); right after SFT,
    with no critic yet, the ORM's P(YES) on the start state stands in (as the WebRL authors did).
    """
    check_band(low, high)
    missing = [k for k in task_keys if k not in values]
    if missing:
        raise ValueError(f"no value for tasks {missing[:5]}")
    with session_scope(settings) as s:
        rows = repo.tasks_by_keys(s, task_keys)
        if len(rows) != len(set(task_keys)):
            unknown = sorted(set(task_keys) - {r.key for r in rows})
            raise KeyError(f"unknown task keys: {unknown[:5]}")
        repo.save_critic_values(s, critic_version, [(r.id, float(values[r.key])) for r in rows])
    return [k for k in task_keys if low <= values[k] <= high]


# ---- the operations: ``taskgen.generate`` / ``POST /v1/tasks/generate`` and ``taskgen.filter`` / ``.../filter``
def generate(settings: Settings, request: GenerateRequest) -> GenerateResult:
    """New tasks from the parents (in breadth, or new instances of their templates). Idempotent: a request that
    already stored its tasks (the same digest, :func:`request_digest`) returns their keys and generates nothing, so
    a retry or a resumed pipeline gets the batch it began with, not the next one past it (its rejections and
    duplicates were reported by the call that generated)."""
    digest = request_digest(settings, request)
    stored = stored_generation(settings, digest)
    if stored is not None:
        return GenerateResult(task_keys=stored)
    common = (settings, request.phase, request.parent_keys, request.n, request.seed)
    try:
        if request.generator == "llm":
            if request.evolve != "breadth":
                raise InvalidRequest("evolve", "the llm generator evolves tasks in breadth only; new instances of a "
                                     "template come from the grounded generator")
            endpoint = request.endpoint or settings.llm_judge.endpoint
            model = request.model or settings.llm_judge.model
            if not (endpoint and model):
                raise InvalidRequest("endpoint", "the llm generator needs endpoint and model (in the request or as "
                                     "WEBRL_LLM_JUDGE__ENDPOINT and WEBRL_LLM_JUDGE__MODEL)")
            result = _from_llm(common, endpoint, model, request, digest)
        else:
            result = generate_grounded(*common, instances_only=request.evolve == "instances", request=digest)
    except KeyError as exc:
        raise InvalidRequest("parent_keys", str(exc.args[0])) from None
    return GenerateResult(task_keys=result.task_keys, duplicates=result.duplicates,
                          rejected=[Rejected(text=r.text, reason=r.reason) for r in result.rejected])


def _from_llm(common: tuple, endpoint: str, model: str, request: GenerateRequest, digest: str) -> GenerationResult:
    """:func:`generate_llm`, its server's refusals told apart: a model it does not serve is the request's fault (an
    :class:`InvalidRequest` naming ``model``), a server that cannot be reached or fails is not (:class:`NotServing`:
    REST answers 503); neither stores a task."""
    import openai

    try:
        return generate_llm(*common, endpoint=endpoint, model=model, mode=request.mode,
                            feasibility=request.feasibility, request=digest)
    except openai.NotFoundError:
        raise InvalidRequest("model", f"the llm generator's endpoint {origin(endpoint)} serves no model {model!r}") \
            from None
    except openai.APIConnectionError as exc:
        raise NotServing(f"the llm generator's endpoint {origin(endpoint)} cannot be reached: {exc}") from None
    except openai.APIStatusError as exc:
        raise NotServing(f"the llm generator's endpoint {origin(endpoint)} answered {exc.status_code}") from None


def filter_tasks(settings: Settings, request: FilterRequest) -> FilterResult:
    """Keep the tasks whose value lies in [low, high]; stores every value (idempotent per critic version)."""
    try:
        kept = filter_by_value(settings, request.task_keys, request.values, critic_version=request.critic_version,
                               low=request.low, high=request.high)
    except KeyError as exc:
        raise InvalidRequest("task_keys", str(exc.args[0])) from None
    return FilterResult(kept=kept)
