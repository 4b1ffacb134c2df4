"""WebRL's hyperparameters: one frozen record, grouped by the stage of the method that reads them.

The method's knobs default to the paper's values (arXiv 2411.02337) or, where the paper is silent, to the
published code's; each field's docstring says which. The scale of a run (phases, tasks per phase, episodes in
flight) defaults to this project's CPU demo; the ``paper`` preset (``webrl.method.presets``) has the paper's scale.
:data:`DEFAULTS` is the record with every default. Presets are instances of :class:`WebRLHyperparams`, the
pipeline stores one with each run, and it travels to the trainer inside the phase job as JSON
(:func:`dataclasses.asdict` out, :func:`parse_hyperparams` in).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter

#: Unknown keys are errors when a record is read from JSON (a job payload, a stored run, an override).
_FORBID_EXTRA = ConfigDict(extra="forbid")

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
PositiveFloat = Annotated[float, Field(gt=0.0)]
Count = Annotated[int, Field(ge=1)]

#: The longest episode a rollout runs (the bound of ``rollout.max_steps``), so also the longest history or
#: trajectory a request carries (``webrl.wire.contracts``). This project's bound, not in the paper.
MAX_EPISODE_STEPS = 100
#: The bounds of the requests a run sends (``webrl.wire.contracts`` names them too; they live here because the
#: contracts import this module): the record's counts are bounded by them, so a run the record accepts never meets
#: a request its own phases may not send. Tasks one ``taskgen.generate`` request asks for at most:
MAX_GENERATE = 10_000
#: ... and the parent tasks it names at most (a phase with more samples them: ``Pipeline._capped_parents``).
MAX_PARENTS = 5_000
#: Task keys or trajectory ids one request carries at most: each becomes a bound parameter of an SQL ``IN (...)``.
MAX_KEYS = 10_000
#: Browser episodes one rollout or observe job runs at once at most.
MAX_CONCURRENCY = 64
#: The highest sampling temperature a served actor takes (the actor service's and OpenAI-compatible servers' bound).
MAX_TEMPERATURE = 2.0


def check_band(low: float, high: float, names: tuple[str, str] = ("low", "high")) -> None:
    """Refuse a value band [low, high] unless 0 <= low <= high <= 1 (V is a probability; paper section 3.2). The
    one check of the band: the curriculum's record, the filter job and the filter all call it; ``names`` are the
    ends' names in the message."""
    if low > high:
        raise ValueError(f"{names[0]} {low} exceeds {names[1]} {high} (need 0 <= low <= high <= 1)")
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"need 0 <= {names[0]} <= {names[1]} <= 1, got [{low}, {high}]")


