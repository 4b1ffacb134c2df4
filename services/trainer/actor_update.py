"""The actor's side of a phase (docs/design.md step 6): which steps it trains on, their reference, the objective on a
batch, and what each epoch did to the policy.

Measured beside the loss, because the loss alone hides drift:
- ``kl_exact``: KL(pi_ref || pi_theta) = sum_v p_ref(v) log(p_ref(v) / p_theta(v)) at every action token of the
  trained steps, averaged over those tokens. pi_ref's distribution at those positions is kept from the reference
  pass (fp16, :data:`EXACT_KL_BUDGET_BYTES` at most); pi_theta's comes from the training forward itself, so the
  measurement costs no extra pass. An epoch's value is the mean over its batches, each measured as the batch is
  trained (before its own optimizer step).
- ``log_ratio_k1``: the mean per-token log(pi / pi_ref) on the same samples (``losses.actor_loss``): the k1
  estimate, which is not a KL (the samples are not pi's) and goes negative when the update lowers its own targets.
- ``flips`` / ``flips_<site>``: after each epoch, the share of the probe's steps (``webrl.models.probe``) whose
  greedy action changed.
- ``anchor_kl``: with ``actor.anchor_kl`` > 0, the exact KL at the action tokens of the anchor steps appended to each
  batch (:func:`with_anchors`), which the loss adds as lambda * KL (:func:`actor_loss_fn`).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from services.trainer.augment import renumbered_copies
from services.trainer.data import SequenceItem, StepExample, encode_action, sequence_collate
from services.trainer.intent_contrast import ContrastIntent, contrast_term, twin_items, with_twins
from services.trainer.losses import Metrics, actor_loss, actor_loss_mask
from services.trainer.replay import in_confidence_band, score_confidence
from services.trainer.stop_contrast import stop_twin_items
from services.trainer.training_loop import (
    EpochHook,
    LoopConfig,
    MetricBound,
    Prepared,
    ProgressHook,
    TrainSummary,
    prepared_loader,
    train,
)
from webrl.method.hyperparams import ActorLoss, Advantage, WebRLHyperparams
from webrl.method.rewards import is_success
from webrl.models.examples import encode_example, pad_id_of
from webrl.models.logprobs import target_logits
from webrl.models.probe import ProbeStep, encode_probe, flips, probe_matches
from webrl.runs.tracking import Tracker

log = logging.getLogger("webrl.trainer.actor")

#: Largest reference distribution kept for ``kl_exact`` (positions x vocabulary x 2 bytes); beyond it the exact KL is
#: not measured (a CPU phase keeps ~1-3k positions of a 49k vocabulary: 0.1-0.3 GB).
EXACT_KL_BUDGET_BYTES = 2 * 1024**3


def actor_loop_config(hp: WebRLHyperparams, seed: int, max_minutes: float | None = None) -> LoopConfig:
    """The actor's optimisation, for a phase and for its offline re-run alike: its lr, epochs, clip norm, warm-up, KL
    bound (``ActorLoss``) on the run's batching and precision (``Batching``)."""
    bound = MetricBound("kl_exact", hp.actor.kl_bound) if hp.actor.kl_bound is not None else None
    return LoopConfig(lr=hp.actor.lr, epochs=hp.actor.epochs, batch_size=hp.batching.batch_size,
                      grad_accum=hp.batching.grad_accum, max_grad_norm=hp.actor.max_grad_norm,
                      warmup_steps=hp.actor.warmup_steps, seed=seed, max_minutes=max_minutes, stop_above=bound,
                      mixed_precision=hp.batching.mixed_precision,
                      gradient_checkpointing=hp.batching.gradient_checkpointing)


def trained_steps(a: torch.Tensor, clamped: torch.Tensor, experience: Sequence[StepExample],
                  config: ActorLoss) -> list[int]:
    """Indices of the experience steps the actor's loss uses, in order: its mask (``losses.actor_loss_mask``) less
    the A > 0 steps of reward-0 trajectories that ``config.failed_positives`` refuses (``drop``: all of them;
    ``confident``: those whose clamped A is below ``config.failed_margin``)."""
    used = actor_loss_mask(a, config).tolist()
    out = []
    for i, ex in enumerate(experience):
        if not used[i]:
            continue
        refused = config.failed_positives == "drop" or float(clamped[i]) < config.failed_margin
        if a[i] > 0 and not is_success(ex.reward) and config.failed_positives != "keep" and refused:
            continue
        out.append(i)
    return out


