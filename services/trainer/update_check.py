"""The trainer's updates on fixed data, to see what a launch config does to them: the actor's (a LoRA adapter, or
every weight) and the critic's, each through the code a phase runs (``actor_update.update_actor``, the loop with
``phase.critic_loss_fn``), on a model folder given (a tiny Llama: ``webrl.models.tiny``; an 8B runs the same).

    DS_ACCELERATOR=cpu accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml --num_processes 2 \\
        -m services.trainer.update_check MODEL_DIR OUT [--accumulate 2] [--cases actor-lora,critic] [--publish]

``--accumulate`` is the micro-batches of one optimizer step over *all* processes (each accumulates accumulate / N),
so one process and N processes given the same number train on the same global batches, and their losses and weights
must agree (tests/services/trainer/test_trainer_deepspeed.py). Per case the main process writes ``OUT/<case>.json``
(each optimizer step's loss, grad norm and metrics over the global batch; epoch records; the critic's values;
seconds; each process's peak and starting resident memory) and ``OUT/<case>.safetensors`` (the trained parameters,
gathered: under ZeRO-3 no process holds them whole). ``--publish`` also publishes each model through
:func:`services.trainer.publish.publish_model` as a phase would (the settings' artifacts store and database).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object

from services.trainer.actor_update import update_actor
from services.trainer.data import StepExample, state_pair_collate, state_pair_items, window_sampler
from services.trainer.phase import critic_loss_fn, state_pair_values
from services.trainer.publish import checkpoint_dir, publish_model
from services.trainer.sft import load_for_training
from services.trainer.training_loop import (
    LoopConfig,
    Prepared,
    end_processes,
    evaluate,
    make_accelerator,
    prepare,
    prepared_batches,
    train,
)
from webrl.config import get_settings
from webrl.method.hyperparams import ActorLoss
from webrl.models.adapters import LoraSpec
from webrl.models.examples import pad_id_of

CASES = ("actor-lora", "actor-full", "critic")
CATEGORIES = ("Electronics", "Books", "Garden", "Toys")
#: Steps per trajectory of the fixed data; 4 trajectories of 4 steps: 16 steps, 8 micro-batches of 2 per epoch,
#: which 1, 2, 4 or 8 processes share evenly (an uneven share would repeat batches on some processes).
STEPS = 4
MAX_LENGTH = 256


@dataclass
class CaseRecord:
    """What one case did, as the main process writes it."""

    case: str
    processes: int
    accumulate: int
    threads: int
    """torch's intra-op threads in each process."""
    steps: list[dict[str, float]] = field(default_factory=list)
    epochs: list[dict[str, float]] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    seconds: float = 0.0
    peak_rss_mb: list[float] = field(default_factory=list)
    """Each process's peak resident memory (its whole life: the model loaded whole before ``prepare`` shards it, and
    the gather on save, count)."""
    start_rss_mb: list[float] = field(default_factory=list)
    trained_rss_mb: list[float] = field(default_factory=list)
    """Each process's resident memory right after training: model, gradients and optimizer state as it holds them."""
    published: str | None = None


def fixed_steps() -> list[StepExample]:
    """4 trajectories of 4 steps on a small page; trajectories 0 and 2 succeed (G_t = 0.9^(T-1-t)), 1 and 3 fail."""
    out = []
    for traj, category in enumerate(CATEGORIES):
        reward = float(traj % 2 == 0)
        pages = [f"Task: show me {category}. Page {t}: <a id=\"{3 + t}\">{category}</a> <input id=\"7\"/>"
                 for t in range(STEPS + 1)]
        for t in range(STEPS):
            action = f'do(action="Click", element="{3 + t}")' if t % 2 == 0 else \
                f'do(action="Type", argument="{category.lower()}", element="7")'
            out.append(StepExample(trajectory_id=traj, task_key=f"t{traj}", phase=1, index=t, prompt=pages[t],
                                   next_prompt=pages[t + 1], completion=action, completion_ids=(), reward=reward,
                                   done=t == STEPS - 1, mc_return=reward * 0.9 ** (STEPS - 1 - t)))
    return out


def fixed_advantages(n: int) -> list[float]:
    """Binarised advantages: +1 on three steps of four, -0.6 on the fourth (the published loss masks it)."""
    return [-0.6 if i % 4 == 3 else 1.0 for i in range(n)]


def loop_config(accumulate: int, processes: int, *, lr: float, epochs: int, max_grad_norm: float,
                warmup_steps: int = 0) -> LoopConfig:
    """Micro-batches of 2, ``accumulate`` of them per optimizer step over all processes."""
    if accumulate % processes:
        raise ValueError(f"--accumulate {accumulate} is not a multiple of the {processes} processes")
    return LoopConfig(lr=lr, epochs=epochs, batch_size=2, grad_accum=accumulate // processes,
                      max_grad_norm=max_grad_norm, warmup_steps=warmup_steps, seed=0)


