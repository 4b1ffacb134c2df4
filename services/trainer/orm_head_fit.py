"""``train.orm_head``: fit a classification-head ORM (:mod:`webrl.models.orm_head`) and publish it.

1. Each labelled trajectory's ORM prompt, cut to the budget the ORM service will cut it to
   (:func:`webrl.prompts.orm_prompt.orm_prompt_budget` of what the published folder declares it reads).
2. The frozen backbone's last-token state of each prompt (forward passes only: no backward, no optimizer state),
   cached by backbone and prompt (:mod:`webrl.models.feature_cache`), so a rerun reads only new trajectories.
3. L2 chosen on held-out training tasks, the head refitted on all (:func:`webrl.models.orm_head.choose_and_fit`).
   With ``job.backbone_epochs``, the backbone's LoRA adapter then trains with the head, and the epoch that scores
   best on the held-out tasks is kept (:mod:`services.trainer.orm_backbone`; epoch 0 is the frozen head).
4. Published at ``job.output``: the backbone's files (an adapter is MBs; the trained one when an epoch was kept),
   the tokenizer declaring the length read, and the head. Idempotent: the same job finds its published checkpoint
   and returns it.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from sqlalchemy import select

from services.trainer.orm_backbone import BackboneFit, train_backbone
from services.trainer.publish import already_published, payload_version
from services.trainer.sft import lora_base_dtype
from services.trainer.training_loop import LoopConfig
from webrl.config import Settings
from webrl.db import models as m
from webrl.db.repository import load_trajectory
from webrl.db.session import session_scope
from webrl.method.rewards import is_success
from webrl.model_folders import is_adapter
from webrl.models.adapters import LoraSpec, load_trainable, save_adapter
from webrl.models.feature_cache import FeatureCache
from webrl.models.loading import load_tokenizer, save_tokenizer
from webrl.models.orm_head import (
    HEAD_CONFIG_FILE,
    HEAD_FILE,
    HeadFit,
    balanced_accuracy,
    choose_and_fit,
    held_out_tasks,
    load_backbone,
    prompt_features,
    success_probability,
    write_head,
)
from webrl.prompts.orm_prompt import build_orm_prompt, orm_context_tokens, orm_prompt_budget
from webrl.serving.paths import confined_path
from webrl.store.checkpoints import MANIFEST_FILE, CheckpointInfo, publish
from webrl.wire.contracts import OrmHeadJob

log = logging.getLogger("webrl.trainer.orm_head")

#: Where the backbone's features of ORM prompts are cached, under the artifacts store
#: (:mod:`webrl.models.feature_cache`): a rerun on grown data reads only the new trajectories.
FEATURE_CACHE_DIR = Path("cache") / "orm-features"

#: Files of the backbone folder that the published ORM does not copy: its manifest and a head it may already carry
#: (refitted). The tokenizer is copied, then saved again over it with the length the ORM reads.
NOT_COPIED = {MANIFEST_FILE, HEAD_FILE, HEAD_CONFIG_FILE}


def labelled_prompts(settings: Settings, trajectory_ids: list[int], tokenizer: object, budget: int
                     ) -> tuple[list[str], torch.Tensor, list[str]]:
    """(ORM prompts, 0/1 evaluator labels, task keys) of the trajectories that have an env score, by id."""
    with session_scope(settings) as session:
        rows = session.scalars(select(m.TrajectoryRow).where(m.TrajectoryRow.id.in_(trajectory_ids))
                               .order_by(m.TrajectoryRow.id)).all()
        missing = sorted(set(trajectory_ids) - {r.id for r in rows})
        if missing:
            raise ValueError(f"unknown trajectory ids: {missing[:10]}")
        scored = [r for r in rows if r.env_score is not None]
        prompts = [build_orm_prompt(tokenizer, load_trajectory(r), max_tokens=budget) for r in scored]
        labels = torch.tensor([int(is_success(r.env_score)) for r in scored], dtype=torch.long)
        groups = [r.task.key for r in scored]
    if len(set(labels.tolist())) < 2:
        raise ValueError(f"{len(scored)} scored trajectories with labels {sorted(set(labels.tolist()))}: the head "
                         "needs successes and failures")
    return prompts, labels, groups


def run_orm_head(settings: Settings, job: OrmHeadJob) -> CheckpointInfo:
    """Fit and publish the ORM of ``job`` (see the module docstring)."""
    version = payload_version("orm-head", job.model_dump())
    output = confined_path(settings, job.output, "output")  # it is replaced: only inside the artifacts store
    done = already_published(settings, output, version)
    if done is not None:
        log.info("orm head %s already published at %s", version, output)
        return done
    started = time.monotonic()
    tokenizer = load_tokenizer(job.base, settings)
    backbone = load_backbone(job.base, settings)
    context = job.max_length or orm_context_tokens(backbone.config, tokenizer)
    budget = orm_prompt_budget(context, settings.orm.max_prompt_tokens) if context else settings.orm.max_prompt_tokens
    prompts, labels, groups = labelled_prompts(settings, job.trajectory_ids, tokenizer, budget)
    cache = FeatureCache.for_backbone(Path(str(settings.artifacts_dir)) / FEATURE_CACHE_DIR, job.base)
    new = cache.count_missing(prompts)
    log.info("orm head: features of %d prompts (at most %d tokens each): %d cached, %d to read", len(prompts),
             budget, len(prompts) - new, new)
    done_prompts = 0

    def progress(n: int) -> None:
        nonlocal done_prompts
        done_prompts += n
        if done_prompts % 40 < n or done_prompts == new:
            log.info("orm head: %d/%d prompts read", done_prompts, new)

    features = cache.features(prompts, lambda chunk: prompt_features(backbone, tokenizer, chunk, job.batch_size,
                                                                      progress))
    fit = choose_and_fit(features, labels, groups, job.seed)
    backbone = None  # the frozen fp32 model is done: the backbone trains in its own (LoRA) copy
    tuned = tune_backbone(settings, job, tokenizer, prompts, labels, groups, fit, features) \
        if job.backbone_epochs else None
    if tuned is not None and tuned.fit.head is not None:  # an epoch beat the frozen head on the held-out tasks
        fit = replace(fit, head=tuned.fit.head)
    with torch.no_grad():
        train_p = success_probability(fit.head(features)) if tuned is None or tuned.fit.head is None else None
    metrics = {"examples": len(prompts), "successes": int(labels.sum()), "l2": fit.l2,
               "validation_balanced_accuracy": max(fit.validation.values()) if fit.validation else None,
               "train_balanced_accuracy": balanced_accuracy(train_p, labels) if train_p is not None else None,
               "prompt_tokens": budget, "seconds": time.monotonic() - started}
    if tuned is not None:
        metrics["backbone_epoch"] = tuned.fit.epoch
        metrics["backbone_history"] = tuned.fit.history
        metrics["validation_balanced_accuracy"] = tuned.fit.history[tuned.fit.epoch]["validation_balanced_accuracy"]
    log.info("orm head: lambda %g (validation %s), train balanced accuracy %s", fit.l2, fit.validation,
             metrics["train_balanced_accuracy"])
    base = Path(job.base)

    def write(folder: Path) -> None:
        for file in base.iterdir():
            if file.is_file() and file.name not in NOT_COPIED:
                shutil.copy2(file, folder / file.name)
        if tuned is not None and tuned.fit.head is not None:  # the trained adapter replaces the start's files
            tuned.model.load_state_dict(tuned.fit.adapter_state, strict=False)
            save_adapter(tuned.model, folder)
        if context:
            tokenizer.model_max_length = context  # what the ORM service reads (orm_context_tokens)
        save_tokenizer(tokenizer, folder)
        write_head(folder, fit, None if tuned is None else
                   {"epochs": job.backbone_epochs, "kept_epoch": tuned.fit.epoch, "lr": job.backbone_lr,
                    "history": tuned.fit.history})

    return publish(settings, write, output, role="orm", version=version, metrics=metrics, replace=True)


@dataclass
class TunedBackbone:
    """The trainable model the backbone trained in (its adapter is published) and what training kept."""

    model: Any
    fit: BackboneFit


def tune_backbone(settings: Settings, job: OrmHeadJob, tokenizer: Any, prompts: list[str], labels: torch.Tensor,
                  groups: list[str], start: HeadFit, features: torch.Tensor) -> TunedBackbone:
    """Train the backbone's LoRA adapter with the head (:mod:`services.trainer.orm_backbone`): the start's
    adapter when ``job.base`` is an adapter folder, else a new one (:class:`webrl.models.adapters.LoraSpec`)."""
    model = load_trainable(job.base, settings, lora_base_dtype(), lora=None if is_adapter(job.base) else LoraSpec())
    config = LoopConfig(lr=job.backbone_lr, epochs=job.backbone_epochs, batch_size=job.batch_size, seed=job.seed,
                        max_minutes=job.max_minutes)
    log.info("orm head: training the backbone's adapter with the head, %d epochs at lr %g", job.backbone_epochs,
             job.backbone_lr)
    fit = train_backbone(model, tokenizer, prompts, labels, held_out_tasks(groups, job.seed), start, features, config)
    log.info("orm head: kept epoch %d of %d (validation balanced accuracy %.3f; the frozen head's %.3f)", fit.epoch,
             job.backbone_epochs, fit.history[fit.epoch]["validation_balanced_accuracy"],
             fit.history[0]["validation_balanced_accuracy"])
    return TunedBackbone(model=model, fit=fit)
