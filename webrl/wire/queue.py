"""The Celery app: one queue per service, JSON payloads, late acks, bounded redeliveries.

With no broker configured (the embedded mode) tasks run eagerly in the caller's process, so the
pipeline calls the same functions in both modes. Workers import only their own ``worker.py``; the app
finds task modules through :data:`TASK_MODULES`.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Literal

import celery.exceptions
from celery import Celery, Task
from celery.result import AsyncResult
from celery.signals import worker_init
from kombu import pools as kombu_pools

from webrl.config import Settings, get_settings

log = logging.getLogger(__name__)

#: Queue per service; a task named ``<service>.<verb>`` goes to the service's queue.
QUEUES: dict[str, str] = {
    "rollout": "rollout",
    "actor": "actor",
    "orm": "orm",
    "critic": "critic",
    "taskgen": "taskgen",
    "train": "train",
    "webrl": "default",
}

#: Worker modules that register tasks; imported lazily by workers (``celery -A webrl.wire.queue worker``).
TASK_MODULES = [
    "services.browser_pool.worker",
    "services.actor.worker",
    "services.orm.worker",
    "services.critic.worker",
    "services.taskgen.worker",
    "services.trainer.worker",
]

#: Starts of one job at most: a worker killed mid-job (out of memory, a node lost) gives its job back to the queue
#: (late acks, ``task_reject_on_worker_lost``), and a job that kills every worker that runs it would loop forever.
MAX_STARTS = 3
STARTS_KEY = "webrl:job-starts:"  # + the job's id: a Redis counter on the broker, kept a day


def route_for(name: str) -> str:
    """Queue for a task name like ``orm.score`` (prefix before the first dot)."""
    return QUEUES.get(name.split(".", 1)[0], "default")


SOFT_LIMIT_FRACTION = 0.95  # the soft time limit: a job gets SoftTimeLimitExceeded this far into its limit


class DispatchTimeout(TimeoutError):
    """No result for a dispatched job within the dispatch timeout."""


def _transport_options(settings: Settings) -> dict[str, float]:
    """Redis broker options: the visibility timeout (an unacknowledged job goes back to its queue after it),
    swept for often enough that a killed worker's job is redelivered within about that timeout."""
    visibility = float(settings.jobs.visibility_timeout_s or 0)
    return {"visibility_timeout": visibility, "unacked_restore_interval": max(1.0, min(10.0, visibility / 10)),
            "unacked_restore_throttle": 1}


class JobStartedTooOften(RuntimeError):
    """A job whose earlier starts all ended with their worker killed: it fails instead of running again."""


def count_start(broker_url: str, job_id: str) -> int:
    """How many times the job ``job_id`` has started, this start included (a counter on a Redis broker)."""
    import redis

    key = STARTS_KEY + job_id
    with redis.Redis.from_url(broker_url) as client:
        pipe = client.pipeline()
        pipe.incr(key)
        pipe.expire(key, 24 * 3600)
        starts, _ = pipe.execute()
    return int(starts)


class BoundedTask(Task):
    """A task that runs at most :data:`MAX_STARTS` times under one job id: a redelivered job (its worker killed) is
    counted on the broker, and the start after the last fails with :class:`JobStartedTooOften`, which the caller's
    :func:`dispatch` raises. Eager calls (the embedded mode) and non-Redis brokers are not counted."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        broker = str(self.app.conf.broker_url or "")
        if not self.request.is_eager and self.request.id and broker.startswith(("redis://", "rediss://")):
            starts = count_start(broker, self.request.id)
            if starts > MAX_STARTS:
                raise JobStartedTooOften(
                    f"job {self.name} ({self.request.id}) started {starts} times: its {MAX_STARTS} earlier starts "
                    "each ended with their worker killed (out of memory?), so it is not run again")
        return super().__call__(*args, **kwargs)


def make_celery(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    app = Celery("webrl", broker=settings.jobs.broker_url or "memory://", backend=settings.jobs.result_backend,
                 task_cls=BoundedTask)
    app.conf.update(
        broker_transport_options=_transport_options(settings),
        task_time_limit=settings.jobs.time_limit_s,
        task_soft_time_limit=settings.jobs.time_limit_s * SOFT_LIMIT_FRACTION,
        webrl_dispatch_timeout_s=settings.jobs.dispatch_timeout_s,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_acks_late=True,  # a worker killed mid-task leaves the message for another worker
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,  # long jobs: don't hoard messages
        task_always_eager=settings.eager,
        task_eager_propagates=True,
        task_default_queue="default",
        task_routes=lambda name, args, kwargs, options, task=None, **kw: {"queue": route_for(name)},
        broker_connection_retry_on_startup=True,
        result_expires=24 * 3600,
        task_track_started=True,
    )
    return app


celery_app = make_celery()


@worker_init.connect
def _register_tasks_on_worker_start(**_: object) -> None:
    """`celery -A webrl.wire.queue worker -Q <queue>` serves every service's tasks."""
    autodiscover()


def autodiscover() -> None:
    """Import every worker module, registering its tasks; a module that fails to import fails loudly."""
    import importlib

    for module in TASK_MODULES:
        importlib.import_module(module)