@dataclass(frozen=True)
class Curriculum:
    """Step 1: how many phases, and which generated tasks a phase keeps."""

    __pydantic_config__ = _FORBID_EXTRA

    phases: Count = 3
    """WebRL phases after the SFT actor (paper section 4.1: 8 on WebArena-Lite; 3 is the CPU demo's)."""
    tasks_per_phase: Annotated[int, Field(ge=1, le=MAX_PARENTS)] = 48
    """Tasks kept per phase after the filter (paper section 3.1: ~500; 48 is the CPU demo's)."""
    candidates_per_phase: Annotated[int, Field(ge=1, le=MAX_GENERATE)] = 96
    """Tasks generated per phase before the filter (published code: generated in bulk; 96 is the CPU demo's)."""
    seed_tasks: Annotated[int, Field(ge=1, le=MAX_KEYS)] = 48
    """Phase 0: seed train tasks the SFT actor attempts; its failures seed the curriculum (this project's)."""
    enabled: bool = True
    """False: phase tasks are fresh seed tasks, no generation (the "w/o curriculum" ablation, paper section 4.3)."""
    generator: Literal["grounded", "llm"] = "grounded"
    """Task generator: grounded in the sandbox's data, or an LLM (paper section 3.1: GPT-4o) at an endpoint."""
    value_low: Probability = 0.05
    """Keep a task when the critic's V(start) >= this: not hopeless (paper section 3.2: [0.05, 0.75])."""
    value_high: Probability = 0.75
    """... and V(start) <= this: not solved already (paper section 3.2)."""
    fill_filter: bool = True
    """Top a phase up with the tasks nearest the band when too few fall in it (this project's, not in the paper)."""
    solved_share: Probability = 0.0
    """Up to this share of a phase's tasks are new instances of the templates of tasks the run has solved so far
    (``evolve="instances"``), ahead of those grown in breadth from failures, through the same filter (this project's;
    0: WebRL's, every task from failures). A weak actor fails most tasks grown from its failures, so a phase gets few
    successes of its own to learn from."""
    filter_judge: Literal["critic", "templates"] = "critic"
    """Who values a generated task once a critic exists: ``critic``, its V(start) (paper section 3.2); ``templates``,
    its template's success in the run's training rollouts so far in every phase (``webrl.store.template_prior``;
    this project's), most promising in-band tasks first. A critic trained on one small phase rates the next phase's
    tasks all out of the band on the CPU demo, and the tasks nearest the band that it keeps are ones the actor fails."""
    judge_before_critic: Literal["templates", "none"] = "templates"
    """Phase 1 without an ORM has no critic to filter with: ``templates`` values a task by its template's success
    in the run's training rollouts so far (``webrl.store.template_prior``; this project's) and keeps the most promising
    in-band tasks first; ``none`` keeps every generated task."""

    def __post_init__(self) -> None:
        check_band(self.value_low, self.value_high, ("curriculum.value_low", "value_high"))
        if self.candidates_per_phase < self.tasks_per_phase:  # the filter keeps tasks_per_phase of the candidates
            raise ValueError(f"curriculum.candidates_per_phase {self.candidates_per_phase} is below tasks_per_phase "
                             f"{self.tasks_per_phase}: a phase cannot keep more tasks than it generates")
        if self.filtered_at_most > MAX_KEYS:  # one observe and one filter request carry them all
            raise ValueError(f"curriculum.candidates_per_phase {self.candidates_per_phase} plus the solved_share "
                             f"{self.solved_share} of tasks_per_phase {self.tasks_per_phase} is "
                             f"{self.filtered_at_most} candidates a phase, above the {MAX_KEYS} one filter request "
                             "carries")

    @property
    def filtered_at_most(self) -> int:
        """The most candidates a phase's filter values: those generated plus the solved templates' instances."""
        return self.candidates_per_phase + round(self.solved_share * self.tasks_per_phase)


@dataclass(frozen=True)
class Rollout:
    """Step 2: the actor's episodes on the phase's tasks."""

    __pydantic_config__ = _FORBID_EXTRA

    max_steps: Annotated[int, Field(ge=1, le=MAX_EPISODE_STEPS)] = 30
    """Horizon: at most this many actions per episode (published code, as WebArena runs it)."""
    max_parse_failures: Count = 5
    """Stop after this many unparsable responses in a row (WebArena's ``parsing_failure_th``; published code)."""
    max_repeated_actions: Count = 5
    """Stop after this many identical actions in a row (WebArena's ``repeating_action_failure_th``)."""
    temperature: Annotated[float, Field(ge=0.0, le=MAX_TEMPERATURE)] | None = None
    """Sampling temperature of training rollouts; None: the actor's default (greedy). Evaluation is greedy."""
    sampling_dtype: Literal["float32", "bfloat16", "auto"] | None = None
    """The dtype a locally loaded actor samples training rollouts in (None: ``models.dtype``; ``auto``: bfloat16 where
    the hardware computes it natively). Evaluation always runs in ``models.dtype``: greedy decoding in bf16 can pick
    another token for the same prompt alone than batched with others, so its results would not reproduce
    (execution, not in the paper)."""
    min_solved: Annotated[int, Field(ge=0)] = 0
    """A phase's training rollouts try its tasks that no episode has solved again (the next attempt, sampled afresh)
    until this many of its tasks are solved or ``max_attempts`` attempts have run; 0: one attempt (the paper). This
    project's: a phase whose rollouts solve nothing gives the actor nothing new to learn from
    (``actor.min_new_positive_steps``), and on the CPU demo that happens with 24 tasks a phase."""
    max_attempts: Count = 1
    """At most this many attempts at a task in one phase (with ``min_solved``)."""
    chunk: Annotated[int, Field(ge=1, le=MAX_KEYS)] = 16
    """Tasks per rollout job: the unit of progress and of resumable work (execution, not in the paper)."""
    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] = 4
    """Browser episodes in flight per rollout job (execution, not in the paper)."""


