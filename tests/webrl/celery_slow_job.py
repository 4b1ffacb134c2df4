"""Jobs for the worker-kill tests, imported by their workers with ``--include``: one notes that it started,
sleeps, then returns an exact sum and the pid that ran it; one kills the worker process that runs it. Each worker
notes when it is ready."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from celery.signals import worker_ready

from webrl.wire.queue import celery_app


@celery_app.task(name="killtest.sum")
def slow_sum(payload: dict) -> dict:
    Path(payload["started_dir"], str(os.getpid())).touch()
    time.sleep(float(payload["seconds"]))
    return {"sum": sum(range(int(payload["n"]))), "pid": os.getpid()}


@celery_app.task(name="killtest.die")
def die(payload: dict) -> dict:
    """Notes its start, then ends its worker process as the out-of-memory killer would (SIGKILL)."""
    Path(payload["started_dir"], f"{os.getpid()}-{time.monotonic_ns()}").touch()
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


@worker_ready.connect
def _note_ready(sender: object, **_: object) -> None:
    Path(os.environ["KILLTEST_READY_DIR"], str(sender.hostname)).touch()  # type: ignore[attr-defined]
