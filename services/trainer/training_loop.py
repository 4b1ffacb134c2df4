"""One training loop for every model the trainer trains (SFT actor, ORM, critic, WebRL actor).

Hugging Face Accelerate runs the same code on this CPU (one process, fp32) and on GPUs under DeepSpeed
ZeRO-3 (``accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml ...``). The loop owns
backward, clipping, the optimizer, logging and the time budget; the objective is a pure function
``loss_fn(model, batch) -> (loss, metrics)``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import InitProcessGroupKwargs, gather_object, set_seed
from torch.utils.data import DataLoader

from services.trainer.data import bucket_sampler
from services.trainer.losses import Metrics
from webrl.models.loading import native_bf16

log = logging.getLogger("webrl.trainer.loop")

LossFn = Callable[[Any, dict[str, torch.Tensor]], tuple[torch.Tensor, Metrics]]
#: Called after every optimizer step with the step number (from 1) and that step's metrics: the loss's metrics
#: averaged over the step's micro-batches, ``grad_norm``, ``lr``, ``tokens_per_s`` and ``samples_per_s``.
StepHook = Callable[[int, Metrics], None]
#: Called after every epoch with the epoch (from 1) and the loss's metrics averaged over its micro-batches; what it
#: returns (measurements of the model as the epoch left it: a probe, a KL) joins that epoch's record.
EpochHook = Callable[[int, Metrics], Metrics]
#: Called after each optimizer step with (steps done, steps planned): a progress display's feed.
ProgressHook = Callable[[int, int], None]

#: Log the running metrics every this many optimizer steps.
LOG_EVERY = 10


@dataclass(frozen=True)
class MetricBound:
    """A bound on one metric of the loss (``name``, e.g. the actor's ``kl_exact``), held over a sliding window: training
    stops at the first micro-batch whose value, averaged with the ``window`` - 1 micro-batches stepped before it, is
    above ``bound``, before that batch's backward and step. One batch of a few samples is noisy (a phase's exact KL
    per batch ranged 0.000-0.27 around an epoch mean of 0.078), so the default window is one epoch's worth of
    micro-batches (``len(loader)``): at each epoch's end it is that epoch's mean, what a phase reports. Spinning Up's
    PPO stops its policy epochs at a target KL the same way, on its whole batch. A batch that does not measure the
    metric is within, and leaves the window as it was."""

    name: str
    bound: float
    window: int | None = None
    """Micro-batches averaged (with the one being checked); None: one epoch's worth."""


class BoundWindow:
    """The last micro-batches' values of a bounded metric, and the check of the next one against the bound."""

    def __init__(self, bound: MetricBound, epoch_batches: int) -> None:
        self.bound = bound
        self.values: deque[float] = deque(maxlen=max(1, bound.window or epoch_batches) - 1)  # before the checked one

    def beyond(self, accelerator: Accelerator, metrics: Metrics) -> float | None:
        """The window's mean with this batch's value (its maximum over processes) when above the bound, else None
        (and the value joins the window: the batch will be stepped)."""
        value = metrics.get(self.bound.name)
        local = -math.inf if value is None else (sum(self.values) + float(value)) / (len(self.values) + 1)
        mean = largest_on_any(accelerator, local)
        if mean > self.bound.bound:
            return mean
        if value is not None:
            self.values.append(float(value))
        return None


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
    stop_above: MetricBound | None = None
    """Stop at the first micro-batch whose metric exceeds the bound, before its optimizer step (None: no bound)."""
    mixed_precision: str = "auto"
    """"auto": bf16 on GPUs that have it, fp32 elsewhere; "native": bf16 wherever the hardware computes it natively
    (CPUs with AMX or AVX512-BF16 too); or "no" / "bf16" / "fp16" (:func:`resolve_precision`)."""


