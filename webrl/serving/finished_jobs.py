"""The statuses of an embedded service's finished jobs, kept for ``GET /v1/jobs/{id}`` and bounded.

Embedded mode (no broker) runs a service's jobs in its own process, and a client polls each job's status until it
ends; a run submits a rollout job per chunk and a train job per phase for as long as the service lives, so keeping
every finished status would grow the process without end. :class:`FinishedJobs` keeps the last
:data:`FINISHED_KEPT`: a client that polls its job long after thousands of others finished gets a 404.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

S = TypeVar("S")

#: Finished embedded jobs whose status a service keeps.
FINISHED_KEPT = 1000


class FinishedJobs(Generic[S]):
    """The statuses of the last ``size`` jobs to finish, by job id (not thread-safe: callers lock)."""

    def __init__(self, size: int = FINISHED_KEPT) -> None:
        if size < 1:
            raise ValueError(f"keep at least one finished job, not {size}")
        self.size = size
        self._statuses: OrderedDict[str, S] = OrderedDict()

    def add(self, job_id: str, status: S) -> None:
        """Record ``job_id``'s final status; the oldest beyond ``size`` go."""
        self._statuses[job_id] = status
        self._statuses.move_to_end(job_id)
        while len(self._statuses) > self.size:
            self._statuses.popitem(last=False)

    def get(self, job_id: str) -> S | None:
        return self._statuses.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._statuses

    def __len__(self) -> int:
        return len(self._statuses)
