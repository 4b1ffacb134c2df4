"""Freed memory handed back to the system: what a phase's training leaves resident in the process that goes on."""

from __future__ import annotations

import gc

import pytest

from webrl.process_memory import return_freed_memory, status_mb


def test_status_fields_are_read_in_mib() -> None:
    anon, peak = status_mb("RssAnon"), status_mb("VmHWM")
    assert anon is not None and peak is not None and 0 < anon <= peak
    with pytest.raises(KeyError, match="NoSuchField"):
        status_mb("NoSuchField")


def test_memory_freed_between_live_allocations_goes_back_to_the_system() -> None:
    """150 MB freed in holes between allocations still alive (as a training step's activations lie between what
    the process keeps) stays resident after garbage collection: the allocator keeps it. Trimmed, it is returned."""
    chunks, kept = [], []
    for _ in range(1500):
        chunks.append(bytearray(b"x" * 100_000))  # above pymalloc's small objects: glibc's malloc
        kept.append(bytearray(b"k" * 600))  # a live allocation after each: the heap cannot shrink from its top
    del chunks
    gc.collect()
    held = status_mb("RssAnon")
    if not return_freed_memory():
        pytest.skip("this C library has no malloc_trim (not glibc)")
    returned = status_mb("RssAnon")
    assert held is not None and returned is not None
    assert held - returned > 100, (held, returned)
    assert len(kept) == 1500  # still alive: only freed memory went back
