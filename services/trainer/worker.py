"""Celery tasks of the trainer (queue ``train``): ``train.phase`` and ``train.sft``.

Each takes one JSON payload (``PhaseJob`` / ``SftJob``), opens its own DB sessions, and is idempotent: a job
whose checkpoints are already published (same payload -> same version, verified sha256) returns them.
"""

from __future__ import annotations

from typing import Any

from services.trainer.jobs import run_job
from services.trainer.phase import PhaseJob
from services.trainer.sft import SftJob
from webrl.config import get_settings
from webrl.queue import celery_app


@celery_app.task(name="train.phase")
def train_phase(payload: dict[str, Any]) -> dict[str, Any]:
    """Train one phase -> ``{"actor": {role, version, path, sha256}, "critic": {...}, "metrics": {...}}``."""
    job = PhaseJob.model_validate(payload)
    return run_job(get_settings(), "phase", job.model_dump())


@celery_app.task(name="train.sft")
def train_sft(payload: dict[str, Any]) -> dict[str, Any]:
    """Supervised fine-tuning -> ``{"path", "version", "sha256", "metrics"}``."""
    job = SftJob.model_validate(payload)
    return run_job(get_settings(), "sft", job.model_dump())
