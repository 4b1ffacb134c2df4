"""ORM scoring: trajectories -> p = P(YES) and reward = 1[p >= threshold], with two backends.

- :class:`LocalOrm`: a Hugging Face causal LM (or a LoRA adapter on its base; or either with a classification
  head, :mod:`webrl.models.orm_head`, whose P(success) stands for P(YES)) run here, prompts batched
  (``settings.orm.batch_size``), each prompt cut by shortening the observation only
  (:func:`webrl.prompts.orm_prompt.build_orm_prompt`) to ``settings.orm.max_prompt_tokens`` and to what the folder
  reads (:func:`webrl.prompts.orm_prompt.orm_context_tokens`: a small ORM's tokenizer declares the length it was trained
  on), so it judges prompts cut where its training examples were.
- :class:`OpenAIOrm`: an OpenAI-compatible server (vLLM, SGLang) serving the ORM; one ``/v1/completions`` call
  with ``max_tokens=1`` and the top log-probs of the first generated position, from which YES and NO are read.

:func:`score_stored` scores stored trajectories and keeps one ``orm_labels`` row per (trajectory, ORM version),
so scoring twice costs nothing and changes nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.agent.schemas import Observation, Trajectory
from webrl.config import Settings
from webrl.db import models as m
from webrl.db.repository import load_trajectory, save_label
from webrl.db.session import session_scope
from webrl.method.rewards import reward_of
from webrl.model_folders import written_stamp
from webrl.models.orm import orm_probabilities, yes_no_token_ids
from webrl.prompts.orm_prompt import (
    NO,
    YES,
    build_orm_prompt,
    orm_context_tokens,
    orm_inputs,
    orm_prompt_budget,
    render_llama3_orm,
)
from webrl.serving.paths import requested_model_folder
from webrl.wire.contracts import (
    InvalidRequest,
    NotServing,
    ScoreItem,
    ScoreRequest,
    ScoreResult,
    StartValueRequest,
    StartValueResult,
)

log = logging.getLogger(__name__)

#: Top log-probs asked of an OpenAI-compatible server at the answer position (vLLM's default cap is 20).
TOP_LOGPROBS = 20


@dataclass(frozen=True)
class Judgement:
    """The ORM's verdict on one trajectory."""

    p: float  # P(YES) = softmax(logit_YES, logit_NO)[YES]
    reward: float  # 1 if p >= threshold else 0
    trajectory_id: int | None = None


class OrmBackend(Protocol):
    """Anything that turns trajectories into P(YES)."""

    version: str

    def probabilities(self, trajectories: Sequence[Trajectory]) -> list[float]: ...


class LocalOrm:
    """The ORM as a local transformers model (the tiny CPU model, a LoRA adapter on SmolLM2-135M, or
    webrl-orm-llama-3.1-8b on a GPU): generative (P(YES) from the answer logits), or a classifier when the folder
    carries a head (:mod:`webrl.models.orm_head`: P(success) from the head on the same prompt)."""

    def __init__(self, path: str | Path, settings: Settings) -> None:
        from webrl.models.loading import checkpoint_version, load_causal_lm, load_tokenizer
        from webrl.models.orm_head import OrmClassifier, is_orm_classifier

        self.classifier: OrmClassifier | None = None
        if is_orm_classifier(path):
            self.tokenizer = load_tokenizer(path, settings)
            self.classifier = OrmClassifier.from_pretrained(path, settings)
            config = self.classifier.backbone.config
        else:
            self.model, self.tokenizer = load_causal_lm(path, settings)
            config = self.model.config
        self.version = checkpoint_version(path)
        self.batch_size = settings.orm.batch_size
        self.layout = settings.orm.layout
        context = orm_context_tokens(config, self.tokenizer)
        self.max_tokens = orm_prompt_budget(context, settings.orm.max_prompt_tokens) if context else \
            settings.orm.max_prompt_tokens

    def prompts(self, trajectories: Sequence[Trajectory]) -> list[str]:
        return [build_orm_prompt(self.tokenizer, t, max_tokens=self.max_tokens, layout=self.layout)
                for t in trajectories]

    def probabilities(self, trajectories: Sequence[Trajectory], batch_size: int | None = None) -> list[float]:
        prompts, size = self.prompts(trajectories), batch_size or self.batch_size
        if self.classifier is not None:
            return self.classifier.probabilities(self.tokenizer, prompts, size)
        return orm_probabilities(self.model, self.tokenizer, prompts, batch_size=size)


def p_from_top_logprobs(top: dict[str, float], yes: str = YES, no: str = NO) -> float:
    """p = e^{l_YES} / (e^{l_YES} + e^{l_NO}) from the top log-probs of the answer position.

    An answer missing from the top-k has a log-prob at most the smallest one shown; that bound stands in for
    it (the exact value is not returned by the server). Neither answer in the top-k is an error.
    """
    found_yes, found_no = top.get(yes), top.get(no)
    if found_yes is None and found_no is None:
        raise ValueError(f"neither {yes!r} nor {no!r} is among the server's top log-probs {sorted(top)[:10]}")
    floor = min(top.values())
    ly = found_yes if found_yes is not None else floor
    ln = found_no if found_no is not None else floor
    return 1.0 / (1.0 + math.exp(ln - ly))