@dataclass
class TrainSummary:
    """What a training run did: steps, samples, seconds, first and last loss, mean metrics. Under a multi-process
    launch every number is the run's, over all processes (what one process on the same global batches reports)."""

    steps: int = 0
    samples: int = 0
    tokens: int = 0
    """Tokens (non-padding positions) fed to the model, every sequence of a batch counted."""
    seconds: float = 0.0
    first_loss: float | None = None
    """The first optimizer step's loss: the mean over its micro-batches (and processes)."""
    last_loss: float | None = None
    """The last optimizer step's loss, likewise."""
    metrics: dict[str, float] = field(default_factory=dict)
    epochs: list[dict[str, float]] = field(default_factory=list)
    """Per epoch: the loss's metrics averaged over its micro-batches, with what the epoch hook measured."""
    stopped_early: bool = False
    """The time budget or the metric bound ended the run before its last epoch's end."""
    stopped_at: tuple[int, float] | None = None
    """Where ``config.stop_above`` stopped the run: (the optimizer step it did not take, 1-based; the metric's window
    mean there, the largest over processes); None where it did not."""

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
    loss: float = 0.0
    """The sum of the micro-batches' losses."""
    start: float = field(default_factory=time.perf_counter)

    def add(self, metrics: Metrics, tokens: int, samples: int, loss: float = 0.0) -> None:
        for key, value in metrics.items():
            self.totals[key] += value
        self.micro_batches += 1
        self.tokens += tokens
        self.samples += samples
        self.loss += loss

    def merged(self, accelerator: Accelerator) -> StepWindow:
        """The window summed over every process (a collective: all call it at the same step), so that a mean over
        it is the mean over the global batch's micro-batches: with each process's loss a mean over its own
        micro-batch, and DeepSpeed / DDP averaging the gradients, that is exactly what one process accumulating the
        same micro-batches computes. A metric some micro-batches lack still counts them (as one process does)."""
        if accelerator.num_processes == 1:
            return self
        parts = gather_object([(dict(self.totals), self.micro_batches, self.tokens, self.samples, self.loss)])
        totals: dict[str, float] = defaultdict(float)
        for part, *_ in parts:
            for key, value in part.items():
                totals[key] += value
        return StepWindow(totals, *(sum(p[i] for p in parts) for i in range(1, 5)), start=self.start)

    def mean_loss(self) -> float:
        return self.loss / max(1, self.micro_batches)

    def metrics(self, grad_norm: float, lr: float) -> Metrics:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        return {**{k: v / max(1, self.micro_batches) for k, v in self.totals.items()}, "grad_norm": grad_norm,
                "lr": lr, "tokens_per_s": self.tokens / seconds, "samples_per_s": self.samples / seconds}


def resolve_precision(name: str) -> str:
    """Accelerate's ``mixed_precision`` for ``name``: "auto" -> "bf16" on a bf16-capable GPU, else "no"; "native" ->
    "bf16" wherever the hardware computes it natively (:func:`webrl.models.loading.native_bf16`: such a GPU, or a
    CPU with AMX or AVX512-BF16), else "no"; anything else as it is."""
    if name == "native":
        return "bf16" if native_bf16() else "no"
    if name != "auto":
        return name
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def launched_with_deepspeed() -> bool:
    """True in a process that ``accelerate launch`` started with a DeepSpeed config."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def process_group_kwargs() -> list[InitProcessGroupKwargs]:
    """DeepSpeed without a GPU communicates over gloo: Accelerate picks no backend for a non-CPU launch on a machine
    without CUDA, and then starts no process group, counts one process, and DeepSpeed stops on its batch-size check
    (``train_batch_size`` != micro-batch x accumulation x world size). With a GPU Accelerate picks NCCL itself."""
    if launched_with_deepspeed() and not torch.cuda.is_available():
        return [InitProcessGroupKwargs(backend="gloo")]
    return []


@contextmanager
def whole_models(accelerator: Accelerator) -> Iterator[None]:
    """Models loaded inside are whole on every process, for use outside ``prepare`` (a frozen reference, a critic
    backbone whose heads alone train). Under ZeRO-3, once an Accelerator exists, transformers loads every model
    partitioned across the processes (``deepspeed.zero.Init``; Accelerate registers the config whatever
    ``zero3_init_flag`` says), and a partitioned model computes only inside its DeepSpeed engine."""
    from transformers.integrations import is_deepspeed_zero3_enabled, unset_hf_deepspeed_config

    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None or not is_deepspeed_zero3_enabled():
        yield
        return
    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        plugin.set_deepspeed_weakref()


def end_processes() -> None:
    """Leave the process group once a launched job is done: a DeepSpeed CPU rank that exits with it open can abort
    in its teardown ("terminate called without an active exception"), failing a launch whose ranks all finished."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def _state_for(precision: str) -> None:
    """Accelerate keeps one ``AcceleratorState`` per process and refuses an Accelerator of another precision once
    one exists. A job computes in one precision (a phase's critic and actor share ``batching.mixed_precision``), but
    one process may run several (the offline bench trains in bf16, then saves through an fp32 Accelerator): then the
    state, not the process group, starts afresh, and Accelerators made before it compute in the new precision. Under
    DeepSpeed the launch config decides and Accelerate does not check."""
    state = AcceleratorState._shared_state
    if state and state.get("_mixed_precision") != precision and not launched_with_deepspeed():
        AcceleratorState._reset_state(reset_partial_state=False)


