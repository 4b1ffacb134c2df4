"""Supervised fine-tuning: the actor on successful trajectories (its actions), or the ORM on YES/NO labels.

The loss is on target tokens only (the action, or the YES/NO answer, plus the end-of-turn token):
L = -sum_t log pi(x_t | x_<t) m_t / sum_t m_t  (``losses.sft_loss``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from sqlalchemy import select
from sqlalchemy.orm import Session

from services.trainer.augment import merge_names, relabelled_copies, trajectory_names
from services.trainer.data import SequenceItem, actor_prompt_fn, encode_action, sequence_collate, trajectory_examples
from services.trainer.losses import sft_loss
from services.trainer.publish import already_published, payload_version, publish_model
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare, prepared_loader, train
from webrl.config import Settings
from webrl.db import models as m
from webrl.db.repository import label_of, load_trajectory
from webrl.db.session import session_scope
from webrl.method.rewards import is_success
from webrl.models.adapters import LoraSpec, is_adapter, load_trainable
from webrl.models.examples import EncodedExample, encode_example, pad_id_of
from webrl.models.loading import attach_prompt_style, native_bf16
from webrl.models.logprobs import token_logprobs
from webrl.prompts.actor import COMPLETION_BUDGET  # also imported from here by the phase and offline trainers
from webrl.serving.paths import confined_path
from webrl.store.checkpoints import CheckpointInfo
from webrl.wire.contracts import SftJob

log = logging.getLogger("webrl.trainer.sft")

#: Longest sequence trained on when the job does not say (WebRL's ``cutoff_len`` 16384; published code).
MAX_LENGTH = 16384


def lora_base_dtype() -> torch.dtype:
    """Dtype of the frozen base under a LoRA adapter (the adapter itself trains in fp32): bf16 where the hardware
    computes it natively, fp32 elsewhere.

    Measured on SmolLM2-135M, LoRA fwd+bwd of 2 x 800 tokens, 2 threads: on an avx512_bf16 CPU bf16 ran 1.4x
    faster than fp32 (211 vs 151 tokens/s); on an AVX2-only CPU (no bf16 instructions, emulated) bf16 took 265 s
    against fp32's 10 s, 26x slower, which made a CPU demo phase's reference pass alone run for 40+ minutes.
    """
    return torch.bfloat16 if native_bf16() else torch.float32


def _select_trajectories(session: Session, job: SftJob) -> list[m.TrajectoryRow]:
    query = select(m.TrajectoryRow).order_by(m.TrajectoryRow.id)
    if job.trajectory_ids is not None:
        query = query.where(m.TrajectoryRow.id.in_(job.trajectory_ids))
    if job.phase is not None:
        query = query.where(m.TrajectoryRow.phase == job.phase)
    if job.purpose is not None:
        query = query.where(m.TrajectoryRow.purpose == job.purpose)
    return list(session.scalars(query).all())


def _score(row: m.TrajectoryRow) -> float | None:
    """Env score when known, else the latest ORM reward."""
    if row.env_score is not None:
        return float(row.env_score)
    label = label_of(row)
    return None if label is None else float(label.reward)


def actor_examples(rows: Sequence[m.TrajectoryRow], tokenizer: Any, max_length: int, *, copies: int = 0,
                   seed: int = 0) -> list[EncodedExample]:
    """Every step of every successful trajectory: actor prompt -> the step's action; with ``copies``, also every
    step of that many relabelled copies of each (``augment.relabelled_copies``)."""
    prompt = actor_prompt_fn(tokenizer, max_tokens=max_length - COMPLETION_BUDGET)
    demos = [(row, score, load_trajectory(row)) for row in rows
             if (score := _score(row)) is not None and is_success(score)]
    names = [trajectory_names(traj) for _, _, traj in demos] if copies else [{} for _ in demos]
    pool = merge_names(*names)  # every demonstration's names: where a copy draws replacements from
    out = []
    for (row, score, traj), own in zip(demos, names, strict=True):
        for version in [traj, *relabelled_copies(traj, copies, seed, pool, names=own)]:
            for ex in trajectory_examples(version, row.id, row.phase, score, prompt):
                out.append(encode_action(tokenizer, ex, max_length))
    return out


def orm_examples(rows: Sequence[m.TrajectoryRow], tokenizer: Any, max_length: int) -> list[EncodedExample]:
    """Every trajectory with an env score: ORM prompt -> "YES" if it succeeded else "NO"."""
    from webrl.prompts.orm_prompt import NO, YES, build_orm_prompt, orm_prompt_budget

    budget = orm_prompt_budget(max_length)  # the ORM service cuts prompts to the same budget when it scores
    out = []
    for row in rows:
        if row.env_score is None:
            continue
        text = build_orm_prompt(tokenizer, load_trajectory(row), max_tokens=budget)
        answer = YES if is_success(row.env_score) else NO
        out.append(encode_example(tokenizer, text, answer, max_length=max_length))
    return out


def load_for_training(path: str | Path, settings: Settings | None = None, *, lora: LoraSpec | None = None,
                      base_dtype: torch.dtype | None = None) -> tuple[Any, Any]:
    """(causal LM for training, tokenizer) from a local folder: an adapter folder trains its adapter on its frozen
    base (in ``base_dtype``, default :func:`lora_base_dtype`), a full folder with ``lora`` gets a new adapter, else
    every weight trains in fp32 (mixed precision comes from Accelerate)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = attach_prompt_style(AutoTokenizer.from_pretrained(str(path), local_files_only=True), path)
    if is_adapter(path) or lora is not None:
        from webrl.config import get_settings

        return load_trainable(path, settings or get_settings(), base_dtype or lora_base_dtype(), lora=lora), tokenizer
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
    return model, tokenizer


