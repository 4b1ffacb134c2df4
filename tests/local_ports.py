"""Ports for the servers a test starts. A port the kernel hands out for ``bind(("127.0.0.1", 0))`` lies in the
ephemeral range, which every outgoing connection on the machine also draws from (Chromium, the database and Redis
clients), so under load one of them can take it between the test choosing it and its server binding it (the server
then exits with "port ... is in use"). These ports come from below that range and are never handed out twice in a
test session."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 20000
_handed_out: set[int] = set()


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port on 127.0.0.1 that is free now, below the ephemeral range, and new to this test session."""
    high = _ephemeral_start()
    low = _LOWEST if high - _LOWEST >= 1000 else 1024
    for _ in range(1000):
        port = random.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {low}..{high - 1}")
