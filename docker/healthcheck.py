#!/opt/venv/bin/python
"""Container health check for every webrl image (installed as ``webrl-healthcheck``).

Usage:
    webrl-healthcheck http URL            exit 0 when GET URL answers 2xx
    webrl-healthcheck tcp HOST:PORT ...   exit 0 when every address accepts a TCP connection
    webrl-healthcheck celery [NODE]       exit 0 when the Celery worker NODE (default celery@<hostname>)
                                          answers a remote-control ping through the broker
    webrl-healthcheck                     detect what this container runs from the process table:
                                          uvicorn -> http http://127.0.0.1:<port>/healthz,
                                          celery worker -> celery, `webrl sites serve` -> tcp on the
                                          ports its WEBRL_SITES__*_URL name, `webrl browser serve` -> tcp
                                          on its port, `webrl ui` -> http on its /healthz

Only the standard library is needed for http and tcp (so the same file serves the vLLM image); celery mode
imports webrl's Celery app, which reads the broker from WEBRL_JOBS__BROKER_URL.
"""

from __future__ import annotations

import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

TIMEOUT_S = 10.0  # below the HEALTHCHECK/probe timeouts (15 s) so a hung peer reports as a failure
CELERY_PING_TIMEOUT_S = 5.0
DEFAULT_UVICORN_PORT = 8000  # uvicorn's own default when --port is absent


def check_http(url: str) -> str | None:
    """None when ``url`` answers 2xx, else the reason."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            if 200 <= response.status < 300:
                return None
            return f"{url} answered {response.status}"
    except urllib.error.HTTPError as exc:
        return f"{url} answered {exc.code}"
    except OSError as exc:
        return f"{url} unreachable: {exc}"


def check_tcp(addresses: list[str]) -> str | None:
    """None when every ``host:port`` accepts a connection, else the first that does not."""
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=TIMEOUT_S):
                pass
        except (OSError, ValueError) as exc:
            return f"{address} refused: {exc}"
    return None


def check_celery(node: str | None) -> str | None:
    """None when the worker ``node`` answers ``inspect ping``."""
    from webrl.wire.queue import celery_app

    node = node or f"celery@{socket.gethostname()}"
    replies = celery_app.control.inspect(destination=[node], timeout=CELERY_PING_TIMEOUT_S).ping() or {}
    return None if node in replies else f"worker {node} did not answer ping"


def process_commands(proc: Path = Path("/proc")) -> list[list[str]]:
    """Command lines of the processes in this container (PID namespace), lowest pid first."""
    commands = []
    for entry in sorted((p for p in proc.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        argv = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
        if argv:
            commands.append(argv)
    return commands


def _option(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _options(argv: list[str], name: str) -> list[str]:
    """Every value of a repeatable option."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == name] + [
        arg.split("=", 1)[1] for arg in argv if arg.startswith(name + "=")]


def detect(commands: list[list[str]]) -> list[str] | None:
    """The explicit check (``["http", url]`` ...) for the first webrl process found, or None."""
    for argv in commands:
        names = [Path(a).name for a in argv[:3]]
        if "uvicorn" in names:
            port = _option(argv, "--port") or str(DEFAULT_UVICORN_PORT)
            return ["http", f"http://127.0.0.1:{port}/healthz"]
        if "celery" in names and "worker" in argv:
            node = _option(argv, "-n", "--hostname")
            return ["celery", node.replace("%h", socket.gethostname())] if node else ["celery"]
        if "webrl" in names and "sites" in argv and "serve" in argv:
            from webrl.config import get_settings
            from webrl.sandbox.server import sandbox_ports
            from webrl.sandbox.sites import SITES

            ports = sandbox_ports(get_settings())  # where `webrl sites serve` listens: its WEBRL_SITES__*_URL
            offset = int(_option(argv, "--port-offset") or 0)
            served = _options(argv, "--site") or list(SITES)
            return ["tcp", *(f"127.0.0.1:{ports[site] + offset}" for site in served)]
        if "webrl" in names and "ui" in argv:
            from webrl.commands.ui import VIEWER_PORT

            return ["http", f"http://127.0.0.1:{_option(argv, '--port') or VIEWER_PORT}/healthz"]
        if "webrl" in names and "browser" in argv and "serve" in argv:
            from webrl.commands.browser import BROWSER_SERVER_PORT

            return ["tcp", f"127.0.0.1:{_option(argv, '--port') or BROWSER_SERVER_PORT}"]
    return None


def run(args: list[str]) -> str | None:
    """Run one check; None means healthy, a string is why not."""
    if not args:
        detected = detect(process_commands())
        if detected is None:
            return ("no webrl process (uvicorn, celery worker, webrl sites/browser serve, webrl ui) found in this "
                    "container")
        args = detected
    kind, rest = args[0], args[1:]
    if kind == "http" and len(rest) == 1:
        return check_http(rest[0])
    if kind == "tcp" and rest:
        return check_tcp(rest)
    if kind == "celery" and len(rest) <= 1:
        return check_celery(rest[0] if rest else None)
    return f"usage: webrl-healthcheck [http URL | tcp HOST:PORT... | celery [NODE]], got {args}"


def main() -> int:
    problem = run(sys.argv[1:])
    if problem:
        sys.stderr.write(f"unhealthy: {problem}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
