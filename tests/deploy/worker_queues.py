"""Which queues a service's Celery worker must consume: those its tasks are routed to (compose and k8s alike)."""

from __future__ import annotations

import importlib


def queues_of(service: str) -> set[str]:
    """The queues of the Celery tasks ``services/<service>/worker.py`` defines (where the dispatcher sends them)."""
    from webrl.wire.queue import celery_app, route_for

    module = f"services.{service}.worker"
    importlib.import_module(module)
    queues = {route_for(name) for name, task in celery_app.tasks.items() if task.run.__module__ == module}
    assert queues, f"{module} defines no task"
    return queues


def consumed(command: list[str]) -> set[str]:
    """The queues a ``celery ... worker -Q a,b`` command consumes."""
    return set(command[command.index("-Q") + 1].split(","))