def positives_in_confidence_band(accelerator: Any, model: Any, tokenizer: Any, experience: Sequence[StepExample],
                                  a: torch.Tensor, trained: Sequence[int], config: ActorLoss, *, batch_size: int,
                                  max_length: int | None) -> tuple[list[int], int]:
    """``trained`` less the A > 0 steps whose confidence c = exp(lp / n) under ``model`` (the phase's start actor,
    prepared by ``accelerator``) lies outside (``config.min_positive_confidence``, ``config.max_positive_confidence``]
    (the fields' docstrings say why), and how many were left out. With the band (0, 1] nothing is scored."""
    low, high = config.min_positive_confidence, config.max_positive_confidence
    if low <= 0.0 and high >= 1.0:
        return list(trained), 0
    positives = [i for i in trained if a[i] > 0]
    with accelerator.autocast():
        scores = score_confidence(accelerator, model, tokenizer, [experience[i] for i in positives],
                                  batch_size=batch_size, max_length=max_length)
    outside = {i for i, inside in zip(positives, in_confidence_band(scores, low, high), strict=True) if not inside}
    return [i for i in trained if i not in outside], len(outside)


@dataclass(frozen=True)
class Gate:
    """What :func:`gate` made of a phase's trained steps: those the update keeps, how many of them have A > 0 and how
    many of those are replayed from earlier phases, and whether the phase's own were too few to update the actor."""

    steps: list[int]
    positives: int
    replayed_positives: int
    skipped: bool


def gate(a: torch.Tensor, trained: Sequence[int], experience: Sequence[StepExample], phase: int,
         config: ActorLoss) -> Gate:
    """``actor.min_new_positive_steps``: ``trained`` when at least that many of them are steps with A > 0 of phase
    ``phase``'s own rollouts, else none (the actor is published unchanged): replayed successes alone teach nothing new.
    Under ``smooth-l1`` a phase without any positive keeps its steps: the loss gives them no gradient anyway; under
    ``squared`` the A < 0 steps do move the policy, so such a phase is skipped like one with too few positives."""
    positive = [i for i in trained if a[i] > 0]
    replayed = sum(experience[i].phase != phase for i in positive)
    too_few = len(positive) - replayed < config.min_new_positive_steps
    skipped = too_few and (bool(positive) or config.objective == "squared")
    return Gate([] if skipped else list(trained), len(positive), replayed, skipped)


def positives_from_failed(a: torch.Tensor, experience: Sequence[StepExample], chosen: Sequence[int]) -> float:
    """The share of the chosen A > 0 steps that come from reward-0 trajectories (0 when none is positive)."""
    positives = [i for i in chosen if a[i] > 0]
    if not positives:
        return 0.0
    return sum(not is_success(experience[i].reward) for i in positives) / len(positives)


def step_advantages(a: torch.Tensor, chosen: Sequence[int], anchors: int, advantage: Advantage) -> list[float]:
    """The binarised A of each chosen step, then A = +1 for each anchor (demonstration) step."""
    return [float(a[i]) for i in chosen] + [advantage.positive] * anchors


@dataclass
class Reference:
    """The reference pass: lp_ref of every item (in the items' order), and (when within budget) pi_ref's
    log-distribution at each item's action tokens, (n_i, V) fp16, keyed by the item's index."""

    lp: list[float]
    distributions: dict[int, torch.Tensor]