class OpenAIOrm:
    """The ORM behind an OpenAI-compatible completions endpoint (e.g. vLLM serving webrl-orm-llama-3.1-8b).

    Prompts are rendered here, as text: through ``tokenizer`` when one is given (so the observation is cut
    to ``settings.orm.max_prompt_tokens``), else in WebRL's exact Llama-3 layout, uncut. The answers are read
    as the served model's token texts: the text of the first token of YES and NO under ``tokenizer`` (just
    ``YES`` and ``NO`` for Llama-3), so a model whose tokenizer splits them is judged by the same tokens the
    local backend reads.

    Its labels are stored under ``version``: for a model served by its folder's path, the version that folder
    declares (:func:`~webrl.models.loading.checkpoint_version`, what a run's rewards are read back under, as with
    the local backend), else the served name, bounded to the version columns.
    """

    def __init__(self, endpoint: str, model: str, settings: Settings, tokenizer: Any | None = None,
                 timeout_s: float = 120.0, version: str | None = None) -> None:
        from openai import OpenAI

        from webrl.models.loading import bounded_version

        self.client = OpenAI(base_url=endpoint.rstrip("/"), api_key=settings.orm.api_key or "none",
                             timeout=timeout_s, max_retries=2)
        self.model = model
        self.version = version or bounded_version(model)
        self.tokenizer = tokenizer
        self.layout = settings.orm.layout
        self.max_tokens = settings.orm.max_prompt_tokens
        self.batch_size = settings.orm.batch_size
        self.answers = (YES, NO)
        if tokenizer is not None:
            context = orm_context_tokens(None, tokenizer)  # a folder that declares its length is cut there too
            if context:
                self.max_tokens = orm_prompt_budget(context, settings.orm.max_prompt_tokens)
            yes_id, no_id = yes_no_token_ids(tokenizer)
            self.answers = (tokenizer.decode([yes_id]), tokenizer.decode([no_id]))

    def prompts(self, trajectories: Sequence[Trajectory]) -> list[str]:
        if self.tokenizer is not None:
            return [build_orm_prompt(self.tokenizer, t, max_tokens=self.max_tokens, layout=self.layout)
                    for t in trajectories]
        return [render_llama3_orm(*orm_inputs(t)) for t in trajectories]

    def probabilities(self, trajectories: Sequence[Trajectory]) -> list[float]:
        prompts = self.prompts(trajectories)
        out: list[float] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start:start + self.batch_size]
            response = self.client.completions.create(model=self.model, prompt=chunk, max_tokens=1,
                                                      temperature=0.0, logprobs=TOP_LOGPROBS)
            for choice in sorted(response.choices, key=lambda c: c.index):
                if choice.logprobs is None or not choice.logprobs.top_logprobs:
                    raise ValueError("the ORM server returned no log-probs; it must support `logprobs`")
                out.append(p_from_top_logprobs(dict(choice.logprobs.top_logprobs[0]), *self.answers))
        return out


def _is_allowed_folder(settings: Settings, name: str) -> bool:
    """True when a served model's name is also a model folder a request may name (its tokenizer is read)."""
    try:
        requested_model_folder(settings, name, "orm", configured=settings.orm.model)
    except InvalidRequest:
        return False
    return True


def backend_key(settings: Settings, path: str | None) -> tuple[str | None, tuple[int, int, int] | None]:
    """What a loaded ORM is kept under: the name a request gives (None: the configured one) and when the folder it
    names was last written (:func:`~webrl.model_folders.written_stamp`; None where it names no folder here). An ORM
    republished in place (``webrl train-orm`` into the same folder) is so loaded again, not answered for by the
    model loaded before, whose version its labels would carry. Nothing is checked here:
    :func:`backend_from_settings` checks the name when the key is new."""
    model = path or settings.orm.model
    return path, (written_stamp(model) if model else None)


def backend_from_settings(settings: Settings, path: str | None = None) -> OrmBackend:
    """The configured ORM: ``path`` (or ``settings.orm.model``) locally, or the OpenAI-compatible endpoint."""
    model = path or settings.orm.model
    if settings.orm.backend == "openai":
        if not settings.orm.endpoint or not model:
            raise NotServing("the openai ORM backend needs WEBRL_ORM__ENDPOINT and WEBRL_ORM__MODEL")
        if path and path != settings.orm.model:
            check_served_name(settings, path)
        tokenizer, version = None, None
        if _is_allowed_folder(settings, model):  # served by its path: its tokenizer and version are read here
            from webrl.models.loading import checkpoint_version, load_tokenizer

            tokenizer, version = load_tokenizer(model, settings), checkpoint_version(model)
        return OpenAIOrm(settings.orm.endpoint, model, settings, tokenizer=tokenizer, version=version)
    if not model:
        raise NotServing("no ORM model: set WEBRL_ORM__MODEL to a model folder")
    if path:
        requested_model_folder(settings, path, "orm", configured=settings.orm.model)
    return LocalOrm(model, settings)


