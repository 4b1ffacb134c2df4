"""This process's memory as the kernel sees it, and handing freed memory back to it.

A phase's training peaks at several GB of activations and gradients on the CPU. PyTorch frees them into glibc's
malloc, which keeps most of it mapped in its arenas for later allocations: a process that trains and then goes on
(the embedded pipeline's next rollouts, evaluation and phase) keeps the peak resident although nothing references
it. ``malloc_trim(0)`` releases the free pages of every arena (since glibc 2.8 also inside the heap, not only at its
top). ``bench/phase_memory.py`` measures what it returns after a stored phase's update.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import cache
from pathlib import Path

_STATUS = Path("/proc/self/status")


def status_mb(field: str) -> float | None:
    """A ``kB`` field of ``/proc/self/status`` in MiB (``RssAnon``: resident anonymous memory, what a process's heap
    holds; ``VmHWM``: the resident peak so far), None where the kernel has no such file (not Linux)."""
    try:
        lines = _STATUS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) / 1024
    raise KeyError(f"{_STATUS} has no field {field!r}")


@cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): no such call
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def return_freed_memory() -> bool:
    """Collect unreachable objects, then hand the C allocator's free pages back to the kernel (glibc's
    ``malloc_trim(0)``). True when the allocator could do so; False where it has no such call. Memory still
    referenced stays where it is."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
