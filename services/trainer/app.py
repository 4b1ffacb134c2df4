"""The trainer's REST API: ``POST /v1/train`` (a phase), ``/v1/train/sft``, ``/v1/train/orm-head``,
``GET /v1/train/{job_id}``, ``GET /v1/checkpoints``.

Distributed mode sends the job to the ``train`` queue (Celery ``train.phase`` / ``train.sft`` /
``train.orm_head``); embedded mode runs it (:func:`services.trainer.jobs.run_job`, as the Celery task does) on a
one-thread executor in this process, so the request returns at once in both.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from pydantic import BaseModel

from services.trainer.jobs import check_paths, kind_of, run_job
from webrl.config import Settings, get_settings
from webrl.db.session import session_scope
from webrl.serving.factory import create_app, not_found
from webrl.serving.finished_jobs import FinishedJobs
from webrl.store.checkpoints import CheckpointInfo, list_checkpoints
from webrl.wire.contracts import OrmHeadJob, PhaseJob, SftJob, TrainJob


class JobAccepted(BaseModel):
    job_id: str
    task: str
    status: str


class JobStatus(BaseModel):
    job_id: str
    status: str
    result: dict[str, Any] | None = None
    error: str | None = None


class LocalJobs:
    """Embedded mode: jobs on one background thread (training uses every core; one at a time). A finished job is
    kept as its status only (:class:`~webrl.serving.finished_jobs.FinishedJobs`): a failed job's exception carries
    its traceback, whose frames hold the models it loaded, so keeping the future would keep an actor, its optimizer
    and a critic alive after every failure."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="webrl-train")
        self.running: dict[str, Future] = {}
        self.finished: FinishedJobs[JobStatus] = FinishedJobs()
        self.lock = threading.Lock()

    def submit(self, settings: Settings, job: TrainJob) -> str:
        job_id = uuid.uuid4().hex
        future = self.executor.submit(run_job, settings, job)
        with self.lock:
            self.running[job_id] = future
        future.add_done_callback(lambda done: self._finish(job_id, done))
        return job_id

    def _finish(self, job_id: str, future: Future) -> None:
        error = future.exception()
        status = (JobStatus(job_id=job_id, status="failed", error=str(error)) if error is not None else
                  JobStatus(job_id=job_id, status="succeeded", result=future.result().model_dump(mode="json")))
        with self.lock:
            self.finished.add(job_id, status)
            self.running.pop(job_id, None)

    def status(self, job_id: str) -> JobStatus | None:
        with self.lock:
            if job_id in self.finished:
                return self.finished.get(job_id)
            return JobStatus(job_id=job_id, status="running") if job_id in self.running else None


def _settings(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(_settings)]


def submit(app: FastAPI, settings: Settings, job: TrainJob) -> JobAccepted:
    """Enqueue a job: Celery when a broker is configured, else the local executor. An output path outside the
    artifacts store, or a model folder a request may not name, is a 422 naming its field (nothing is enqueued)."""
    check_paths(settings, job)
    task = f"train.{kind_of(job)}"
    if settings.eager:
        return JobAccepted(job_id=app.state.jobs.submit(settings, job), task=task, status="running")
    from webrl.wire.queue import submit_job

    return JobAccepted(job_id=submit_job(task, job.model_dump(mode="json")), task=task, status="queued")


def job_status(app: FastAPI, settings: Settings, job_id: str) -> JobStatus | None:
    """The job's status; None (404) for an id no one submitted (Celery alone answers PENDING for any id)."""
    if settings.eager:
        return app.state.jobs.status(job_id)
    from webrl.wire.queue import job_state

    known = job_state(job_id)
    if known is None:
        return None
    status = "queued" if known.status == "waiting" else known.status
    return JobStatus(job_id=job_id, status=status, result=known.result, error=known.error)


def create_trainer_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = create_app("trainer", settings=settings, description="SFT, WebRL critic and actor training, checkpoints.")
    app.state.jobs = LocalJobs()

    @app.post("/v1/train", status_code=202, response_model=JobAccepted, tags=["train"])
    def train_phase(body: PhaseJob, s: SettingsDep) -> JobAccepted:
        """Train one WebRL phase (critic then actor); returns a job id."""
        return submit(app, s, body)

    @app.post("/v1/train/sft", status_code=202, response_model=JobAccepted, tags=["train"])
    def train_sft(body: SftJob, s: SettingsDep) -> JobAccepted:
        """Supervised fine-tuning of an actor or an ORM; returns a job id."""
        return submit(app, s, body)

    @app.post("/v1/train/orm-head", status_code=202, response_model=JobAccepted, tags=["train"])
    def train_orm_head(body: OrmHeadJob, s: SettingsDep) -> JobAccepted:
        """Fit a classification-head ORM on the frozen backbone of ``base``; returns a job id."""
        return submit(app, s, body)

    @app.get("/v1/train/{job_id}", response_model=JobStatus, tags=["train"])
    def get_job(job_id: str, s: SettingsDep) -> JobStatus:
        status = job_status(app, s, job_id)
        if status is None:
            raise not_found(f"job {job_id}")
        return status

    @app.get("/v1/checkpoints", response_model=list[CheckpointInfo], tags=["checkpoints"])
    def checkpoints(s: SettingsDep, role: Annotated[Literal["actor", "critic", "orm"] | None, Query()] = None
                    ) -> list[CheckpointInfo]:
        with session_scope(s) as session:
            return list_checkpoints(session, role)

    return app


app = create_trainer_app()