@dataclass(frozen=True)
class Evaluation:
    """Step 7: the held-out test tasks after each phase."""

    __pydantic_config__ = _FORBID_EXTRA

    tasks: Count = 165
    """Test tasks evaluated after each phase (paper section 4.1: WebArena-Lite's 165)."""
    subset: Count | None = None
    """Phases between the first and the last evaluate a fixed stratified sample of this many (None: all)."""
    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] | None = None
    """Evaluation episodes at once (None: ``rollout.concurrency``). Greedy decoding has no sampling stream for the
    batching to reorder, so it changes the evaluation's time, not what the actor does."""
    validation_tasks: Annotated[int, Field(ge=0)] = 0
    """A phase publishes its updated actor only when, greedy on a fixed stratified sample of this many train-split
    tasks of the suite (the same for every run and seed), it has not lost significantly more of them than it gained
    against the actor it started from (one-sided sign test at ``validation_alpha``:
    :mod:`webrl.method.acceptance`); else the start actor is published again and the critic's update kept. 0: every
    update is published (the paper). This project's: on the CPU demo an update on one or two successful episodes
    can collapse the actor (docs/runs/2026-12-02-make-demo-seed1: 25 -> 10 of the 165 test tasks). Measured at 40
    (docs/measurements.md, 2026-12-06): that update of seed 1's refused (16 -> 6 of 40, p = 0.003; the run ended at
    the SFT actor's 25/165), seed 0's first clipped phase, 47/165 on test, published (16 -> 14, p = 0.34). The
    ``cpu-demo`` preset validates on 40."""
    validation_alpha: Probability = 0.05
    """The sign test's level: the update is refused when P(losing at least that many by chance) < this."""
    validation_margin: Annotated[int, Field(ge=0)] | None = None
    """Non-inferiority: the update is refused as well when it lost more than this many validation tasks net of
    those it gained (None: the sign test alone). The sign test on 40 tasks published seed 1's 2-gained / 8-lost
    update (p = 0.055; docs/runs/2026-12-07-make-demo-seed1-critic-start-actor), which cost 11 seen test tasks."""


@dataclass(frozen=True)
class Reward:
    """Step 3: the outcome reward of a trajectory from the ORM's P(YES)."""

    __pydantic_config__ = _FORBID_EXTRA

    orm_threshold: Probability = 0.5
    """reward = 1 if P(YES) >= this (paper section 3.1; published code ``add_overall_reward``)."""


@dataclass(frozen=True)
class Replay:
    """Step 4: successful steps of earlier phases, filtered by the current actor's confidence c = exp(lp / n)."""

    __pydantic_config__ = _FORBID_EXTRA

    enabled: bool = True
    """False: train on this phase's experience only (the "w/o replay" ablation, paper section 4.3)."""
    confidence_low: Probability = 0.5
    """Keep a replayed step when c > this (paper section 3.3; published code ``rank_score <= 0.5: continue``)."""
    confidence_high: Probability = 0.95
    """... and c <= this: the actor has not learnt it yet (paper section 3.3; published code ``<= 0.95``)."""
    cap_ratio: Annotated[int, Field(ge=0)] = 2
    """At most this many replayed steps per current step (published code ``2 * len(current)``, not in the paper)."""
    demo_tasks: Annotated[int, Field(ge=0)] = 0
    """Phase 0 also records the sandbox oracle's demonstrations of this many train tasks, templates taken in turn
    (0: none). This project's, not in the paper: an anchor against forgetting (see ``demo_ratio``). The offline
    bench rehearses the first this many tasks of the shipped oracle step file instead (``offline.demonstration_steps``:
    one train task per template)."""
    demo_ratio: Annotated[float, Field(ge=0.0)] = 2.0
    """Demonstration steps joining the actor's update per step with A > 0 (at most; sampled per phase). They pass
    through the same objective with A = +1, meant to keep the policy on the templates the phase's few steps do not
    cover (InstructGPT's pretraining mix, on the SFT data; this project's). Measured on the CPU demo (one phase,
    docs/measurements.md): it did not keep them (11.5% of the test tasks against 19.4% without it)."""

    @property
    def rehearses(self) -> bool:
        """Whether demonstration steps join the actor's update (``demo_tasks`` and ``demo_ratio`` both set)."""
        return bool(self.demo_tasks) and self.demo_ratio > 0

    def __post_init__(self) -> None:
        if self.confidence_low >= self.confidence_high:
            raise ValueError(f"replay.confidence_low {self.confidence_low} must be below confidence_high "
                             f"{self.confidence_high}")


