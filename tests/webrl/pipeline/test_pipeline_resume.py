"""Kill `webrl train` with SIGKILL in the middle of a rollout, run it again, and find exactly the work an
uninterrupted run does: no trajectory lost, none duplicated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.session import session_scope

KILL_DEADLINE_S = 600
RESUME_TIMEOUT_S = 1200
# the test's own deadlines bound it, not the suite's per-test default (600 s), which a loaded machine can pass
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(KILL_DEADLINE_S + RESUME_TIMEOUT_S + 60)]


def _trajectories(settings: Settings) -> int:
    try:
        with session_scope(settings) as s:
            return s.scalar(select(func.count()).select_from(m.TrajectoryRow)) or 0
    except Exception:  # the table does not exist until the run has migrated the database
        return 0


def test_sigkill_during_rollout_then_resume(world: Settings, tiny_actor: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "webrl.cli", "train", "--preset", "smoke", "--run", "resume",
           "--actor", str(tiny_actor), "--orm", str(tiny_actor)]
    env = dict(os.environ)
    log = tmp_path / "killed-run.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    # phase 0 evaluates 8 test tasks in chunks of 4, each trajectory stored as it ends: kill once 4 are, mid-rollout
    deadline = time.monotonic() + KILL_DEADLINE_S
    while _trajectories(world) < 4:
        assert proc.poll() is None, "train exited before it could be killed:\n" + log.read_text()[-3000:]
        assert time.monotonic() < deadline, "no trajectory was stored in time"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    interrupted = _trajectories(world)
    assert 4 <= interrupted < 32

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RESUME_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    with session_scope(world) as s:
        per_attempt = s.execute(
            select(m.TrajectoryRow.task_id, m.TrajectoryRow.phase, m.TrajectoryRow.attempt, func.count())
            .group_by(m.TrajectoryRow.task_id, m.TrajectoryRow.phase, m.TrajectoryRow.attempt)
        ).all()
        assert all(n == 1 for *_, n in per_attempt)
        phases = {p.index: p for p in s.scalars(select(m.Phase))}
        assert phases[0].status == phases[1].status == "done"
        kept = phases[1].metrics["filter.kept"]
        expected = 8 + 8 + kept + 8  # phase-0 eval + seed rollout + phase-1 rollout + phase-1 eval
        assert s.scalar(select(func.count()).select_from(m.TrajectoryRow)) == expected
        stored_steps = s.scalar(select(func.sum(m.TrajectoryRow.n_steps)))
        assert s.scalar(select(func.count()).select_from(m.StepRow)) == stored_steps
