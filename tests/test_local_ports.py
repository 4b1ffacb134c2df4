"""The ports tests start servers on stay out of the kernel's ephemeral range, where outgoing connections could take
them between a test choosing a port and its server binding it."""

from __future__ import annotations

import socket

from local_ports import _ephemeral_start, _usable_range, free_offset, free_port

SITE_PORTS = [7770, 7780, 9999, 8023, 3000, 8888]


def test_an_offset_moves_every_site_below_the_ephemeral_range_onto_free_ports() -> None:
    offset = free_offset(SITE_PORTS)
    moved = [port + offset for port in SITE_PORTS]
    low, high = _usable_range()
    assert high == _ephemeral_start() and all(low <= port < high for port in moved), moved
    for port in moved:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_ports_and_offsets_are_never_handed_out_twice() -> None:
    first, second = free_offset(SITE_PORTS), free_offset(SITE_PORTS)
    moved = {port + first for port in SITE_PORTS} | {port + second for port in SITE_PORTS}
    assert len(moved) == 2 * len(SITE_PORTS)
    singles = {free_port() for _ in range(50)}
    assert len(singles) == 50 and not singles & moved
