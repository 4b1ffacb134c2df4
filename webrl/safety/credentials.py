"""Which bearer key a request to one of the project's services carries, so a key never leaves for another server."""

from __future__ import annotations

from webrl.config import Settings
from webrl.safety.allow_list import origin


def actor_headers(settings: Settings, url: str) -> dict[str, str]:
    """The bearer header for ``url`` when it is the configured actor service (``actor.api_key``, else the
    services' ``security.api_key``); no header for any other endpoint, so the key never leaves for another server."""
    key = settings.actor.api_key or settings.security.api_key
    return {"Authorization": f"Bearer {key}"} if key and origin(url) == origin(settings.actor.url) else {}