def make_accelerator(config: LoopConfig) -> Accelerator:
    """An Accelerator for ``config``; under ``accelerate launch`` it picks up the launch config (DeepSpeed).

    The scheduler is stepped by :func:`train` once per optimizer step, not by Accelerate with the optimizer: that
    steps it once per *process* per optimizer step, so a warm-up of n steps would end after n / N steps on N
    processes and the same job would train differently on 1 and on 8 GPUs."""
    set_seed(config.seed)
    precision = resolve_precision(config.mixed_precision)
    _state_for(precision)
    return Accelerator(mixed_precision=precision,
                       gradient_accumulation_steps=config.grad_accum, step_scheduler_with_optimizer=False,
                       kwargs_handlers=process_group_kwargs())


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


def configure_deepspeed(accelerator: Accelerator, config: LoopConfig) -> None:
    """Under DeepSpeed, the job's batching and clipping in the DeepSpeed config before ``prepare`` hands it to the
    engine, which then owns accumulation and clipping (``accelerator.clip_grad_norm_`` only reads its norm): the
    micro-batch, accumulation and clip norm of this model (the actor at ``actor.max_grad_norm``, 0.01 published, the
    critic at 1; a phase prepares both, one after the other, from one launch config), the global batch they make, a
    torch optimizer allowed under ZeRO, and under ZeRO-3 the gather on save that :mod:`services.trainer.publish` needs
    to write a whole model."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    ds = plugin.deepspeed_config
    ds["train_micro_batch_size_per_gpu"] = config.batch_size
    ds["gradient_accumulation_steps"] = config.grad_accum
    ds["train_batch_size"] = config.batch_size * config.grad_accum * accelerator.num_processes
    ds["gradient_clipping"] = config.max_grad_norm
    ds["zero_allow_untested_optimizer"] = True
    zero = ds.setdefault("zero_optimization", {})
    if zero.get("stage") == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True


def prepare(accelerator: Accelerator, model: torch.nn.Module, config: LoopConfig) -> Prepared:
    """AdamW over the trainable parameters and the warm-up schedule, through ``accelerator.prepare``.

    Loaders are prepared separately (``accelerator.prepare_data_loader``) because a phase scores data with
    the prepared actor before it knows its training set; DeepSpeed then takes its micro-batch size from
    ``config.batch_size`` instead of from a loader.
    """
    configure_deepspeed(accelerator, config)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = _scheduler(optimizer, config)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    return Prepared(model, optimizer, scheduler)


def largest_on_any(accelerator: Accelerator, value: float) -> float:
    """``value``'s maximum over the processes (itself on one): decisions to stop are taken together, since one
    process stopping alone would leave the others waiting in their next collective."""
    if accelerator.num_processes == 1:
        return value
    tensor = torch.tensor([value], device=accelerator.device)
    return float(accelerator.reduce(tensor, reduction="max").item())


def out_of_time(accelerator: Accelerator, deadline: float) -> bool:
    """Whether the time budget is spent on any process (then on all)."""
    if deadline == math.inf:
        return False
    return largest_on_any(accelerator, float(time.perf_counter() > deadline)) > 0


def micro_step(accelerator: Accelerator, prepared: Prepared, batch: dict[str, torch.Tensor], loss_fn: LossFn,
               config: LoopConfig, bound: BoundWindow | None = None
               ) -> tuple[torch.Tensor, Metrics, float, float | None]:
    """One micro-batch: loss, backward, and at the end of an accumulation clip and step (DeepSpeed's engine does
    both inside ``accelerator.backward``). Returns the loss, its metrics, the gradient norm (0 off a step) and, where
    ``bound`` found the metric's window above its bound, that mean: then nothing was stepped and the accumulated
    gradients are dropped."""
    grad_norm = 0.0
    with accelerator.accumulate(prepared.model):
        loss, metrics = loss_fn(prepared.model, batch)
        beyond = bound.beyond(accelerator, metrics) if bound is not None else None
        if beyond is not None:
            prepared.optimizer.zero_grad()
            return loss, metrics, grad_norm, beyond
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            norm = accelerator.clip_grad_norm_(prepared.model.parameters(), config.max_grad_norm)
            grad_norm = float(norm) if norm is not None else 0.0
        prepared.optimizer.step()
        if accelerator.sync_gradients:  # once per optimizer step, whatever the number of processes
            prepared.scheduler.step()
        prepared.optimizer.zero_grad()
    return loss, metrics, grad_norm, None


def train(accelerator: Accelerator, prepared: Prepared, loader: Any, loss_fn: LossFn, config: LoopConfig,
          on_step: StepHook | None = None, on_epoch: EpochHook | None = None,
          on_progress: ProgressHook | None = None) -> TrainSummary:
    """Run ``config.epochs`` epochs: loss_fn -> backward -> (every ``grad_accum`` micro-batches) clip, step;
    ``on_step`` gets each optimizer step's metrics (a tracker's hook, :mod:`webrl.runs.tracking`), ``on_progress``
    the steps done of :func:`planned_steps` (0 before the first; a display's bar), ``on_epoch`` each
    finished epoch's (its result joins ``summary.epochs``; an epoch the time budget or ``config.stop_above`` ended
    carries ``stopped`` = 1, and the batches it did not step are not in it). Under a multi-process launch the metrics
    are the global batch's (:meth:`StepWindow.merged`) and every process gets them."""
    summary = TrainSummary()
    start = time.perf_counter()
    deadline = start + config.max_minutes * 60 if config.max_minutes else math.inf
    run_window, window = StepWindow(), StepWindow()
    norms: list[float] = []  # each step's, the same on every process (the gradients were averaged first)
    bound = BoundWindow(config.stop_above, len(loader)) if config.stop_above is not None else None
    planned = planned_steps(len(loader), config)
    if on_progress is not None:
        on_progress(0, planned)
    prepared.model.train()
    for epoch in range(config.epochs):
        epoch_window = StepWindow()
        for batch in loader:
            lr = float(prepared.optimizer.param_groups[0]["lr"])  # the lr this step uses
            loss, metrics, grad_norm, beyond = micro_step(accelerator, prepared, batch, loss_fn, config, bound)
            if beyond is not None:
                summary.stopped_early, summary.stopped_at = True, (summary.steps + 1, beyond)
                log.info("%s %.4g (window mean) above its bound %.4g: stopped before optimizer step %d",
                         config.stop_above.name, beyond, config.stop_above.bound, summary.steps + 1)
                break
            tokens, samples = batch_tokens(batch), batch_size_of(batch)
            for w in (window, epoch_window, run_window):
                w.add(metrics, tokens, samples, float(loss.detach()))
            if not accelerator.sync_gradients:
                continue
            step = window.merged(accelerator)
            norms.append(grad_norm)
            summary.steps += 1
            summary.first_loss = step.mean_loss() if summary.first_loss is None else summary.first_loss
            summary.last_loss = step.mean_loss()
            if on_step is not None:
                on_step(summary.steps, step.metrics(grad_norm, lr))
            if on_progress is not None:
                on_progress(summary.steps, planned)
            window = StepWindow()
            if summary.steps % LOG_EVERY == 0:
                log.info("epoch %d step %d loss %.4g %s", epoch, summary.steps, step.mean_loss(),
                         " ".join(f"{k}={v:.4g}" for k, v in step.metrics(grad_norm, lr).items()))
            if out_of_time(accelerator, deadline):
                summary.stopped_early = True
                break
        merged = epoch_window.merged(accelerator)
        record = {k: v / max(1, merged.micro_batches) for k, v in merged.totals.items()}
        if summary.stopped_early:
            record["stopped"] = 1.0
        if on_epoch is not None:
            record.update(on_epoch(epoch + 1, record))
            prepared.model.train()
        summary.epochs.append(record)
        if summary.stopped_early:
            if summary.stopped_at is None:
                log.info("time budget of %.1f min reached after %d steps", config.max_minutes, summary.steps)
            break
    summary.seconds = time.perf_counter() - start
    total = run_window.merged(accelerator)
    summary.samples, summary.tokens = total.samples, total.tokens
    summary.metrics = {k: v / max(1, total.micro_batches) for k, v in total.totals.items()}
    if norms:
        summary.metrics["grad_norm"] = sum(norms) / len(norms)
    return summary


def planned_steps(batches: int, config: LoopConfig) -> int:
    """Optimizer steps of ``config.epochs`` epochs over ``batches`` micro-batches a process (a step every
    ``grad_accum`` of them, and one for an epoch's remainder, as Accelerate syncs at the loader's end)."""
    return config.epochs * math.ceil(batches / max(1, config.grad_accum))


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
