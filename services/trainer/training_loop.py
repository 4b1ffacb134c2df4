"""One training loop for every model the trainer trains (SFT actor, ORM, critic, WebRL actor).

Hugging Face Accelerate runs the same code on this CPU (one process, fp32) and on GPUs under DeepSpeed
ZeRO-3 (``accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml ...``). The loop owns
backward, clipping, the optimizer, logging and the time budget; the objective is a pure function
``loss_fn(model, batch) -> (loss, metrics)``.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader

from services.trainer.data import bucket_sampler
from services.trainer.losses import Metrics

log = logging.getLogger("webrl.trainer.loop")

LossFn = Callable[[Any, dict[str, torch.Tensor]], tuple[torch.Tensor, Metrics]]
#: Called after every optimizer step with the step number (from 1) and that step's metrics: the loss's metrics
#: averaged over the step's micro-batches, ``grad_norm``, ``lr``, ``tokens_per_s`` and ``samples_per_s``.
StepHook = Callable[[int, Metrics], None]
#: Called after every epoch with the epoch (from 1) and the loss's metrics averaged over its micro-batches; what it
#: returns (measurements of the model as the epoch left it: a probe, a KL) joins that epoch's record.
EpochHook = Callable[[int, Metrics], Metrics]

#: Log the running metrics every this many optimizer steps.
LOG_EVERY = 10


@dataclass
class LoopConfig:
    """Optimisation settings shared by every training run. A WebRL phase fills lr, epochs, batch_size and
    grad_accum from its :class:`webrl.method.hyperparams.WebRLHyperparams` (``actor`` / ``critic``, ``batching``)."""

    lr: float = 1e-5
    """AdamW learning rate (the SFT default; a phase: ``ActorLoss.lr`` / ``Critic.lr``)."""
    epochs: int = 1
    """Passes over the data."""
    batch_size: int = 8
    """Sequences per micro-batch, bucketed by length."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (clip at 1)."""
    weight_decay: float = 0.0
    """AdamW weight decay (WebRL: AdamW defaults in torch, 0.01; 0 keeps a frozen reference meaningful)."""
    warmup_steps: int = 0
    """Linear warm-up steps, then a constant learning rate (or the cosine decay below)."""
    decay_steps: int | None = None
    """Cosine decay of the learning rate to ``min_lr_ratio`` x lr over this many steps after the warm-up
    (nanoGPT's schedule); None: constant after the warm-up."""
    min_lr_ratio: float = 0.1
    """Floor of the cosine decay as a fraction of ``lr`` (nanoGPT: min_lr = lr / 10)."""
    gradient_checkpointing: bool = True
    """Recompute each layer's activations in the backward instead of keeping them. One critic step (4 state
    pairs of 1,000 tokens, SmolLM2-135M + LoRA, CPU) peaked at 18.9 GB without it, which the 24 GB machine's
    OOM killer ended mid-demo, and at 8.8 GB with it, 10% faster (docs/measurements.md)."""
    seed: int = 0
    max_minutes: float | None = None
    """Stop after this wall-clock budget (None: no limit); the model trained so far is kept."""
    mixed_precision: str = "auto"
    """"auto": bf16 on GPUs that have it, fp32 elsewhere; or "no" / "bf16" / "fp16"."""


@dataclass
class TrainSummary:
    """What a training run did: steps, samples, seconds, first and last loss, mean metrics."""

    steps: int = 0
    samples: int = 0
    tokens: int = 0
    """Tokens (non-padding positions) this process fed the model, every sequence of a batch counted."""
    seconds: float = 0.0
    first_loss: float | None = None
    last_loss: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    epochs: list[dict[str, float]] = field(default_factory=list)
    """Per epoch: the loss's metrics averaged over its micro-batches, with what the epoch hook measured."""
    stopped_early: bool = False

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def batch_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding tokens of a batch: the sum of its attention masks (a critic batch has two, s and s')."""
    return sum(int(value.sum()) for key, value in batch.items() if key.endswith("attention_mask"))


def batch_size_of(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["input_ids"].shape[0] if "input_ids" in batch else batch["index"].shape[0])


@dataclass
class StepWindow:
    """The micro-batches since the last optimizer step: what :data:`StepHook` reports for one step."""

    totals: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    micro_batches: int = 0
    tokens: int = 0
    samples: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, metrics: Metrics, tokens: int, samples: int) -> None:
        for key, value in metrics.items():
            self.totals[key] += value
        self.micro_batches += 1
        self.tokens += tokens
        self.samples += samples

    def metrics(self, grad_norm: float, lr: float) -> Metrics:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        return {**{k: v / max(1, self.micro_batches) for k, v in self.totals.items()}, "grad_norm": grad_norm,
                "lr": lr, "tokens_per_s": self.tokens / seconds, "samples_per_s": self.samples / seconds}