def rss_mb() -> float:
    """This process's resident memory now."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def trained_state(accelerator: Accelerator, model: Any) -> dict[str, torch.Tensor]:
    """The trainable parameters gathered (a collective), on every process; empty off the main one under ZeRO-3."""
    state = accelerator.get_state_dict(model) or {}  # ZeRO-3 returns None off the main process
    names = {n for n, p in accelerator.unwrap_model(model).named_parameters() if p.requires_grad}
    return {k: v.detach().float().cpu().contiguous() for k, v in state.items() if k in names}


def train_actor(model_dir: Path, accumulate: int, lora: bool, record: CaseRecord) -> tuple[Accelerator, Prepared, Any]:
    """The actor update of a phase on :func:`fixed_steps`: reference pass, then the published objective for 2 epochs
    with a 2-step warm-up and clipping (both must act per optimizer step, whatever the number of processes)."""
    torch.manual_seed(0)  # the adapter's initial A matrices: the same on every process and every run
    # The base in fp32, not the phase's bf16 (where the CPU has it): under ZeRO-3 a bf16 base under an fp32 adapter
    # computes the same forward but a backward rounded otherwise once the adapter has moved, as close to fp32 as one
    # process's (bench/zero3_bf16_gradients.py); what this checks is that N processes make the update one makes.
    model, tokenizer = load_for_training(model_dir, lora=LoraSpec(rank=4, alpha=8) if lora else None,
                                         base_dtype=torch.float32)
    config = loop_config(accumulate, record.processes, lr=2e-3, epochs=2, max_grad_norm=0.5, warmup_steps=2)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    recorder: Any = _StepRecorder(record.steps)  # a Tracker's hooks, keeping what they get
    summary = update_actor(accelerator, prepared, tokenizer, fixed_steps(), fixed_advantages(len(fixed_steps())),
                           ActorLoss(), config, max_length=MAX_LENGTH, tracker=recorder)
    record.epochs, record.seconds = summary.epochs, summary.seconds
    return accelerator, prepared, tokenizer


def train_critic(model_dir: Path, accumulate: int, record: CaseRecord) -> tuple[Accelerator, Prepared, Any]:
    """The critic update of a phase (``critic.train_backbone``): fresh heads on the model, both CE losses on s and
    s' in windows of consecutive steps, then V(s) of every step (gathered across processes)."""
    from webrl.models.critic import CriticModel

    _, tokenizer = load_for_training(model_dir)
    critic = CriticModel.from_backbone(model_dir, seed=0, dtype=torch.float32)
    config = loop_config(accumulate, record.processes, lr=1e-3, epochs=1, max_grad_norm=1.0)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, critic, config)
    items = state_pair_items(tokenizer, fixed_steps(), MAX_LENGTH)
    collate = state_pair_collate(pad_id_of(tokenizer))
    loader = prepared_batches(accelerator, items, window_sampler(items, config.batch_size, seed=0), collate)
    summary = train(accelerator, prepared, loader, critic_loss_fn, config,
                    on_step=lambda step, metrics: record.steps.append({"step": step, **metrics}))
    eval_loader = prepared_batches(accelerator, items, window_sampler(items, config.batch_size, shuffle=False),
                                   collate)
    record.values = evaluate(accelerator, prepared.model, eval_loader, state_pair_values, len(items))["v_s"]
    record.epochs, record.seconds = summary.epochs, summary.seconds
    return accelerator, prepared, tokenizer


class _StepRecorder:
    """The part of :class:`webrl.runs.tracking.Tracker` ``update_actor`` calls, keeping each step's metrics."""

    def __init__(self, steps: list[dict[str, float]]) -> None:
        self.steps = steps

    def step_hook(self, prefix: str) -> Callable[[int, dict[str, float]], None]:
        return lambda step, metrics: self.steps.append({"step": step, **metrics})

    def scalars(self, values: dict[str, float], step: int, prefix: str = "") -> None:
        """Epoch records arrive in the summary too."""


def run_case(case: str, model_dir: Path, out: Path, accumulate: int, publish: bool) -> CaseRecord:
    """Train one case, write its record and gathered weights (main process), publish it when asked."""
    start_rss = rss_mb()
    processes = int(os.environ.get("WORLD_SIZE", "1"))  # before any Accelerator: the first one starts the group
    record = CaseRecord(case=case, processes=processes, accumulate=accumulate, threads=torch.get_num_threads())
    if case == "critic":
        accelerator, prepared, tokenizer = train_critic(model_dir, accumulate, record)
    else:
        accelerator, prepared, tokenizer = train_actor(model_dir, accumulate, case == "actor-lora", record)
    record.trained_rss_mb = [float(v) for v in gather_object([rss_mb()])]
    state = trained_state(accelerator, prepared.model)
    record.peak_rss_mb = [float(v) for v in gather_object([peak_rss_mb()])]
    record.start_rss_mb = [float(v) for v in gather_object([start_rss])]
    if publish:
        record.published = _publish(case, accelerator, prepared, tokenizer)
    if accelerator.is_main_process:
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        save_file(state, str(out / f"{case}.safetensors"))
        (out / f"{case}.json").write_text(json.dumps(record.__dict__, indent=1))
    accelerator.wait_for_everyone()
    return record


def _publish(case: str, accelerator: Accelerator, prepared: Prepared, tokenizer: Any) -> str | None:
    """Publish the case's model as a phase does (gathered on the main process); its folder there, None elsewhere."""
    settings = get_settings()
    role = "critic" if case == "critic" else "actor"
    version = f"update-check-{case}-{accelerator.num_processes}p-{int(time.time())}"
    info = publish_model(settings, accelerator, prepared.model, tokenizer, role=role, version=version,
                         dest=checkpoint_dir(settings, role, version), phase=None, parent_version=None, metrics={})
    return info.path if info is not None else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="services.trainer.update_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a causal-LM folder with its tokenizer")
    parser.add_argument("out", type=Path, help="where the main process writes <case>.json and <case>.safetensors")
    parser.add_argument("--accumulate", type=int, default=2,
                        help="micro-batches per optimizer step over all processes (a multiple of their number)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--publish", action="store_true", help="also publish each model (artifacts store + DB)")
    args = parser.parse_args(argv)
    for case in args.cases.split(","):
        if case not in CASES:
            parser.error(f"unknown case {case!r}")
        run_case(case, args.model, args.out, args.accumulate, args.publish)
    end_processes()


if __name__ == "__main__":
    main()
