"""The typed contracts between services: every payload and result that crosses a service boundary.

A Celery task and the REST route of the same operation take the same request model and answer the same
result model (JSON on the wire); :mod:`webrl.wire.clients` sends them. Every model forbids unknown fields, so a
misspelt key is an error naming it instead of a silently ignored option.

- policy specs (what a rollout runs): :data:`PolicySpec`, a union discriminated on ``kind``;
- actor: :class:`ActRequest` -> :class:`ActResponse` (``POST /v1/act``), :class:`ActJob` (``actor.act``); an
  :class:`ActItem` is made from a policy request and an :class:`ActResult` read as a policy response
  (:mod:`webrl.agent.policy`);
- browser pool: :class:`RolloutRequest` -> :class:`RolloutResult`, :class:`ObserveRequest` -> :class:`ObserveResult`;
- critic: :class:`ValueRequest` -> :class:`ValueResult`;
- ORM: :class:`ScoreRequest` -> :class:`ScoreResult`, :class:`StartValueRequest` -> :class:`StartValueResult`;
- taskgen: :class:`GenerateRequest` -> :class:`GenerateResult`, :class:`FilterRequest` -> :class:`FilterResult`;
- trainer: :class:`PhaseJob` -> :class:`PhaseResult`, :class:`SftJob` -> :class:`SftResult`.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator

from webrl.agent.actions import Action
from webrl.agent.early_stop import MAX_STEPS, StopRules
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.agent.schemas import Observation, Seed, Trajectory
from webrl.method.hyperparams import (
    DEFAULTS,
    MAX_CONCURRENCY,
    MAX_EPISODE_STEPS,
    MAX_GENERATE,
    MAX_KEYS,
    MAX_PARENTS,
    MAX_TEMPERATURE,
    WebRLHyperparams,
    check_band,
)

DB_MAX_INT = 2**31 - 1  # ids, phases and attempts are INTEGER columns: signed 32-bit on Postgres
MAX_TRAJECTORIES = 256  # full trajectories per ORM request: bounds one request's memory and latency
MAX_STATES = 256  # states per critic request
MAX_ACT_BATCH = 256  # one act request carries at most this many observations
# The request limits MAX_GENERATE (tasks a generate request asks for), MAX_PARENTS (its parent tasks), MAX_KEYS (task
# keys or trajectory ids of one request, each a parameter of an SQL ``IN (...)``) and MAX_CONCURRENCY (episodes one
# job runs at once) are defined beside the run's record they bound (``webrl.method.hyperparams``, which this module
# imports) and imported from here by the rest.
#: The highest LoRA rank an SFT job trains.
MAX_LORA_RANK = 1024
#: The largest training seed: numpy's ``np.random.seed`` (Accelerate's ``set_seed``) takes 0 .. 2**32 - 1.
MAX_SEED = 2**32 - 1
#: The longest run name: ``runs.name`` is a String(80) column (``webrl.db.models.Run``).
MAX_RUN_NAME = 80

DbId = Annotated[int, Field(ge=1, le=DB_MAX_INT)]
DbCount = Annotated[int, Field(ge=0, le=DB_MAX_INT)]  # a phase or an attempt number
#: A seed a trainer job seeds numpy, torch and Python with (a larger or negative one fails inside ``set_seed``).
TrainingSeed = Annotated[int, Field(ge=0, le=MAX_SEED, description=f"Training seed (0 .. {MAX_SEED}).")]
#: What a trajectory was rolled out for: a phase's training tasks, an evaluation, SFT demonstrations, ORM training
#: data, the validation sample. A request naming another is a 422, not an empty selection.
Purpose = Literal["train", "eval", "sft", "orm", "validate"]


class Contract(BaseModel):
    """A payload or result between services: unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")