def resolve_precision(name: str) -> str:
    """bf16 where the hardware has it: "auto" -> "bf16" on a bf16-capable GPU, else "no"."""
    if name != "auto":
        return name
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def make_accelerator(config: LoopConfig) -> Accelerator:
    """An Accelerator for ``config``; under ``accelerate launch`` it picks up the launch config (DeepSpeed)."""
    set_seed(config.seed)
    return Accelerator(mixed_precision=resolve_precision(config.mixed_precision),
                       gradient_accumulation_steps=config.grad_accum)


def make_loader(items: Sequence[Any], lengths: Sequence[int], collate_fn: Callable, batch_size: int, *,
                shuffle: bool, seed: int) -> DataLoader:
    """A DataLoader over length-bucketed batches (padded to each batch's own max length)."""
    sampler = bucket_sampler(lengths, batch_size, shuffle=shuffle, seed=seed)
    return DataLoader(list(items), batch_sampler=sampler, collate_fn=collate_fn)


def prepared_loader(accelerator: Accelerator, items: Sequence[Any], lengths: Sequence[int], collate_fn: Callable,
                    batch_size: int, *, shuffle: bool, seed: int) -> Any:
    """:func:`make_loader` through ``accelerator.prepare_data_loader`` (sharded across processes, on device)."""
    return accelerator.prepare_data_loader(make_loader(items, lengths, collate_fn, batch_size, shuffle=shuffle,
                                                       seed=seed))


def prepared_batches(accelerator: Accelerator, items: Sequence[Any], batch_sampler: Any, collate_fn: Callable) -> Any:
    """A DataLoader over ``batch_sampler``'s batches of ``items`` through ``accelerator.prepare_data_loader``."""
    return accelerator.prepare_data_loader(DataLoader(list(items), batch_sampler=batch_sampler, collate_fn=collate_fn))


