"""Mistakes a user can fix, and how the command line reports them: one line naming the problem, exit status 2,
no traceback (``webrl ...`` and ``make demo``)."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError


class UserError(Exception):
    """A problem with what the user gave (a file, a setting, a busy port); the message says what and how to fix."""


class PortBusy(UserError):
    """A port this command must listen on is taken."""


def bind_or_explain(host: str, port: int, what: str, fix: str) -> socket.socket:
    """A listening socket on ``host:port``; :class:`PortBusy` naming ``what`` and ``fix`` when it is taken, a
    :class:`UserError` naming the address when it cannot be listened on at all (a port out of range, an unknown
    host name, an address this machine does not have)."""
    if not 0 <= port <= 65535:
        raise UserError(f"port {port} for {what} is out of range (0-65535)")
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            taken = "in use" if exc.errno == errno.EADDRINUSE else "not allowed"
            raise PortBusy(f"port {port} on {host} for {what} is {taken}: {fix}") from None
        reason = exc.strerror or str(exc)
        raise UserError(f"cannot listen on {host}:{port} for {what}: {reason}") from None
    sock.listen(128)
    return sock


def settings_problem(exc: ValidationError) -> str:
    """One line per invalid setting, named as the environment variable that sets it (``WEBRL_ACTOR__BACKEND``)."""
    return "; ".join(f"WEBRL_{'__'.join(map(str, e['loc'])).upper() or '?'}: {e['msg']}" for e in exc.errors())


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Report a :class:`UserError` (or invalid settings) as ``error: <message>`` on stderr and exit 2."""
    import typer

    try:
        yield
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        typer.echo(f"error: invalid settings: {settings_problem(exc)}", err=True)
        raise SystemExit(2) from None
