"""``train.orm_head``: fit a classification-head ORM (:mod:`webrl.models.orm_head`) and publish it.

1. Each labelled trajectory's ORM prompt, cut to the budget the ORM service will cut it to
   (:func:`webrl.prompts.orm.orm_prompt_budget` of what the published folder declares it reads).
2. The frozen backbone's last-token state of each prompt (forward passes only: no backward, no optimizer state),
   cached by backbone and prompt (:mod:`webrl.models.feature_cache`), so a rerun reads only new trajectories.
3. L2 chosen on held-out training tasks, the head refitted on all (:func:`webrl.models.orm_head.choose_and_fit`).
4. Published at ``job.output``: the backbone's files (an adapter is MBs), the tokenizer declaring the length read,
   and the head. Idempotent: the same job finds its published checkpoint and returns it.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import torch
from sqlalchemy import select

from services.trainer.publish import already_published, payload_version
from webrl.checkpoints import MANIFEST_FILE, CheckpointInfo, publish
from webrl.config import Settings
from webrl.contracts import OrmHeadJob
from webrl.db import models as m
from webrl.db.repository import load_trajectory
from webrl.db.session import session_scope
from webrl.models.feature_cache import FeatureCache
from webrl.models.loading import load_tokenizer, save_tokenizer
from webrl.models.orm_head import (
    HEAD_CONFIG_FILE,
    HEAD_FILE,
    balanced_accuracy,
    choose_and_fit,
    load_backbone,
    prompt_features,
    success_probability,
    write_head,
)
from webrl.paths import confined_path
from webrl.prompts.orm import build_orm_prompt, orm_context_tokens, orm_prompt_budget
from webrl.rewards import is_success

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
        rows = session.scalars(select(m.Trajectory).where(m.Trajectory.id.in_(trajectory_ids))
                               .order_by(m.Trajectory.id)).all()
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
    done = already_published(output, version)
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
    with torch.no_grad():
        train_p = success_probability(fit.head(features))
    metrics = {"examples": len(prompts), "successes": int(labels.sum()), "l2": fit.l2,
               "validation_balanced_accuracy": max(fit.validation.values()) if fit.validation else None,
               "train_balanced_accuracy": balanced_accuracy(train_p, labels), "prompt_tokens": budget,
               "seconds": time.monotonic() - started}
    log.info("orm head: lambda %g (validation %s), train balanced accuracy %.3f", fit.l2, fit.validation,
             metrics["train_balanced_accuracy"])
    base = Path(job.base)

    def write(folder: Path) -> None:
        for file in base.iterdir():
            if file.is_file() and file.name not in NOT_COPIED:
                shutil.copy2(file, folder / file.name)
        if context:
            tokenizer.model_max_length = context  # what the ORM service reads (orm_context_tokens)
        save_tokenizer(tokenizer, folder)
        write_head(folder, fit)

    return publish(settings, write, output, role="orm", version=version, metrics=metrics, replace=True)