@dataclass(frozen=True)
class Advantage:
    """Step 6: returns and the binarised advantage."""

    __pydantic_config__ = _FORBID_EXTRA

    gamma: Annotated[float, Field(gt=0.0, le=1.0)] = 0.9
    """Discount of the MC return G_t (published code ``add_mc_return(gamma=0.9)``; the paper does not give it)."""
    step_penalty: float = 0.05
    """Subtracted from V(s') - V(s) + r + G_t (published code ``nv - v - 0.05 + ...``, not in the paper)."""
    clip: PositiveFloat = 1.0
    """A is clamped to [-clip, clip] before binarising (published code ``torch.clamp(A, -1, 1)``)."""
    positive: float = 1.0
    """Binarised A of a step with A >= 0 (published code ``torch.where(A >= 0, 1.0, -0.6)``)."""
    negative: float = -0.6
    """Binarised A of a step with A < 0 (published code, not in the paper)."""


@dataclass(frozen=True)
class ActorLoss:
    """Step 6: the KL-constrained actor objective and its optimisation."""

    __pydantic_config__ = _FORBID_EXTRA

    kl: bool = True
    """False: the "w/o KL" ablation (paper section 4.3): loss = -mean(A * lp / n * 1[A > 0])."""
    objective: Literal["smooth-l1", "squared"] = "smooth-l1"
    """``smooth-l1``: the published trainer's SmoothL1(beta * r_hat, A) / beta on A > 0 steps, r_hat the per-token
    log-ratio, beta adaptive and capped at |A / r_hat| (published code). ``squared``: the paper's (beta * log(pi /
    pi_ref) - A)^2 on every step, the action's summed log-ratio, beta fixed (paper eq. 5)."""
    beta: PositiveFloat = 1.0
    """beta: weight of the KL constraint (paper eq. 4; published code ``torch.ones_like``)."""
    beta_high: PositiveFloat = 5.0
    """beta on steps the reference is already sure about (published code ``beta[cond] = 5.0``; not in the paper)."""
    p_ref_positive: Probability = 0.8
    """A > 0 and p_ref >= this -> beta_high: don't push up what the reference already does (published code)."""
    p_ref_negative: Probability = 0.9
    """A < 0 and p_ref < this -> beta_high: stay near the reference on unsure bad steps (published code)."""
    lr: PositiveFloat = 1e-6
    """AdamW learning rate of the actor (published config ``lm_lr``, for 8B models)."""
    epochs: Count = 1
    """Passes over the phase's experience (published code ``actor_epochs``)."""
    max_grad_norm: PositiveFloat = 1.0
    """Clip the actor's gradient norm at this (published config ``max_grad_norm``: 0.01, for 8B full weights, which
    the ``paper`` and CPU presets take; 1.0 is this project's for the tiny from-scratch actor's large steps)."""
    warmup_steps: Annotated[int, Field(ge=0)] = 0
    """Linear learning-rate warm-up over this many optimizer steps of each phase (the published code has none)."""
    min_new_positive_steps: Annotated[int, Field(ge=0)] = 0
    """The actor's update runs only when this phase's own rollouts give at least this many steps with A > 0 (replayed
    ones do not count); with fewer the actor is published unchanged and the critic still trains. 0: always (the
    paper, whose phases hold hundreds). This project's: on the CPU demo an update on 6 replayed positives and none
    of its own lost 15 of the SFT actor's 25 test tasks (docs/measurements.md)."""
    optimizer_state: Literal["reset", "keep"] = "reset"
    """AdamW's moments and step count at the start of a phase: ``reset`` (fresh, as the published scripts train each
    phase) or ``keep`` (the previous phase's, continued: ``services/trainer/optimizer_state.py``). Not under ZeRO."""
    min_positive_confidence: Probability = 0.0
    """A > 0 steps the phase's start actor takes with confidence c = exp(lp / n) at or below this are left out of its
    update: actions it would rarely take, which sampling happened on (the replay buffer's lower bound,
    ``replay.confidence_low`` = 0.5, paper section 3.3, applied to the phase's own steps). 0 keeps every step
    (published code). This project's. Measured (docs/measurements.md): none of one stored phase's 37 positives, sampled
    at 0.7, lies at or below 0.5."""
    max_positive_confidence: Probability = 1.0
    """A > 0 steps the phase's start actor already takes with confidence above this are left out of its update. Their
    brake cannot act: it stops a step once beta * r_hat reaches A, which needs a per-token log-ratio r_hat >= A /
    beta_high = 0.2, i.e. c <= exp(-0.2) = 0.82 at the start, so every epoch pushes such a step towards p = 1 through
    the adapter all states share. 1.0 keeps every step (published code); the replay buffer drops such steps of earlier
    phases at ``replay.confidence_high`` (0.95). This project's. Measured (docs/measurements.md): at 0.95 one stored
    phase's update left out 20 of its 37 positives and lost 5 of the SFT actor's 25 test tasks, gaining none; on
    another it left out 29 of 53 and gained 1, lost 4 (the full update: 6 and 7). The gains come from these steps."""
    failed_positives: Literal["keep", "confident", "drop"] = "keep"
    """A > 0 steps of reward-0 trajectories: ``keep`` (published code), ``confident`` (only where the clamped A is
    at least ``failed_margin``: the critic is sure the step moved towards success), or ``drop`` (train on
    successful trajectories' positives only). This project's; the paper lets the critic decide."""
    failed_margin: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    """The clamped A a reward-0 step needs to stay a positive under ``failed_positives="confident"``: with r = G = 0
    it is V(s') - V(s) - 0.05, so 0.3 asks the critic for a rise of 0.35 in P(success)."""
    anchor_kl: Annotated[float, Field(ge=0.0)] = 0.0
    """lambda of the anchor term added to each batch's actor loss: lambda * the mean exact KL(pi_ref || pi_theta) over
    the action tokens of anchor steps, states the phase does not train on (the job's ``anchors``: oracle steps of
    train tasks of every template, ``webrl probe anchors``). The update still moves the policy where its steps ask;
    the anchor holds it in place on the templates they do not cover, which an adapter shared by all states otherwise
    moves too (the flips probe: ~20% of its steps change per phase). 0: no anchor (the paper). This project's.
    Measured (docs/measurements.md): at 10 on a stored phase the flips fell from 18-22% to 7.5% and the update still
    lost the same tasks, with fewer gains (14 -> 8 of 65, 1 gained, 7 lost); random noise of that size lost none."""
    anchor_per_batch: Annotated[int, Field(ge=1)] = 2
    """Anchor steps appended to every training batch when ``anchor_kl`` > 0: a seeded sample of one epoch's worth
    (this many per batch), the same steps each epoch in a fresh order."""
    intent_contrast: Annotated[float, Field(ge=0.0)] = 0.0
    """lambda_c of the intent contrast: each trained A > 0 step gets a twin, its state and action under the intent of a
    train task of another template of its site, and the loss adds lambda_c * mean relu(r_hat) over the twins (r_hat
    the twin's per-token log-ratio to the reference): an action may become more likely for the intent that asks
    for it, not for the page (``services/trainer/intent_contrast.py``). Needs the tasks' templates (the phase reads
    the run's train tasks; the offline bench the sandbox's). 0: off (the paper). This project's. Measured
    (docs/measurements.md): at 1 on a stored phase the twins' log-ratio fell to -0.21 and the update changed 7 of its
    65 tasks instead of 10-13 (3 gained, 4 lost: 14 -> 13); one seed."""
    stop_contrast: Annotated[float, Field(ge=0.0)] = 0.0
    """lambda_s of the stop contrast: each trained A > 0 step whose action ends the episode (``exit``) gets twins, the
    same action at the earlier states of its own trajectory (where the successful episode went on), and the loss adds
    lambda_s * mean relu(r_hat) over the twins: stopping may become likelier where the episode stopped, not on the
    pages before it (``services/trainer/stop_contrast.py``). 0: off (the paper). This project's. Measured
    (docs/measurements.md): on a stored phase whose few positives taught the actor to stop (14 -> 5 of 65 test tasks,
    episodes of 3.0 steps) it kept 9 (episodes of 4.0 steps, as the SFT actor's 4.1) at 1 and at 10; on a phase of 53
    positives it changed nothing measurable (14 -> 14, 5 gained, 5 lost, as the plain update). One seed each. In a
    whole run of seed 1 at 1: 15.2% -> 11.5% of the 165 test tasks (the preset without it: 6.1%), episodes of 3.8
    steps; no climb (its rollouts solved 2 and 1 of 24)."""
    renumbered_positives: Annotated[int, Field(ge=0)] = 0
    """Copies of each trained A > 0 step with the page's element ids renumbered, in the state and in the action alike
    (``services/trainer/augment.py``: distinct random ids per copy), each trained with the step's advantage: a
    positive may teach which element the intent names, not which id to type. 0: off (the paper). This project's.
    Why (docs/measurements.md): the seen-template tasks every seed-0 run loses name the right element and type a
    neighbour's id, which the SFT actor preferred by 0.11-0.34 nats and each phase's update pushed past zero.
    Measured offline (docs/runs/2026-12-06-phase-offline-renumbered-positives): 16-18 of 165 against the clip's
    33-47, those tasks lost all the same."""
    kl_bound: Annotated[float, Field(gt=0.0)] | None = None
    """The most the update may move the policy: the exact KL(pi_ref || pi_theta) per action token (``kl_exact``), which
    every batch measures on its own steps before its optimizer step, averaged over one epoch's worth of batches (a
    sliding window: at each epoch's end, the epoch's mean the phase reports). The first batch that takes that mean
    above the bound ends the update there, without its step (``training_loop.MetricBound``); the phase records where
    (``kl_stopped_at_step``) and the run report checks every phase against it. None: no bound (the paper: beta in the
    objective alone keeps the policy near its reference). This project's; PPO implementations stop at a target KL
    the same way."""

    def __post_init__(self) -> None:
        if self.min_positive_confidence >= self.max_positive_confidence:
            raise ValueError(f"actor.min_positive_confidence {self.min_positive_confidence} must be below "
                             f"max_positive_confidence {self.max_positive_confidence}")


