"""Child processes that own their process group, so stopping one stops everything it started (vLLM's engine
processes, the ranks ``accelerate launch`` starts), whether it ends, fails or its caller is interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence


def stop_process_group(process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM the process group ``process`` leads (started with ``start_new_session=True``), SIGKILL it after
    ``timeout_s``; then SIGKILL whatever of the group is left (a child that outlived its parent)."""
    try:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_process_group(command: Sequence[str], *, stop_timeout_s: float = 30.0) -> None:
    """Run ``command`` in a process group of its own and wait for it: a non-zero exit raises
    ``subprocess.CalledProcessError``. Anything that ends the wait early (a job's soft time limit, Ctrl-C, a revoke's
    SIGTERM turned into an exception) stops the whole group before it propagates, so no child it started goes on
    beside a retried job's (``subprocess.run`` kills the direct child alone, and only on some exceptions)."""
    process = subprocess.Popen(list(command), start_new_session=True)
    try:
        code = process.wait()
    except BaseException:
        stop_process_group(process, stop_timeout_s)
        raise
    stop_process_group(process, stop_timeout_s)  # what it started and left running (a rank that outlived the launcher)
    if code != 0:
        raise subprocess.CalledProcessError(code, list(command))