def check_served_name(settings: Settings, name: str) -> None:
    """:class:`~webrl.wire.contracts.InvalidRequest` on ``orm`` unless a request's ``orm`` other than the configured
    ``orm.model`` is a model folder a request may name (as the server serves a folder by its path): any other name
    would be sent to the ORM server, whose refusal (a 404) would be a 500 here, and a backend built for each."""
    refusal = (f"{name!r} is neither the served ORM ({settings.orm.model!r}, WEBRL_ORM__MODEL) nor a model folder a "
               "request may name")
    try:
        requested_model_folder(settings, name, "orm", configured=settings.orm.model)
    except InvalidRequest as refused:
        raise InvalidRequest("orm", f"{refusal} ({str(refused).removeprefix('orm: ')})") from None


def judge(backend: OrmBackend, trajectories: Sequence[Trajectory], threshold: float) -> list[Judgement]:
    """p and reward for each trajectory."""
    return [Judgement(p=p, reward=reward_of(p, threshold)) for p in backend.probabilities(trajectories)]


class UnknownTrajectoriesError(LookupError):
    def __init__(self, missing: Sequence[int]) -> None:
        super().__init__(f"unknown trajectory ids: {list(missing)}")
        self.missing = list(missing)


def load_rows(session: Session, ids: Sequence[int]) -> list[m.TrajectoryRow]:
    """Stored trajectories in the order of ``ids``; raises naming the ids that do not exist."""
    rows = session.scalars(select(m.TrajectoryRow).where(m.TrajectoryRow.id.in_(list(ids)))).all()
    by_id = {r.id: r for r in rows}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise UnknownTrajectoriesError(missing)
    return [by_id[i] for i in ids]


def score_stored(session: Session, backend: OrmBackend, ids: Sequence[int], threshold: float) -> list[Judgement]:
    """Judge stored trajectories and store one label each under the backend's version (idempotent).

    Trajectories already labelled by this ORM version keep their label and are not scored again; the rewards
    returned use ``threshold`` (a stored label keeps the threshold it was made with).
    """
    rows = load_rows(session, ids)
    existing = {
        label.trajectory_id: label
        for label in session.scalars(select(m.OrmLabel).where(m.OrmLabel.trajectory_id.in_(list(ids)),
                                                               m.OrmLabel.orm_version == backend.version))
    }
    todo = [r for r in rows if r.id not in existing]
    if todo:
        probabilities = backend.probabilities([load_trajectory(r) for r in todo])
        for row, p in zip(todo, probabilities, strict=True):
            existing[row.id] = save_label(session, row.id, backend.version, p, threshold)
        log.info("ORM %s scored %d trajectories (%d already labelled)", backend.version, len(todo),
                 len(rows) - len(todo))
    return [Judgement(p=existing[r.id].p_yes, reward=reward_of(existing[r.id].p_yes, threshold), trajectory_id=r.id)
            for r in rows]


def phase_trajectory_ids(session: Session, phase: int, purpose: str = "train", *, run_id: int) -> list[int]:
    """Ids of a phase's trajectories in run ``run_id``, oldest first (every run numbers its phases alike)."""
    return list(session.scalars(select(m.TrajectoryRow.id).where(m.TrajectoryRow.phase == phase,
                                                              m.TrajectoryRow.purpose == purpose,
                                                              m.TrajectoryRow.run_id == run_id)
                                .order_by(m.TrajectoryRow.id)))


# ---- the operations: ``orm.score`` / ``POST /v1/orm/score`` and ``orm.start_value`` -----------------------
def score(settings: Settings, request: ScoreRequest, backend: OrmBackend) -> ScoreResult:
    """p = P(YES) and reward = 1[p >= threshold] per trajectory: inline ones are judged only; stored ones (by id
    or by phase) get one label each under the backend's version (idempotent)."""
    threshold = request.threshold
    if request.trajectories is not None:
        judgements = judge(backend, request.trajectories, threshold)
    else:
        with session_scope(settings) as session:
            ids = (request.trajectory_ids if request.trajectory_ids is not None
                   else phase_trajectory_ids(session, int(request.phase or 0), request.purpose,
                                             run_id=request.run_id))
            judgements = score_stored(session, backend, ids, threshold)
    rewards = [j.reward for j in judgements]
    log.info("orm.score: %d trajectories, mean reward %.3f", len(rewards), sum(rewards) / max(1, len(rewards)))
    return ScoreResult(orm_version=backend.version, threshold=threshold,
                       results=[ScoreItem(trajectory_id=j.trajectory_id, p=j.p, reward=j.reward) for j in judgements],
                       mean_reward=sum(rewards) / len(rewards) if rewards else 0.0)


def start_value(request: StartValueRequest, backend: OrmBackend) -> StartValueResult:
    """The ORM's P(YES) for each task's start state (intent, no actions, the start page): the value the
    curriculum filter uses before the first critic exists. Nothing is stored (it judges states, not
    trajectories)."""
    states = [Trajectory(task_id=state.key, intent=state.intent,
                         last_observation=Observation(html=state.observation, url=state.url))
              for state in request.states]
    return StartValueResult(orm_version=backend.version, values=backend.probabilities(states))