class InvalidRequest(ValueError):
    """A well-formed request that names something that does not exist or cannot be served; ``field`` is the
    request field at fault (REST answers 422 naming it; a Celery task fails with this message)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class NotServing(RuntimeError):
    """The service has no model to answer with (e.g. no critic configured): REST answers 503."""


# ---- policy specs -------------------------------------------------------------------------------------
class OracleSpec(Contract):
    """The sandbox's scripted solvers."""

    kind: Literal["oracle"] = "oracle"
    corrupt: float = Field(0.0, ge=0.0, le=1.0, description="Probability a step's action is replaced by a random "
                           "valid one.")
    seed: int = 0


class CheckpointSpec(Contract):
    """A model folder loaded by the rollout worker itself."""

    kind: Literal["checkpoint"] = "checkpoint"
    path: str = Field(min_length=1, description="A Hugging Face folder (full model or LoRA adapter).")
    temperature: float | None = Field(None, ge=0.0, le=MAX_TEMPERATURE,
                                      description="None: WEBRL_ACTOR__TEMPERATURE (greedy).")
    dtype: Literal["float32", "bfloat16", "auto"] | None = Field(
        None, description="The dtype the worker loads the folder in for this rollout; None: WEBRL_MODELS__DTYPE; "
        "auto: bfloat16 where the hardware computes it natively, else float32.")
    sampling_seed: int | None = Field(None, description="Seeds each sampled step from this, the task and the step's "
                                      "index (webrl.models.model_policies.step_seed), so an episode samples the same "
                                      "actions whichever episodes share its batches; None: unseeded.")


class EndpointSpec(Contract):
    """An actor service's ``POST /v1/act``: every step of a rollout asks the service that holds the actor."""

    kind: Literal["endpoint"] = "endpoint"
    url: str | None = Field(None, min_length=1, description="Base URL of the actor service, e.g. http://actor:8102. "
                            "None: the rollout worker's WEBRL_ACTOR__URL.")
    temperature: float | None = Field(None, ge=0.0, le=MAX_TEMPERATURE,
                                      description="None: the actor service's default.")
    version: str | None = Field(None, min_length=1, description="The checkpoint version every step must come from: "
                                "a batch the service answers with another (it was asked to serve another actor "
                                "meanwhile) fails the rollout instead of being stored as this actor's; None: any.")


PolicySpec = Annotated[OracleSpec | CheckpointSpec | EndpointSpec, Field(discriminator="kind")]
POLICY_SPEC: TypeAdapter[OracleSpec | CheckpointSpec | EndpointSpec] = TypeAdapter(PolicySpec)


# ---- actor ------------------------------------------------------------------------------------------
class ActItem(Contract):
    """One episode's current step."""

    intent: str = Field(min_length=1, description="The task intent.")
    observation: Observation
    history: list[str] = Field(default_factory=list, max_length=MAX_EPISODE_STEPS,
                               description="Earlier raw responses of this episode, oldest first (their observations "
                                           "are elided).")

    @classmethod
    def of(cls, request: PolicyRequest) -> ActItem:
        """The item of a policy request: its intent, observation and earlier raw responses."""
        return cls(intent=request.intent, observation=request.observation,
                   history=[step.response for step in request.history])


class ActRequest(Contract):
    """``POST /v1/act``: one action per item, batched in one forward pass."""

    batch: list[ActItem] = Field(min_length=1, max_length=MAX_ACT_BATCH)
    temperature: float | None = Field(None, ge=0.0, le=MAX_TEMPERATURE, description="Default: "
                                      "WEBRL_ACTOR__TEMPERATURE.")
    max_new_tokens: int | None = Field(None, ge=1, le=2048, description="Default: WEBRL_ACTOR__MAX_NEW_TOKENS.")
    seed: Seed | None = None


class ActJob(ActRequest):
    """``actor.act``: ``POST /v1/act``'s body and the model folder to load (default WEBRL_ACTOR__MODEL)."""

    model: str | None = Field(None, min_length=1, description="Actor folder; default WEBRL_ACTOR__MODEL.")


