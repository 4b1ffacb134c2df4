"""A job for the worker-kill test, imported by its workers with ``--include``: it notes that it started,
sleeps, then returns an exact sum and the pid that ran it. Each worker notes when it is ready."""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery.signals import worker_ready

from webrl.wire.queue import celery_app


@celery_app.task(name="killtest.sum")
def slow_sum(payload: dict) -> dict:
    Path(payload["started_dir"], str(os.getpid())).touch()
    time.sleep(float(payload["seconds"]))
    return {"sum": sum(range(int(payload["n"]))), "pid": os.getpid()}


@worker_ready.connect
def _note_ready(sender: object, **_: object) -> None:
    Path(os.environ["KILLTEST_READY_DIR"], str(sender.hostname)).touch()  # type: ignore[attr-defined]