@dataclass(frozen=True)
class Critic:
    """Step 5: training the critic on s and s'."""

    __pydantic_config__ = _FORBID_EXTRA

    lr: PositiveFloat = 1e-6
    """AdamW learning rate of the critic (published config ``critic_lr``)."""
    epochs: Count = 1
    """Passes over the phase's experience (published code ``critic_epochs``)."""
    train_backbone: bool = True
    """True: the backbone (its LoRA adapter on an adapter actor) trains with the heads, as WebRL's critic (published
    code). False: only the two heads train, on the backbone's state of each distinct s and s' computed once with
    no gradient (``services/trainer/critic_heads.py``; this project's, for CPUs: no backward pass through the
    backbone, so more passes cost seconds)."""
    backbone_start: Literal["actor", "base"] = "actor"
    """Where a fresh critic's backbone starts. ``actor``: the SFT actor (paper section 3.3, published code); on an
    adapter actor the critic's LoRA starts as a copy of the actor's, so its states are the actor's. ``base``: on an
    adapter actor, a new LoRA (B = 0) on the base, so its states are the pretrained base's, the actor's adaptation
    left out (this project's; what the ``cpu-demo`` runs measured so far used). A full-folder actor is its own
    backbone either way."""
    head_init_std: PositiveFloat | None = 0.2
    """Std of the normal init of a fresh critic's heads' first two layers (published code: 0.2). None:
    1 / sqrt(hidden), which keeps a small backbone's outputs in scale: SmolLM2-135M's last states have norm ~50, and
    at 0.2 its heads' logits swung by +-30 from one optimizer step to the next (the demo's critic loss 0 <-> 140)."""