class ActResult(Contract):
    response: str = Field(description="The raw generated text.")
    action: Action | None = None
    parse_error: str | None = None
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    prompt_tokens: int = 0
    version: str = ""

    def policy_response(self) -> PolicyResponse:
        """The result as a policy's response (text, token ids, log-probs, version)."""
        return PolicyResponse(response=self.response, token_ids=self.token_ids, logprobs=self.logprobs,
                              version=self.version)


class ActResponse(Contract):
    results: list[ActResult]
    version: str = Field(description="Checkpoint version that produced every result of this batch.")


# ---- browser pool --------------------------------------------------------------------------------------
#: Purpose of demonstrations: the oracle's successful episodes that ``webrl bootstrap`` fine-tunes on and that a
#: run with ``replay.demo_tasks`` records in phase 0 (attempt :data:`DEMONSTRATION_ATTEMPT`) as its anchor.
DEMONSTRATION_PURPOSE = "sft"
#: A run's demonstrations are attempt 1 of phase 0: the seed rollouts (attempt 0) may pick the same train tasks,
#: and trajectories are unique per (task, phase, attempt, run).
DEMONSTRATION_ATTEMPT = 1
#: Purpose of a phase's validation episodes (``evaluation.validation_tasks``): greedy, on train-split tasks that the
#: phase's own rollouts may also have drawn, so they take attempts of their own: the updated actor's
#: :data:`VALIDATION_ATTEMPT`, the start actor's the one after it (a rollout's retries count up from 0).
VALIDATION_PURPOSE = "validate"
VALIDATION_ATTEMPT = 1_000_000


class RolloutRequest(Contract):
    """``rollout.run`` and ``POST /v1/rollouts``: run a policy on stored tasks and store the trajectories."""

    task_keys: list[str] = Field(min_length=1, max_length=MAX_KEYS, description="Keys of stored tasks (tasks.key).")
    phase: int = Field(0, ge=0, le=DB_MAX_INT)
    attempt: int = Field(0, ge=0, le=DB_MAX_INT)
    run_id: DbCount = Field(0, description="The pipeline run (runs.id) the trajectories belong to; 0: none "
                            "(stand-alone evaluation, bootstrap, ORM data). Part of the idempotency key.")
    purpose: Purpose = "train"
    policy: PolicySpec
    concurrency: int = Field(1, ge=1, le=MAX_CONCURRENCY, description="Episodes at once (one browser each).")
    max_steps: int = Field(MAX_STEPS, ge=1, le=MAX_EPISODE_STEPS)
    max_parse_failures: int = Field(DEFAULTS.rollout.max_parse_failures, ge=1, description="Stop an episode after "
                                    "this many unparsable responses in a row.")
    max_repeated_actions: int = Field(DEFAULTS.rollout.max_repeated_actions, ge=1, description="Stop an episode "
                                      "after this many identical actions in a row.")
    screenshots: bool = Field(False, description="Store a downscaled screenshot of every step beside its trajectory "
                              "(``webrl.store.screenshots``); off in training, on in `webrl eval`.")

    @field_validator("task_keys")
    @classmethod
    def _distinct(cls, keys: list[str]) -> list[str]:
        """A task once per request: its episodes are stored under (task, phase, attempt, run), so two copies would
        race for one row (a retry is another attempt, not a repeated key)."""
        repeated = sorted(key for key, n in Counter(keys).items() if n > 1)
        if repeated:
            more = f" and {len(repeated) - 10} more" if len(repeated) > 10 else ""
            raise ValueError(f"repeated task keys (each task at most once a request): {', '.join(repeated[:10])}{more}")
        return keys

    def stop_rules(self) -> StopRules:
        """The early-stop thresholds the episode loop applies."""
        return StopRules(max_parse_failures=self.max_parse_failures, max_repeated_actions=self.max_repeated_actions)


class RolloutResult(Contract):
    trajectory_ids: list[DbId]
    mean_env_score: float = Field(description="Mean evaluator score over the trajectories that have one (else 0).")
    n_scored: int = Field(description="Trajectories with an evaluator score.")
    n_new: int = Field(description="Trajectories run by this job (the rest were stored already).")