def dispatch(name: str, payload: dict, *, timeout: float | None = None) -> dict:
    """Run the Celery task ``name`` with one JSON payload and return its JSON result.

    Embedded mode (no broker): the task runs here, eagerly. Distributed mode: it goes to its service's
    queue and this waits for a worker's result, at most ``timeout`` seconds (default: the configured
    ``jobs.dispatch_timeout_s``), then raises :class:`DispatchTimeout`. The caller's code is the same in both modes.
    """
    if celery_app.conf.task_always_eager:
        autodiscover()
        if name not in celery_app.tasks:
            raise KeyError(f"no Celery task named {name!r}")
        return celery_app.tasks[name].apply(args=(payload,), throw=True).get()
    wait = timeout if timeout is not None else celery_app.conf.webrl_dispatch_timeout_s
    sent = celery_app.send_task(name, args=(payload,))
    try:
        return sent.get(timeout=wait)
    except celery.exceptions.TimeoutError:
        raise DispatchTimeout(
            f"job {name} ({sent.id}) gave no result within {wait:g} s: is a worker consuming queue "
            f"{route_for(name)!r} (`celery -A webrl.wire.queue worker -Q {route_for(name)}`)? Its state: {sent.state}; "
            "WEBRL_JOBS__DISPATCH_TIMEOUT_S sets the wait") from None
    except KeyboardInterrupt:  # Ctrl-C stops the job too: left running, it would go on beside a resumed run's copy
        stop_job(sent)
        raise


#: The state a job submitted through :func:`submit_job` has until a worker starts it (Celery's own ``PENDING`` is
#: also what it answers for an id it never saw).
SUBMITTED = "SUBMITTED"


def submit_job(name: str, payload: dict) -> str:
    """Send the Celery task ``name`` with one JSON payload without waiting, and return its job id: the id is recorded
    as :data:`SUBMITTED` in the result backend before the message is sent (a worker's first state comes after it),
    so :func:`job_state` can tell a job that waits in its queue from an id no one submitted."""
    job_id = uuid.uuid4().hex
    celery_app.backend.store_result(job_id, None, SUBMITTED)
    celery_app.send_task(name, args=(payload,), task_id=job_id)
    return job_id


#: What a submitted job is doing, in the words the services map theirs from.
JobStatusName = Literal["waiting", "running", "succeeded", "failed"]


@dataclass(frozen=True)
class JobState:
    """A submitted job as the services report it: ``waiting`` in its queue, ``running``, ``succeeded`` with its
    JSON result, or ``failed`` with its error."""

    status: JobStatusName
    result: Any = None
    error: str | None = None


#: Celery's states as a job's status; any other state (a custom one) is set by a running task.
_STATUS_OF_STATE: dict[str, JobStatusName] = {
    SUBMITTED: "waiting", "RECEIVED": "waiting", "STARTED": "running", "RETRY": "running",
    "SUCCESS": "succeeded", "FAILURE": "failed", "REVOKED": "failed"}


def job_state(job_id: str) -> JobState | None:
    """A job submitted through :func:`submit_job`: its status, and its result or error once it ended; None for an id
    never submitted, or whose record expired (``result_expires``: a day). Celery alone answers ``PENDING`` for any
    id, so a mistyped one would read "waiting" forever."""
    result = AsyncResult(job_id, app=celery_app)
    state = result.state
    if state == "PENDING":
        return None
    status = _STATUS_OF_STATE.get(state, "running")
    if status == "succeeded":
        return JobState(status, result=result.result)
    if status == "failed":
        error = result.result
        return JobState(status, error=f"{type(error).__name__}: {error}" if isinstance(error, BaseException)
                        else str(error))
    return JobState(status)


def stop_job(sent: AsyncResult) -> None:
    """Revoke the job ``sent`` on every worker, ending the pool process that runs it (SIGTERM): it is acknowledged
    as revoked, so the broker never delivers it again. A broker that cannot be reached leaves it to its time limit
    (logged): the interrupt that asked for this still goes through."""
    try:
        sent.revoke(terminate=True, signal="SIGTERM")
    except Exception as exc:  # an interrupt must not turn into a broker error
        log.warning("could not revoke job %s (%s): it runs to its end or its time limit", sent.id, exc)


def configure(settings: Settings) -> Celery:
    """Re-point the process-wide Celery app at ``settings`` (used by tests and `webrl train`)."""
    fresh = make_celery(settings)
    celery_app.conf.update(fresh.conf)
    celery_app.conf.broker_url = settings.jobs.broker_url or "memory://"
    celery_app.conf.result_backend = settings.jobs.result_backend
    # Celery caches the result backend (per thread), the connection pool and the producer pool built on it
    # on first use; drop all three so the next call connects to the new URLs.
    celery_app._local.__dict__.pop("backend", None)
    if celery_app._pool is not None:
        celery_app._pool.force_close_all()
        celery_app._pool = None
    celery_app.amqp._producer_pool = None
    kombu_pools.reset()  # kombu's process-wide producer pools are keyed by connection: drop the closed ones
    return celery_app


@celery_app.task(name="webrl.ping")
def ping(payload: dict) -> dict:
    """Worker health check: proves a worker is consuming and can reach the database."""
    import socket

    from webrl.store.readiness import check_ready

    return {"pong": payload.get("nonce"), "worker": socket.gethostname(), "checks": check_ready(get_settings())}
