"""A private embedded home for a benchmark: a temporary WEBRL_HOME, the sandbox sites on free local ports, and
no database or broker URL inherited from the caller's environment (a benchmark never writes into a real one)."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def isolated_home(prefix: str) -> Path:
    """Point this process's settings (read from the environment) at a fresh home; returns it."""
    from webrl.sandbox.sites import SITES

    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["WEBRL_HOME"] = str(home)
    for site in SITES:
        os.environ[f"WEBRL_SITES__{site.upper()}_URL"] = f"http://127.0.0.1:{free_port()}"
    for var in ("WEBRL_DATABASE__URL", "WEBRL_JOBS__BROKER_URL"):
        os.environ.pop(var, None)
    return home