class ObserveRequest(Contract):
    """``rollout.observe``: the start states of stored tasks (reads only)."""

    task_keys: list[str] = Field(min_length=1, max_length=MAX_KEYS, description="Keys of stored tasks.")
    concurrency: int = Field(2, ge=1, le=MAX_CONCURRENCY, description="Episodes opened at once.")


class StartState(Contract):
    """A task's first state: what the actor sees at step 0, and what the curriculum filter values."""

    key: str = Field(description="The task's key.")
    intent: str
    observation: str = Field(description="The simplified HTML of the first page.")
    url: str = ""


class ObserveResult(Contract):
    states: list[StartState] = Field(description="One per requested key, in request order.")


class PageCheckRequest(Contract):
    """``rollout.check_pages``: open each URL as an episode's start page and return its first observation."""

    urls: list[str] = Field(min_length=1, description="http(s) URLs on the browser allow-list.")


class CheckedPage(Contract):
    """What the agent would see at step 0 on one page, and how long getting it took."""

    url: str = Field(description="The URL asked for.")
    final_url: str = Field(description="Where the page ended up (after redirects).")
    title: str = ""
    tabs: list[str] = Field(default_factory=list, description="Each open tab's title.")
    observation: str = Field(description="WebRL's simplified HTML of the page, as the actor sees it.")
    elements: int = Field(description="Elements with an id (what actions can address).")
    error: str | None = Field(None, description="What went wrong or happened while opening, as the agent is told.")
    reset_ms: float = Field(description="The whole reset: context, navigation, first observation.")
    settle_ms: float = Field(description="Of the first observation: waiting for the page to settle.")
    observe_ms: float = Field(description="The whole first observation, settling included.")


class PageCheckResult(Contract):
    pages: list[CheckedPage] = Field(description="One per requested URL, in request order.")


# ---- critic ------------------------------------------------------------------------------------------
class CriticState(Contract):
    """What the critic reads: the intent, the page and the raw responses of the earlier steps."""

    intent: str = Field(min_length=1, description="The task's intent.")
    observation: str = Field(description="Simplified HTML of the page (WebRL's observation).")
    history: list[str] = Field(default_factory=list, max_length=MAX_EPISODE_STEPS,
                               description="Raw responses of the earlier steps, oldest first.")
    key: str | None = Field(None, description="The task's key; values of stored tasks are kept in critic_values.")

    @classmethod
    def of(cls, start: StartState) -> CriticState:
        """The state the critic values at a task's start: its intent and first page, no history."""
        return cls(key=start.key, intent=start.intent, observation=start.observation)


class ValueRequest(Contract):
    """``critic.value`` and ``POST /v1/critic/value``: V of ``states``, or of the start states of ``task_keys``
    (start pages from ``observations`` or stored episodes)."""

    states: list[CriticState] | None = Field(None, min_length=1, max_length=MAX_STATES)
    task_keys: list[str] | None = Field(None, min_length=1, max_length=MAX_KEYS)
    observations: dict[str, str] = Field(default_factory=dict, description="Start page per task key, if known.")
    critic: str | None = Field(None, min_length=1, description="Saved critic folder; default WEBRL_CRITIC__MODEL.")

    @model_validator(mode="after")
    def _states_or_keys(self) -> Self:
        if (self.states is None) == (self.task_keys is None):
            raise ValueError("give exactly one of states or task_keys")
        return self


class ValueResult(Contract):
    critic_version: str
    values: list[float] = Field(description="V = min(softmax(head1)[1], softmax(head2)[1]) per state, in order")
    by_key: dict[str, float] = Field(default_factory=dict, description="V per task key, for keyed states.")


# ---- ORM ---------------------------------------------------------------------------------------------
def _bounded_steps(trajectory: Trajectory) -> Trajectory:
    if len(trajectory.steps) > MAX_EPISODE_STEPS:
        raise ValueError(f"a trajectory has at most {MAX_EPISODE_STEPS} steps, this one {len(trajectory.steps)}")
    return trajectory


