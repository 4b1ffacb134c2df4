"""Readiness: can this process reach its database and (when configured) its broker? A service's ``/readyz`` and a
worker's ``webrl.ping`` answer with it."""

from __future__ import annotations

from sqlalchemy import text

from webrl.config import Settings


def check_ready(settings: Settings) -> dict[str, str]:
    """Probe the database and (when configured) the broker. Returns component -> "ok" or the error."""
    from webrl.db.session import get_engine

    status: dict[str, str] = {}
    try:
        with get_engine(settings).connect() as conn:
            conn.execute(text("SELECT 1"))
        status["database"] = "ok"
    except Exception as exc:
        status["database"] = f"error: {type(exc).__name__}"
    if settings.jobs.broker_url and settings.jobs.broker_url.startswith("redis"):
        import redis

        try:
            redis.Redis.from_url(settings.jobs.broker_url, socket_timeout=2).ping()
            status["broker"] = "ok"
        except Exception as exc:
            status["broker"] = f"error: {type(exc).__name__}"
    return status
