"""Celery tasks of the trainer (queue ``train``): ``train.phase``, ``train.sft`` and ``train.orm_head``. Tasks
only; the jobs run in :mod:`services.trainer.jobs`.

Each takes one typed job (:class:`~webrl.wire.contracts.PhaseJob` / :class:`~webrl.wire.contracts.SftJob` /
:class:`~webrl.wire.contracts.OrmHeadJob`), opens its own
DB sessions, and is idempotent: a job whose checkpoints are already published (same job -> same version, verified
sha256) returns them.
"""

from __future__ import annotations

from typing import Any

from services.trainer.jobs import run_job
from webrl.config import get_settings
from webrl.wire.contracts import OrmHeadJob, PhaseJob, SftJob
from webrl.wire.queue import celery_app


@celery_app.task(name="train.phase")
def train_phase(payload: dict[str, Any]) -> dict[str, Any]:
    """:class:`~webrl.wire.contracts.PhaseJob` -> :class:`~webrl.wire.contracts.PhaseResult` (both checkpoints,
    metrics)."""
    return run_job(get_settings(), PhaseJob.model_validate(payload)).model_dump(mode="json")


@celery_app.task(name="train.sft")
def train_sft(payload: dict[str, Any]) -> dict[str, Any]:
    """:class:`~webrl.wire.contracts.SftJob` -> :class:`~webrl.wire.contracts.SftResult`."""
    return run_job(get_settings(), SftJob.model_validate(payload)).model_dump(mode="json")


@celery_app.task(name="train.orm_head")
def train_orm_head(payload: dict[str, Any]) -> dict[str, Any]:
    """:class:`~webrl.wire.contracts.OrmHeadJob` -> :class:`~webrl.wire.contracts.SftResult` (the published ORM)."""
    return run_job(get_settings(), OrmHeadJob.model_validate(payload)).model_dump(mode="json")