def sft_loss_fn(model: Any, batch: dict) -> tuple[Any, dict[str, float]]:
    """SFT objective on one batch: token log-probs (B, T) -> ``losses.sft_loss``."""
    logp = token_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])  # (B, T)
    return sft_loss(logp, batch["target_mask"])


def sft_with_prompt_loss_fn(weight: float) -> Callable[[Any, dict], tuple[Any, dict[str, float]]]:
    """L = L_SFT + weight * L_prompt: L_prompt = -mean_t log pi(x_t | x_<t) over the prompt's tokens (the pages
    the actor reads). A model trained from scratch learns to read HTML and to copy from this far denser signal
    (~60 prompt tokens per action token); ``weight`` = 0 is :func:`sft_loss_fn`."""
    if weight == 0:
        return sft_loss_fn

    def fn(model: Any, batch: dict) -> tuple[Any, dict[str, float]]:
        every = batch["attention_mask"]  # (B, T): a log-prob for every real token
        logp = token_logprobs(model, batch["input_ids"], batch["attention_mask"], every)  # (B, T)
        loss, metrics = sft_loss(logp, batch["target_mask"])
        prompt = every.bool() & ~batch["target_mask"].bool()  # (B, T)
        prompt[:, 0] = False
        prompt_loss = -(logp * prompt).sum() / prompt.sum().clamp(min=1)
        return loss + weight * prompt_loss, {**metrics, "prompt_loss": float(prompt_loss.detach())}

    return fn


def run_sft(settings: Settings, job: SftJob) -> CheckpointInfo | None:
    """Train ``job.base`` on the selected trajectories and publish it at ``job.output``. Idempotent: the same
    job finds its published checkpoint (same version, verified) and returns it without training. Non-main
    processes of a multi-process launch return None."""
    # fields at their default that were added later leave the version a job had before them (shipped actors')
    later = {name for name in ("relabelled_copies", "lora_rank") if not getattr(job, name)}
    version = payload_version(f"{job.kind}-sft", job.model_dump(exclude=later))
    output = confined_path(settings, job.output, "output")  # it is replaced: only inside the artifacts store
    done = already_published(settings, output, version)
    if done is not None:
        log.info("sft %s already published at %s", version, output)
        return done
    lora = LoraSpec(rank=job.lora_rank, alpha=2 * job.lora_rank) if job.lora_rank else None
    model, tokenizer = load_for_training(job.base, settings, lora=lora)
    max_length = job.max_length or min(MAX_LENGTH, int(getattr(model.config, "max_position_embeddings", MAX_LENGTH)))
    with session_scope(settings) as session:
        rows = _select_trajectories(session, job)
        if job.kind == "orm":
            encoded = orm_examples(rows, tokenizer, max_length)
        else:
            encoded = actor_examples(rows, tokenizer, max_length, copies=job.relabelled_copies, seed=job.seed)
    if not encoded:
        raise ValueError(f"no training examples: {len(rows)} trajectories selected, none usable for {job.kind} SFT")
    config = LoopConfig(lr=job.lr, epochs=job.epochs, batch_size=job.batch_size, grad_accum=job.grad_accum,
                        seed=job.seed, max_minutes=job.max_minutes, warmup_steps=job.warmup_steps)
    accelerator = make_accelerator(config)
    if job.cosine:  # over the optimizer steps of all epochs; N processes share each epoch's batches
        batches = -(-len(encoded) // job.batch_size)
        planned = job.epochs * -(-batches // accelerator.num_processes) // job.grad_accum
        config.decay_steps = max(1, planned - job.warmup_steps)
    items = [SequenceItem(i, e, {}) for i, e in enumerate(encoded)]
    prepared = prepare(accelerator, model, config)
    loader = prepared_loader(accelerator, items, [len(e) for e in encoded], sequence_collate(pad_id_of(tokenizer)),
                             config.batch_size, shuffle=True, seed=config.seed)
    summary = train(accelerator, prepared, loader, sft_with_prompt_loss_fn(job.prompt_loss_weight), config)
    metrics = {**summary.metrics, "examples": len(encoded), "steps": summary.steps, "seconds": summary.seconds,
               "first_loss": summary.first_loss, "last_loss": summary.last_loss,
               "samples_per_second": summary.samples_per_second}
    log.info("sft %s: %d examples, %d steps, loss %.4f -> %.4f", job.kind, len(encoded), summary.steps,
             summary.first_loss or 0.0, summary.last_loss or 0.0)
    info = publish_model(settings, accelerator, prepared.model, tokenizer, role=job.kind, version=version,
                         dest=output, phase=job.phase, parent_version=None, metrics=metrics, replace=True)
    return info
