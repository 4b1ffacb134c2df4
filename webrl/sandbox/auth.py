"""Logins for the sandbox sites: default accounts, password hashes, signed session cookies.

Default accounts (the same names WebArena's sites use, so WebArena-style intents read the same):

=============== ========================= ===========
site            username                  password
=============== ========================= ===========
shopping        emma.lopez@gmail.com      Password.123
shopping_admin  admin                     admin1234
reddit          MarvelsGrandpa17          test1234
gitlab          byteblaze                 hello1234
=============== ========================= ===========

Each site stores its users (with :func:`hash_password` hashes) in its own database and has a real
``/login`` form that checks them (:func:`check_password`). A session is the cookie
``webrl_session_<site>`` (:func:`session_cookie_name`) holding ``base64url(username).signature``; the signature is an
HMAC, so a session cannot be forged by editing the cookie. Sessions carry no server state, so they survive
episode resets. :func:`login_cookies` makes the cookie without a browser, for tasks with
``require_login`` (what WebArena's ``storage_state`` files do).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

#: site -> (username, password) of the account tasks log in as.
DEFAULT_ACCOUNTS: dict[str, tuple[str, str]] = {
    "shopping": ("emma.lopez@gmail.com", "Password.123"),
    "shopping_admin": ("admin", "admin1234"),
    "reddit": ("MarvelsGrandpa17", "test1234"),
    "gitlab": ("byteblaze", "hello1234"),
}

#: Signs session cookies. The sandbox holds no secrets; the signature only stops accidental forgery.
SESSION_SECRET = b"webrl-sandbox-session-v1"
PASSWORD_SALT = "webrl-sandbox"


def hash_password(password: str) -> str:
    """Salted SHA-256 of a password (hex), as stored in the sites' user tables."""
    return hashlib.sha256(f"{PASSWORD_SALT}:{password}".encode()).hexdigest()


def check_password(password: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_password(password), stored_hash)


def session_cookie_name(site: str) -> str:
    return f"webrl_session_{site}"


def _mac(site: str, username: str) -> str:
    return hmac.new(SESSION_SECRET, f"{site}\n{username}".encode(), hashlib.sha256).hexdigest()[:32]


def sign_session(site: str, username: str) -> str:
    """Cookie value: URL-safe base64 of the name (cookie-safe characters only) and its HMAC."""
    encoded = base64.urlsafe_b64encode(username.encode()).decode().rstrip("=")
    return f"{encoded}.{_mac(site, username)}"


def verify_session(site: str, value: str | None) -> str | None:
    """The username in a session cookie value, or None if absent or forged."""
    if not value or "." not in value:
        return None
    encoded, _, mac = value.partition(".")
    try:
        username = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return username if username and hmac.compare_digest(mac, _mac(site, username)) else None


def login_cookies(site: str, base_url: str, username: str | None = None) -> list[dict]:
    """Playwright-style cookies that log ``username`` (default: the site's default account) into ``site``."""
    if site not in DEFAULT_ACCOUNTS:
        raise ValueError(f"site {site!r} has no logins; sites with logins: {sorted(DEFAULT_ACCOUNTS)}")
    user = username or DEFAULT_ACCOUNTS[site][0]
    return [{"name": session_cookie_name(site), "value": sign_session(site, user), "url": base_url.rstrip("/")}]
