"""An evaluation's attempt number: stable for the same actor folder and horizon, new for a rewritten actor or
another horizon (so ``webrl eval`` reruns reuse their trajectories and never mix horizons)."""

from __future__ import annotations

import os
from pathlib import Path

from webrl.orchestration.evaluate import evaluation_attempt


def test_attempt_follows_the_actor_folder_and_the_horizon(tmp_path: Path) -> None:
    full, adapter = tmp_path / "full", tmp_path / "adapter"
    full.mkdir()
    adapter.mkdir()
    (full / "config.json").write_text("{}")
    (adapter / "adapter_config.json").write_text("{}")
    for folder in (full, adapter):
        attempt = evaluation_attempt(folder)
        assert attempt >= 1 and attempt == evaluation_attempt(folder)
        assert evaluation_attempt(folder, 8) not in (attempt, evaluation_attempt(folder, 10))
        config = next(folder.iterdir())
        os.utime(config, ns=(1, config.stat().st_mtime_ns + 10**9))  # the folder was rewritten
        assert evaluation_attempt(folder) != attempt
    assert evaluation_attempt(full) != evaluation_attempt(adapter)
