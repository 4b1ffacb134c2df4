"""A child run in its own process group is stopped whole: what it started is gone when it exits, fails, or its
caller is interrupted (a job's soft time limit), so no rank of a stopped training job goes on beside its retry."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from webrl.process_group import run_process_group


def _alive(pid: int) -> bool:
    """A process that runs (a zombie waiting for its parent to read its status does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _pid(file: Path) -> int:
    deadline = time.monotonic() + 10
    while not file.exists() or not file.read_text().strip():
        assert time.monotonic() < deadline, "the child never wrote its pid"
        time.sleep(0.01)
    return int(file.read_text())


def _gone(pid: int) -> bool:
    """Whether ``pid`` stops running within a few seconds (a SIGKILLed process is gone at once)."""
    deadline = time.monotonic() + 10
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class SoftTimeLimit(Exception):
    """What a job's soft time limit raises in the process that waits."""


@pytest.fixture
def alarm() -> Iterator[None]:
    def raise_limit(signum: int, frame: FrameType | None) -> None:
        raise SoftTimeLimit

    previous = signal.signal(signal.SIGALRM, raise_limit)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_what_a_child_left_running_is_stopped_when_it_exits(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    run_process_group(["sh", "-c", f"sleep 300 & echo $! > {pid_file}"])
    assert _gone(_pid(pid_file)), "the grandchild outlived its group's stop"


def test_an_interrupted_wait_stops_the_child_and_what_it_started(tmp_path: Path, alarm: None) -> None:
    pid_file = tmp_path / "pid"
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    with pytest.raises(SoftTimeLimit):
        run_process_group(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"])
    assert _gone(_pid(pid_file)), "the grandchild outlived the interrupted wait"


def test_a_failing_child_is_a_called_process_error() -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_process_group(["sh", "-c", "exit 3"])
    assert failed.value.returncode == 3