@torch.no_grad()
def reference_pass(model: Any, items: Sequence[SequenceItem], pad_id: int, batch_size: int, device: Any,
                   keep_distributions: bool = True) -> Reference:
    """lp_ref of ``items`` under ``model`` (no gradient), with pi_ref's log-distribution at their action tokens.

    Every process runs every item (no sharding), so each holds the distributions its own training batches need."""
    inner = getattr(model, "module", model)  # DDP / DeepSpeed wrap the HF model in .module
    vocab = int(getattr(getattr(inner, "config", None), "vocab_size", 0) or 0)
    positions = sum(it.encoded.n_target for it in items)
    keep = keep_distributions and positions * vocab * 2 <= EXACT_KL_BUDGET_BYTES
    if keep_distributions and not keep:
        log.info("kl_exact not measured: %d positions x %d vocabulary exceed the budget", positions, vocab)
    was_training = model.training
    model.eval()
    lp = [0.0] * len(items)  # in the order of ``items``; the distributions are keyed by each item's index
    position = {it.index: k for k, it in enumerate(items)}
    distributions: dict[int, torch.Tensor] = {}
    loader = DataLoader(list(items), batch_size=batch_size, shuffle=False, collate_fn=sequence_collate(pad_id))
    for batch in loader:
        logits, ids, mask = target_logits(model, batch["input_ids"].to(device), batch["attention_mask"].to(device),
                                          batch["target_mask"].to(device))
        log_p = torch.log_softmax(logits, dim=-1)  # (B, T', V)
        picked = torch.gather(log_p, -1, ids.unsqueeze(-1)).squeeze(-1) * mask  # (B, T')
        for row, index in enumerate(batch["index"].tolist()):
            lp[position[index]] = float(picked[row].sum())
            if keep:
                distributions[index] = log_p[row][mask[row]].to(torch.float16).cpu()  # (n_i, V)
    model.train(was_training)
    return Reference(lp, distributions)


def exact_kl(log_ref: torch.Tensor, log_cur: torch.Tensor) -> torch.Tensor:
    """KL(pi_ref || pi_theta) at each position: sum_v p_ref(v) (log p_ref(v) - log p_theta(v)); (P, V) -> (P,)."""
    log_ref = log_ref.float()
    return (log_ref.exp() * (log_ref - log_cur.float())).sum(-1)


