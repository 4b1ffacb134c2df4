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


def _usable_range() -> tuple[int, int]:
    """Ports ``low`` .. ``high - 1``: below the ephemeral range, from _LOWEST where that leaves a thousand."""
    high = _ephemeral_start()
    return (_LOWEST if high - _LOWEST >= 1000 else 1024), high


def free_port() -> int:
    """A port on 127.0.0.1 that is free now, below the ephemeral range, and new to this test session."""
    low, high = _usable_range()
    for _ in range(1000):
        port = random.randrange(low, high)
        if port in _handed_out or not _bindable(port):
            continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {low}..{high - 1}")


def free_offset(ports: list[int]) -> int:
    """An offset that moves every one of ``ports`` to a port that is free now, below the ephemeral range and new to
    this test session (the sandbox sites move together by one offset, ``webrl sites serve --port-offset``)."""
    low, high = _usable_range()
    lowest_offset, highest_offset = low - min(ports), high - 1 - max(ports)
    if highest_offset < lowest_offset:
        raise RuntimeError(f"ports {sorted(ports)} cannot all move into {low}..{high - 1}")
    for _ in range(1000):
        offset = random.randrange(lowest_offset, highest_offset + 1)
        moved = [port + offset for port in ports]
        if _handed_out.intersection(moved) or not all(_bindable(port) for port in moved):
            continue
        _handed_out.update(moved)
        return offset
    raise RuntimeError(f"no offset moves {sorted(ports)} to free ports in {low}..{high - 1}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