@dataclass(frozen=True)
class Batching:
    """Steps 5 and 6: how the experience is batched for the critic and the actor."""

    __pydantic_config__ = _FORBID_EXTRA

    batch_size: Count = 8
    """Sequences per micro-batch, bucketed by length (published code: 1 per GPU; buckets keep padding small)."""
    grad_accum: Count = 1
    """Micro-batches per optimizer step (published code: ``grad_accum_steps``)."""
    mixed_precision: Literal["auto", "no", "bf16", "native"] = "auto"
    """The precision the phase's updates compute in, critic and actor alike (Accelerate keeps one per process;
    forward, backward and scoring passes autocast, weights and optimizer state stay fp32): ``auto`` bf16 on a GPU
    that has it, fp32 elsewhere; ``native`` bf16 wherever the hardware computes it natively (such a GPU, or a CPU
    with AMX or AVX512-BF16: ``bench/actor_precision.py``); ``bf16`` everywhere (emulated, and slow, on a CPU
    without it); ``no`` fp32."""
    gradient_checkpointing: bool = True
    """Recompute each layer's activations in the backward instead of keeping them (critic and actor alike): less
    memory (a LoRA critic step on 4 pairs of 1,000 tokens: 8.8 GB against 18.9 GB without; a stored phase's actor
    update 4.2 GB against 9.2 GB), a second forward's time in every backward (that update 1.27x slower, the same
    numbers: docs/runs/2026-12-05-phase-offline-checkpointing). Execution, not in the paper."""