def actor_loss_fn(config: ActorLoss, reference: dict[int, torch.Tensor] | None = None
                  ) -> Callable[[Any, dict], tuple[torch.Tensor, Metrics]]:
    """The actor objective on one batch: lp under the actor, lp_ref and A from the batch -> ``losses.actor_loss``,
    with the policy's entropy and, where ``reference`` has the batch's distributions, the exact KL at its action
    tokens (both reported only). Rows marked ``anchor`` (:func:`with_anchors`) are left out of the objective and
    add the anchor term instead, from the same forward:
        loss = actor_loss(trained rows) + lambda * mean_{anchor action tokens} KL(pi_ref || pi_theta),
    lambda = ``config.anchor_kl``. Rows marked ``contrast`` (``intent_contrast.with_twins``) are left out too and
    add lambda_c * mean relu(r_hat) over them, lambda_c = ``config.intent_contrast``; rows marked ``stop_twin``
    (``stop_contrast``) add lambda_s * mean relu(r_hat) over them, lambda_s = ``config.stop_contrast``."""

    def fn(model: Any, batch: dict) -> tuple[torch.Tensor, Metrics]:
        logits, ids, mask = target_logits(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
        log_p = torch.log_softmax(logits, dim=-1)  # (B, T', V)
        no = torch.zeros_like(mask[:, 0])  # (B,) bool
        anchored = batch["anchor"] > 0 if "anchor" in batch else no  # (B,)
        twins = batch["contrast"] > 0 if "contrast" in batch else no  # (B,)
        stops = batch["stop_twin"] > 0 if "stop_twin" in batch else no  # (B,)
        rows = ~(anchored | twins | stops)
        lp_all = (torch.gather(log_p, -1, ids.unsqueeze(-1)).squeeze(-1) * mask).sum(1)  # (B,)
        n_all = mask.sum(1).to(lp_all.dtype)  # (B,)
        loss, stats = actor_loss(lp_all[rows], batch["lp_ref"][rows], n_all[rows], batch["advantage"][rows], config)
        if bool(anchored.any()):
            kl = exact_kl(_reference_rows(reference, batch["index"][anchored].tolist(), log_p.device),
                          log_p[mask & anchored[:, None]]).mean()  # (sum n_i, V) of the anchor rows, in order
            loss = loss + config.anchor_kl * kl
            stats["anchor_kl"] = float(kl.detach())
        if bool(twins.any()):
            term, ratio = contrast_term(lp_all[twins], batch["lp_ref"][twins], n_all[twins])
            loss = loss + config.intent_contrast * term
            stats["contrast_log_ratio"] = float(ratio)
        if bool(stops.any()):
            term, ratio = contrast_term(lp_all[stops], batch["lp_ref"][stops], n_all[stops])
            loss = loss + config.stop_contrast * term
            stats["stop_log_ratio"] = float(ratio)
        with torch.no_grad():
            current = log_p.detach()[mask & rows[:, None]]  # (sum n_i, V), rows in batch order
            stats["entropy"] = float(-(current.exp() * current).sum(-1).mean()) if len(current) else 0.0
            indices = batch["index"][rows].tolist()
            if reference and all(i in reference for i in indices):
                stats["kl_exact"] = float(exact_kl(_reference_rows(reference, indices, current.device),
                                                   current).mean())
        return loss, stats

    return fn


def _reference_rows(reference: dict[int, torch.Tensor] | None, indices: Sequence[int], device: Any) -> torch.Tensor:
    """pi_ref's log-distributions of ``indices``, concatenated in order: (sum n_i, V)."""
    missing = [i for i in indices if not reference or i not in reference]
    if missing:
        raise ValueError(f"the reference pass kept no distribution for items {missing}")
    return torch.cat([reference[i] for i in indices]).to(device)


def role_flags(objective: ActorLoss) -> dict[str, float]:
    """The flags every item of an update carries, 0 on the trained steps: ``anchor`` with the anchor on, ``contrast``
    with the intent contrast on, ``stop_twin`` with the stop contrast on (a batch's items must share their
    scalars)."""
    return {**({"anchor": 0.0} if objective.anchor_kl > 0 else {}),
            **({"contrast": 0.0} if objective.intent_contrast > 0 else {}),
            **({"stop_twin": 0.0} if objective.stop_contrast > 0 else {})}


def anchor_items(tokenizer: Any, anchors: Sequence[ProbeStep], n: int, *, first_index: int, seed: int,
                 max_length: int | None, flags: dict[str, float] | None = None) -> list[SequenceItem]:
    """A seeded sample of ``n`` anchor steps (all when there are fewer) as items marked ``anchor``, indexed from
    ``first_index`` on (after the trained steps' indices); lp_ref is filled by the reference pass."""
    chosen = random.Random(seed + 3).sample(list(anchors), min(n, len(anchors)))
    return [SequenceItem(first_index + k, encode_example(tokenizer, step.prompt, step.completion,
                                                         max_length=max_length),
                         {"lp_ref": 0.0, "advantage": 0.0, **(flags or {}), "anchor": 1.0})
            for k, step in enumerate(chosen)]


def with_anchors(collate: Callable[[list[SequenceItem]], dict], anchors: Sequence[SequenceItem], per_batch: int,
                 seed: int) -> Callable[[list[SequenceItem]], dict]:
    """``collate`` with ``per_batch`` anchor items appended to every batch, drawn in turn from ``anchors`` (a fresh
    seeded order each time all have been drawn). The trained batches are the same as without the anchor, so the
    number of optimizer steps does not change."""
    rng = random.Random(seed)
    queue: list[SequenceItem] = []

    def fn(items: list[SequenceItem]) -> dict:
        drawn = []
        for _ in range(min(per_batch, len(anchors))):
            if not queue:
                queue.extend(rng.sample(list(anchors), len(anchors)))
            drawn.append(queue.pop())
        return collate([*items, *drawn])

    return fn


def probe_hook(model: Any, tokenizer: Any, probe: Sequence[ProbeStep], max_length: int,
               batch_size: int) -> EpochHook:
    """An epoch hook that measures the flips of ``probe`` (encoded once) with the model as the epoch left it."""
    encoded = encode_probe(tokenizer, probe, max_length)

    def hook(epoch: int, record: Metrics) -> Metrics:
        result = flips(probe, probe_matches(model, tokenizer, encoded, batch_size=batch_size))
        log.info("epoch %d: flips %.3f of %d probe steps, kl_exact %s", epoch, result["flips"], len(probe),
                 record.get("kl_exact"))
        return result

    return hook


def last_epoch(epochs: Sequence[Metrics], keys: Sequence[str]) -> dict[str, Any]:
    """The phase's record of the actor's drift: each key's value after the last epoch, and its values by epoch."""
    out: dict[str, Any] = {}
    for key in keys:
        values = [e[key] for e in epochs if key in e]
        if values:
            out[key] = values[-1]
            out[f"{key}_by_epoch"] = values
    return out


def kl_bound_record(objective: ActorLoss, summary: TrainSummary) -> dict[str, float | int]:
    """What a phase records of ``actor.kl_bound``: the bound, and where the update stopped at it (the optimizer step
    it did not take, and the windowed mean exact KL that stopped it); nothing without a bound."""
    if objective.kl_bound is None:
        return {}
    stopped = summary.stopped_at
    return {"kl_bound": objective.kl_bound,
            **({"kl_stopped_at_step": stopped[0], "kl_exact_at_stop": stopped[1]} if stopped else {})}


def with_renumbered_positives(examples: Sequence[StepExample], step_advantage: Sequence[float], copies: int,
                              seed: int) -> tuple[list[StepExample], list[float]]:
    """``examples`` and their advantages, then each A > 0 example's copies with the page's element ids renumbered
    (``actor.renumbered_positives``, :func:`services.trainer.augment.renumbered_copies`), each with its advantage."""
    out, advantages = list(examples), list(step_advantage)
    for example, a in zip(examples, step_advantage, strict=True):
        if a > 0:
            extra = renumbered_copies(example, copies, seed)
            out += extra
            advantages += [a] * len(extra)
    return out, advantages


def update_actor(accelerator: Any, actor: Prepared, tokenizer: Any, examples: Sequence[StepExample],
                 step_advantage: Sequence[float], objective: ActorLoss, config: LoopConfig, *, max_length: int,
                 probe: Sequence[ProbeStep] | None = None, tracker: Tracker | None = None,
                 reference_model: Any = None, probe_every_epoch: bool = True,
                 anchors: Sequence[ProbeStep] | None = None,
                 contrast: Sequence[ContrastIntent] | None = None,
                 experience: Sequence[StepExample] | None = None,
                 on_progress: ProgressHook | None = None) -> TrainSummary:
    """Train the prepared actor on ``examples`` (each with its binarised A): the reference pass (lp_ref and pi_ref's
    distributions, under ``reference_model`` or else the actor as it is now), then ``config.epochs`` epochs of
    ``objective``, with the exact KL measured in every batch and, given a ``probe``, the flips after every epoch (or
    after the last only, ``probe_every_epoch`` False). With ``objective.anchor_kl`` > 0, ``anchors`` (required then)
    join every batch (:func:`with_anchors`): one epoch's worth is sampled and their reference distributions kept.
    With ``objective.renumbered_positives`` > 0, each A > 0 example's copies with the page's element ids renumbered
    train beside it (:func:`with_renumbered_positives`). With ``objective.intent_contrast`` > 0, each A > 0 example's
    twin under an intent of ``contrast`` (required then) joins its batch (``intent_contrast``). With
    ``objective.stop_contrast`` > 0, each A > 0 stop step's twins at the earlier states of its trajectory in
    ``experience`` (every step the phase has; default ``examples``) join its batch (``stop_contrast``).
    The tracker, when there is one, gets every optimizer step and epoch; ``on_progress`` the steps done of those
    planned (:func:`services.trainer.training_loop.train`)."""
    if not examples:
        return TrainSummary()
    if objective.anchor_kl > 0 and not anchors:
        raise ValueError("actor.anchor_kl > 0 needs anchor steps (a phase job's `anchors` file)")
    if objective.intent_contrast > 0 and not contrast:
        raise ValueError("actor.intent_contrast > 0 needs the intents of train tasks with their templates")
    experience = experience if experience is not None else examples  # the phase's steps, without the copies
    if objective.renumbered_positives > 0:
        trained = len(examples)
        examples, step_advantage = with_renumbered_positives(examples, step_advantage,
                                                             objective.renumbered_positives, config.seed)
        log.info("renumbered positives: %d copies of %d positives", len(examples) - trained,
                 sum(a > 0 for a in step_advantage[:trained]))
    pad_id = pad_id_of(tokenizer)
    items = [SequenceItem(i, encode_action(tokenizer, ex, max_length), {}) for i, ex in enumerate(examples)]
    model = actor.model  # prepared (wrapped under DDP / DeepSpeed): its forward gathers sharded weights
    reference_with = reference_model if reference_model is not None else model
    with accelerator.autocast():
        reference = reference_pass(reference_with, items, pad_id, config.batch_size, accelerator.device)
    flags = role_flags(objective)
    items = [SequenceItem(it.index, it.encoded, {"lp_ref": reference.lp[k], "advantage": float(step_advantage[k]),
                                                 **flags})
             for k, it in enumerate(items)]
    collate = sequence_collate(pad_id)
    next_index = len(items)  # the twins' and anchors' indices follow the trained steps'

    def referenced(twins: list[SequenceItem]) -> list[SequenceItem]:
        """``twins`` with their lp_ref under the reference (their distributions are not kept)."""
        if not twins:
            return []
        with accelerator.autocast():
            ref = reference_pass(reference_with, twins, pad_id, config.batch_size, accelerator.device,
                                 keep_distributions=False)
        return [SequenceItem(it.index, it.encoded, {**it.scalars, "lp_ref": ref.lp[k]}) for k, it in enumerate(twins)]

    all_twins: dict[int, list[SequenceItem]] = {}
    if objective.intent_contrast > 0:
        twins = twin_items(tokenizer, examples, [k for k in range(len(items)) if step_advantage[k] > 0],
                           contrast or [], first_index=next_index, seed=config.seed, max_length=max_length,
                           flags=flags)
        next_index += len(twins)
        all_twins = {i: [it] for i, it in zip(twins, referenced(list(twins.values())), strict=True)}
        log.info("intent contrast: %d of %d positives have a twin, lambda_c %s", len(twins),
                 sum(a > 0 for a in step_advantage), objective.intent_contrast)
    if objective.stop_contrast > 0:
        stop_twins = stop_twin_items(tokenizer, examples, [k for k in range(len(items)) if step_advantage[k] > 0],
                                     experience, first_index=next_index,
                                     max_length=max_length, flags=flags)
        held_twins = [twin for group in stop_twins.values() for twin in group]
        next_index += len(held_twins)
        with_ref = iter(referenced(held_twins))
        for i, group in stop_twins.items():
            all_twins.setdefault(i, []).extend(next(with_ref) for _ in group)
        log.info("stop contrast: %d stop positives, %d earlier states, lambda_s %s", len(stop_twins),
                 len(held_twins), objective.stop_contrast)
    if all_twins:
        collate = with_twins(collate, all_twins)
    if objective.anchor_kl > 0:
        per_epoch = objective.anchor_per_batch * math.ceil(len(items) / config.batch_size)
        held = anchor_items(tokenizer, anchors or [], per_epoch, first_index=next_index, seed=config.seed,
                            max_length=max_length, flags=flags)
        with accelerator.autocast():
            anchored = reference_pass(reference_with, held, pad_id, config.batch_size, accelerator.device)
        if len(anchored.distributions) < len(held):
            raise ValueError(f"{len(held)} anchor steps' reference distributions exceed the exact-KL budget; "
                             "lower actor.anchor_per_batch")
        reference.distributions.update(anchored.distributions)
        collate = with_anchors(collate, held, objective.anchor_per_batch, config.seed)
        log.info("anchor: %d steps, %d per batch, lambda %s", len(held), objective.anchor_per_batch,
                 objective.anchor_kl)
    loader = prepared_loader(accelerator, items, [len(it.encoded) for it in items], collate,
                             config.batch_size, shuffle=True, seed=config.seed)
    measure = probe_hook(model, tokenizer, probe, max_length, config.batch_size) if probe else None

    def on_epoch(epoch: int, record: Metrics) -> Metrics:
        wanted = measure is not None and (probe_every_epoch or epoch == config.epochs or bool(record.get("stopped")))
        measured = measure(epoch, record) if wanted else {}
        if tracker is not None:
            tracker.scalars({**record, **measured}, step=epoch, prefix="actor-epoch/")
        return measured

    return train(accelerator, actor, loader, actor_loss_fn(objective, reference.distributions), config,
                 on_step=tracker.step_hook("actor/") if tracker else None, on_epoch=on_epoch,
                 on_progress=on_progress)