class ScoreRequest(Contract):
    """``orm.score`` and ``POST /v1/orm/score``: full trajectories (judged, not stored), or stored ones by id or by
    phase (judged, labels stored)."""

    trajectories: list[Annotated[Trajectory, AfterValidator(_bounded_steps)]] | None = Field(
        None, min_length=1, max_length=MAX_TRAJECTORIES)
    trajectory_ids: list[DbId] | None = Field(None, min_length=1, max_length=MAX_KEYS)
    phase: int | None = Field(None, ge=0, le=DB_MAX_INT, description="Every trajectory of this phase (and purpose, "
                              "and run).")
    purpose: Purpose = "train"
    run_id: DbCount = Field(0, description="With phase: the run whose trajectories are scored (0: those of none).")
    orm: str | None = Field(None, min_length=1, description="ORM folder (or served name); default WEBRL_ORM__MODEL.")
    threshold: float = Field(DEFAULTS.reward.orm_threshold, ge=0.0, le=1.0, description="reward = 1 if p >= this.")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [name for name in ("trajectories", "trajectory_ids", "phase") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of trajectories, trajectory_ids or phase")
        return self


class ScoreItem(Contract):
    trajectory_id: DbId | None = None
    p: float = Field(description="P(YES) = softmax(logit_YES, logit_NO)[YES]")
    reward: float = Field(description="1 if p >= threshold else 0")


class ScoreResult(Contract):
    orm_version: str
    threshold: float
    results: list[ScoreItem]
    mean_reward: float


class StartValueRequest(Contract):
    """``orm.start_value``: P(YES) of tasks' start states, the critic's stand-in before phase 1 has one."""

    states: list[StartState] = Field(min_length=1)
    orm: str | None = Field(None, min_length=1, description="ORM folder (or served name); default WEBRL_ORM__MODEL.")


class StartValueResult(Contract):
    orm_version: str
    values: list[float] = Field(description="P(YES) per start state, in order.")


# ---- taskgen -----------------------------------------------------------------------------------------
class GenerateRequest(Contract):
    """``taskgen.generate`` and ``POST /v1/tasks/generate``: new tasks in breadth from failed ones, or new instances
    of solved tasks' templates."""

    phase: int = Field(ge=1, le=DB_MAX_INT, description="Phase the new tasks belong to.")
    parent_keys: list[str] = Field(min_length=1, max_length=MAX_PARENTS, description="Keys of the parent tasks "
                                   "(WebRL: the failed ones).")
    n: int = Field(ge=1, le=MAX_GENERATE, description="How many tasks to generate at most.")
    generator: Literal["grounded", "llm"] = "grounded"
    evolve: Literal["breadth", "instances"] = Field("breadth", description="breadth: the parent's template anew and "
                                                    "related templates (WebRL); instances: only new instances of the "
                                                    "parent's own template (grounded generator).")
    seed: int = 0
    endpoint: str | None = Field(None, description="OpenAI-compatible base URL (llm generator); default "
                                 "WEBRL_LLM_JUDGE__ENDPOINT.")
    model: str | None = Field(None, description="Model name at the endpoint (llm generator); default "
                              "WEBRL_LLM_JUDGE__MODEL.")
    mode: Literal["chat", "completions"] = "chat"
    feasibility: bool = True


class Rejected(Contract):
    text: str
    reason: str


class GenerateResult(Contract):
    task_keys: list[str]
    rejected: list[Rejected] = Field(default_factory=list)
    duplicates: int = 0


class FilterRequest(Contract):
    """``taskgen.filter`` and ``POST /v1/tasks/filter``: keep the tasks whose V lies in [low, high]."""

    task_keys: list[str] = Field(min_length=1, max_length=MAX_KEYS)
    values: dict[str, float] = Field(description="V(start state) per task key, in [0, 1].")
    critic_version: str = Field(min_length=1, max_length=80)
    low: float = Field(DEFAULTS.curriculum.value_low, ge=0.0, le=1.0)
    high: float = Field(DEFAULTS.curriculum.value_high, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_band(self.low, self.high)
        missing = [k for k in self.task_keys if k not in self.values]
        if missing:
            raise ValueError(f"values lacks task keys {missing[:5]}")
        if any(not 0.0 <= v <= 1.0 for v in self.values.values()):
            raise ValueError("every value must lie in [0, 1]")
        return self


class FilterResult(Contract):
    kept: list[str]


# ---- trainer -----------------------------------------------------------------------------------------
#: Where training metrics go (``webrl train --log-with``): TensorBoard event files under the artifacts (the
#: default, a dependency), or W&B / MLflow when their optional extra is installed (:mod:`webrl.runs.tracking`).
LogWith = Literal["tensorboard", "wandb", "mlflow"]


class TrackingSpec(Contract):
    """The run a job's training metrics belong to and the tracker they go to."""

    run: str = Field(max_length=MAX_RUN_NAME, pattern=r"^[^/\\]+$",
                     description="The pipeline run's name, a folder name (<artifacts>/tensorboard/<run>/).")
    log_with: LogWith = "tensorboard"

    @field_validator("run")
    @classmethod
    def _a_folder_name(cls, run: str) -> str:
        if run in {".", ".."}:
            raise ValueError("must name a folder, not '.' or '..'")
        return run


class PhaseJob(Contract):
    """``train.phase`` and ``POST /v1/train``: one WebRL phase of training (critic, then actor)."""

    phase: int = Field(ge=1, le=DB_MAX_INT, description="The phase whose trajectories are trained on.")
    run_id: DbCount = Field(0, description="The pipeline run (runs.id) whose trajectories are trained on (this "
                            "phase's and, for replay, its earlier phases'); 0: those of no run.")
    actor: str = Field(description="The actor at the start of the phase (a causal LM folder).")
    critic: str | None = Field(None, description="The previous critic; None in phase 1 (fresh heads).")
    critic_base: str | None = Field(None, description="Backbone of a fresh critic (the SFT model); default actor.")
    reference: str | None = Field(None, description="Frozen reference; default the actor at the phase start.")
    orm_version: str | None = Field(None, max_length=200, description="The run's ORM version: a trajectory's reward "
                                    "is that ORM's label (another ORM's never stands in); None: its latest label.")
    anchors: str | None = Field(None, description="Anchor steps (``webrl probe anchors``, ``*.jsonl.gz``) that "
                                "``actor.anchor_kl`` holds the policy on; needed when it is > 0, unread otherwise.")
    probe: str | None = Field(None, description="A flips probe (``webrl probe build``, ``*.jsonl.gz``): after every "
                              "actor epoch, the share of its steps whose greedy action changed; None: not measured.")
    hyperparams: WebRLHyperparams = Field(default_factory=WebRLHyperparams,
                                          description="The run's WebRL hyperparameters (replay, advantage, actor "
                                                      "loss, critic, batching are read here).")
    seed: TrainingSeed = 0
    max_minutes: float | None = Field(None, gt=0, description="Budget for each of critic and actor training.")
    max_length: int | None = Field(None, ge=16)
    purpose: Purpose = "train"
    actor_output: str | None = None
    critic_output: str | None = None
    tracking: TrackingSpec | None = Field(None, description="Log every optimizer step's metrics (losses, KL, "
                                          "beta, lr, tokens/s) and the advantages' distribution to this run's "
                                          "tracker; None: no step logging. Not part of the checkpoint version.")


class SftJob(Contract):
    """``train.sft`` and ``POST /v1/train/sft``: supervised fine-tuning of an actor or an ORM."""

    base: str = Field(description="Hugging Face folder to start from.")
    output: str = Field(description="Where to publish the trained folder.")
    kind: Literal["actor", "orm"] = "actor"
    trajectory_ids: list[DbId] | None = Field(None, max_length=MAX_KEYS, description="Trajectories to learn from; "
                                              "else every one of phase (and purpose).")
    phase: DbCount | None = None
    purpose: Purpose | None = Field(None, description="Trajectory purpose filter (e.g. 'sft', 'orm').")
    epochs: int = Field(1, ge=1)
    lr: float = Field(1e-5, gt=0)
    seed: TrainingSeed = 0
    max_minutes: float | None = Field(None, gt=0)
    batch_size: int = Field(8, ge=1)
    grad_accum: int = Field(1, ge=1)
    max_length: int | None = Field(None, ge=16, description="Tokens per sequence; default the model's context.")
    warmup_steps: int = Field(0, ge=0, description="Linear learning-rate warm-up steps.")
    cosine: bool = Field(False, description="Cosine-decay the lr to lr/10 over the planned steps (epochs x batches).")
    prompt_loss_weight: float = Field(0.0, ge=0.0, description="Weight of an auxiliary next-token loss on the prompt "
                                      "tokens (0: loss on the action tokens only, as WebRL trains).")
    relabelled_copies: int = Field(0, ge=0, description="Actor SFT: relabelled copies of each demonstration "
                                   "(entity names swapped, element ids renumbered; services/trainer/augment.py).")
    lora_rank: int | None = Field(None, ge=1, le=MAX_LORA_RANK, description="Train a new LoRA adapter of this "
                                  "rank on the frozen base and publish the adapter (MBs); None: full fine-tuning. A "
                                  "base that is itself an adapter folder always trains its adapter.")

    @model_validator(mode="after")
    def _a_selection(self) -> Self:
        """Without trajectory ids or a phase the job would train on every stored trajectory (of its purpose)."""
        if self.trajectory_ids is None and self.phase is None:
            raise ValueError("give trajectory_ids or phase: without either the job would train on every stored "
                             "trajectory" + (f" of purpose {self.purpose!r}" if self.purpose else ""))
        return self


class OrmHeadJob(Contract):
    """``train.orm_head`` and ``POST /v1/train/orm-head``: an ORM that judges with a classification head
    (:mod:`webrl.models.orm_head`): the frozen backbone of ``base`` reads each labelled trajectory's ORM prompt,
    and a logistic head is fitted on its last-token states against the evaluator labels."""

    base: str = Field(description="The ORM's backbone: an adapter folder on a registered base, or a model folder.")
    output: str = Field(description="Where to publish the ORM (the backbone's files plus the head).")
    trajectory_ids: list[DbId] = Field(min_length=2, description="Trajectories with an env score to fit on; both "
                                       "labels must occur.")
    seed: TrainingSeed = Field(0, description="Which training tasks are held out to choose the L2 strength.")
    max_length: int | None = Field(None, ge=16, description="Tokens the ORM reads (prompt + reserve, as ORM SFT); "
                                   "default the model's context.")
    batch_size: int = Field(4, ge=1, description="Prompts per forward pass (and per training step).")
    backbone_epochs: int = Field(0, ge=0, le=100, description="Epochs of training the backbone's LoRA adapter "
                                 "with the head (0: the frozen backbone); the epoch that scores best on the held-out "
                                 "training tasks is kept.")
    backbone_lr: float = Field(1e-4, gt=0, le=1, description="AdamW learning rate of the adapter and the head when "
                               "the backbone trains.")
    max_minutes: float | None = Field(None, gt=0, description="Stop training the backbone after this long (the "
                                      "best epoch so far is kept).")


class PublishedCheckpoint(Contract):
    """A checkpoint the trainer published (the event on ``webrl:checkpoints``)."""

    role: str
    version: str
    path: str
    sha256: str


class PhaseResult(Contract):
    actor: PublishedCheckpoint
    critic: PublishedCheckpoint
    metrics: dict[str, Any] = Field(default_factory=dict)


class SftResult(Contract):
    path: str
    version: str
    sha256: str
    metrics: dict[str, Any] = Field(default_factory=dict)


TrainJob = PhaseJob | SftJob | OrmHeadJob