def lr_factor(step: int, warmup_steps: int, decay_steps: int | None = None, min_ratio: float = 0.1) -> float:
    """Multiplier of the base lr at optimizer step ``step`` (0-based): linear warm-up over ``warmup_steps``,
    then constant, or cosine from 1 to ``min_ratio`` over ``decay_steps`` (then held at ``min_ratio``):
    f = min_ratio + (1 - min_ratio) * 0.5 * (1 + cos(pi * min(1, (step - warmup) / decay_steps)))."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if not decay_steps:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _scheduler(optimizer: torch.optim.Optimizer, config: LoopConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(
        step, config.warmup_steps, config.decay_steps, config.min_lr_ratio))


@dataclass
class Prepared:
    """Model, optimizer and scheduler after ``accelerator.prepare``."""

    model: Any
    optimizer: Any
    scheduler: Any


def enable_gradient_checkpointing(model: torch.nn.Module) -> bool:
    """Turn on the transformer's activation checkpointing (the critic's backbone, or the model itself; non-
    reentrant, so a frozen base under LoRA still passes gradients); False when the model has none."""
    target = getattr(model, "backbone", model)
    for method, kwargs in (("activation_checkpointing_enable", "activation_checkpointing_kwargs"),  # transformers 5
                           ("gradient_checkpointing_enable", "gradient_checkpointing_kwargs")):
        enable = getattr(target, method, None)
        if enable is not None:
            enable(**{kwargs: {"use_reentrant": False}})
            return True
    return False


def prepare(accelerator: Accelerator, model: torch.nn.Module, config: LoopConfig) -> Prepared:
    """AdamW over the trainable parameters and the warm-up schedule, through ``accelerator.prepare``.

    Loaders are prepared separately (``accelerator.prepare_data_loader``) because a phase scores data with
    the prepared actor before it knows its training set; DeepSpeed then takes its micro-batch size from
    ``config.batch_size`` instead of from a loader.
    """
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is not None:
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = config.batch_size
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = _scheduler(optimizer, config)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    return Prepared(model, optimizer, scheduler)


def train(accelerator: Accelerator, prepared: Prepared, loader: Any, loss_fn: LossFn, config: LoopConfig,
          on_step: StepHook | None = None, on_epoch: EpochHook | None = None) -> TrainSummary:
    """Run ``config.epochs`` epochs: loss_fn -> backward -> (every ``grad_accum`` micro-batches) clip, step;
    ``on_step`` gets each optimizer step's metrics (a tracker's hook, :mod:`webrl.runs.tracking`), ``on_epoch`` each
    finished epoch's (its result joins ``summary.epochs``)."""
    summary = TrainSummary()
    totals: dict[str, float] = defaultdict(float)
    count = 0
    start = time.perf_counter()
    deadline = start + config.max_minutes * 60 if config.max_minutes else math.inf
    window = StepWindow()
    prepared.model.train()
    for epoch in range(config.epochs):
        epoch_window = StepWindow()
        for batch in loader:
            grad_norm, lr = 0.0, float(prepared.optimizer.param_groups[0]["lr"])  # the lr this step uses
            with accelerator.accumulate(prepared.model):
                loss, metrics = loss_fn(prepared.model, batch)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    norm = accelerator.clip_grad_norm_(prepared.model.parameters(), config.max_grad_norm)
                    grad_norm = float(norm) if norm is not None else 0.0
                    metrics = {**metrics, "grad_norm": grad_norm}
                prepared.optimizer.step()
                prepared.scheduler.step()
                prepared.optimizer.zero_grad()
            summary.first_loss = float(loss.detach()) if summary.first_loss is None else summary.first_loss
            summary.last_loss = float(loss.detach())
            tokens, samples = batch_tokens(batch), batch_size_of(batch)
            summary.samples += samples
            summary.tokens += tokens
            window.add({k: v for k, v in metrics.items() if k != "grad_norm"}, tokens, samples)
            epoch_window.add({k: v for k, v in metrics.items() if k != "grad_norm"}, tokens, samples)
            for key, value in metrics.items():
                totals[key] += value
            count += 1
            if accelerator.sync_gradients:
                summary.steps += 1
                if on_step is not None:
                    on_step(summary.steps, window.metrics(grad_norm, lr))
                window = StepWindow()
                if summary.steps % LOG_EVERY == 0:
                    log.info("epoch %d step %d %s", epoch, summary.steps,
                             " ".join(f"{k}={v / count:.4g}" for k, v in totals.items()))
            if time.perf_counter() > deadline:
                summary.stopped_early = True
                break
        record = {k: v / max(1, epoch_window.micro_batches) for k, v in epoch_window.totals.items()}
        if on_epoch is not None:
            record.update(on_epoch(epoch + 1, record))
            prepared.model.train()
        summary.epochs.append(record)
        if summary.stopped_early:
            log.info("time budget of %.1f min reached after %d steps", config.max_minutes, summary.steps)
            break
    summary.seconds = time.perf_counter() - start
    summary.metrics = {k: v / max(1, count) for k, v in totals.items()}
    return summary


@torch.no_grad()
def evaluate(accelerator: Accelerator, model: Any, loader: Any,
             fn: Callable[[Any, dict[str, torch.Tensor]], dict[str, torch.Tensor]],
             n_items: int) -> dict[str, list[float]]:
    """Run ``fn(model, batch) -> {name: (B,) tensor}`` over ``loader`` in eval mode; gather across processes and
    return each name's values in dataset order (by the batch's ``index``)."""
    model.eval()
    out: dict[str, list[float]] = {}
    for batch in loader:
        values = fn(model, batch)
        index = accelerator.gather_for_metrics(batch["index"])
        for name, tensor in values.items():
            column = out.setdefault(name, [0.0] * n_items)
            for i, v in zip(index.tolist(), accelerator.gather_for_metrics(tensor.float()).tolist(), strict=True):
                column[i] = float(v)
    model.train()
    return out