@dataclass(frozen=True)
class WebRLHyperparams:
    """Every knob of the method, by stage."""

    __pydantic_config__ = _FORBID_EXTRA

    curriculum: Curriculum = field(default_factory=Curriculum)
    rollout: Rollout = field(default_factory=Rollout)
    evaluation: Evaluation = field(default_factory=Evaluation)
    reward: Reward = field(default_factory=Reward)
    replay: Replay = field(default_factory=Replay)
    advantage: Advantage = field(default_factory=Advantage)
    actor: ActorLoss = field(default_factory=ActorLoss)
    critic: Critic = field(default_factory=Critic)
    batching: Batching = field(default_factory=Batching)

    def __post_init__(self) -> None:
        if self.labelled_at_most > MAX_KEYS:  # the label stage scores them in one request
            raise ValueError(f"rollout.max_attempts {self.rollout.max_attempts} at curriculum.tasks_per_phase "
                             f"{self.curriculum.tasks_per_phase} is up to {self.labelled_at_most} rollouts a phase, "
                             f"above the {MAX_KEYS} one labelling request carries")

    @property
    def labelled_at_most(self) -> int:
        """The most training rollouts a phase labels: its tasks, once per attempt (retries need ``min_solved``)."""
        return self.curriculum.tasks_per_phase * (self.rollout.max_attempts if self.rollout.min_solved else 1)


#: The record with every default: the paper's method at the CPU demo's scale.
DEFAULTS = WebRLHyperparams()

_ADAPTER: TypeAdapter[WebRLHyperparams] = TypeAdapter(WebRLHyperparams)


#: Fields whose default is not what a record stored before the field existed ran with: such a record, read back (a
#: resumed run's options, a stored phase), keeps the behaviour it ran with (:func:`as_stored`).
RAN_BEFORE_FIELD: dict[tuple[str, str], Any] = {("critic", "backbone_start"): "base"}


def as_stored(data: dict[str, Any]) -> dict[str, Any]:
    """A stored record's JSON form with each field of :data:`RAN_BEFORE_FIELD` it lacks set to what it ran with."""
    data = {group: dict(fields) if isinstance(fields, dict) else fields for group, fields in data.items()}
    for (group, name), value in RAN_BEFORE_FIELD.items():
        if isinstance(data.get(group), dict):
            data[group].setdefault(name, value)
    return data


def parse_hyperparams(data: dict[str, Any]) -> WebRLHyperparams:
    """A record from its JSON form (:func:`dataclasses.asdict`; one stored before a field existed reads as it ran,
    :func:`as_stored`), validated: an unknown group or field, a value of the wrong type or out of range raises
    ``pydantic.ValidationError`` naming it."""
    return _ADAPTER.validate_python(as_stored(data))


def with_overrides(record: WebRLHyperparams, overrides: dict[str, Any]) -> WebRLHyperparams:
    """``record`` with ``{"group.field": value}`` replaced, validated (:func:`parse_hyperparams`).

    An unknown ``group.field`` raises ``ValueError`` listing the known ones."""
    data = dataclasses.asdict(record)
    for key, value in overrides.items():
        group, _, name = key.partition(".")
        if group not in data or name not in data[group]:
            known = sorted(f"{g}.{n}" for g, fields in data.items() for n in fields)
            raise ValueError(f"unknown hyperparameter {key!r}; known: {', '.join(known)}")
        data[group][name] = value
    return parse_hyperparams(data)
