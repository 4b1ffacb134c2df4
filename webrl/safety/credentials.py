"""Which bearer key a request to one of the project's services carries, so a key never leaves for another server;
and how an error message about a URL with a password is shown without it."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit

from webrl.config import Settings
from webrl.safety.allow_list import origin

MASK = "***"


def actor_headers(settings: Settings, url: str) -> dict[str, str]:
    """The bearer header for ``url`` when it is the configured actor service (``actor.api_key``, else the
    services' ``security.api_key``); no header for any other endpoint, so the key never leaves for another server."""
    key = settings.actor.api_key or settings.security.api_key
    return {"Authorization": f"Bearer {key}"} if key and origin(url) == origin(settings.actor.url) else {}


def url_password(url: str) -> str | None:
    """The password field of ``url`` (as written, percent-encoding kept), or None; never raises on a malformed URL."""
    try:
        return urlsplit(url).password or None
    except ValueError:
        return None


def mask_password(message: str, url: str) -> str:
    """``message`` with the password field of ``url`` masked where the message repeats it as a field: in a URL's
    user info (``user:<password>@``) or a libpq connection string (``password=<password>``, quoted or not), as
    written or percent-decoded. Its characters elsewhere stay: replacing every occurrence turned libpq's
    ``invalid port number`` into ``invalid ***ort number`` for the password ``p``."""
    password = url_password(url)
    if not password:
        return message
    for spelling in {password, unquote(password), quote(unquote(password), safe="")}:
        value = re.escape(spelling)
        message = re.sub(rf"(?<=:){value}(?=@)", MASK, message)
        message = re.sub(rf"(?<=password=)(['\"]?){value}(?=\1(?:[\s'\"]|$))", rf"\1{MASK}", message)
    return message
