"""Running trainer jobs: in this process, or under ``accelerate launch`` (DeepSpeed on GPUs).

``run_job(settings, kind, payload)`` is what the Celery tasks call. When ``settings.trainer_accelerate_config``
names an Accelerate config (e.g. ``configs/accelerate/deepspeed_zero3.yaml``) the job runs as
``accelerate launch --config_file <it> -m services.trainer.cli <kind> <payload.json> <result.json>`` and its
result is read back from the JSON file the main process writes; otherwise it runs here.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from webrl.config import Settings

log = logging.getLogger("webrl.trainer.jobs")

JobKind = Literal["phase", "sft"]


def run_here(settings: Settings, kind: JobKind, payload: dict[str, Any]) -> dict[str, Any] | None:
    """Run the job in this process; the JSON result (None on non-main processes of a multi-process launch)."""
    if kind == "phase":
        from services.trainer.phase import PhaseJob, run_phase

        result = run_phase(settings, PhaseJob.model_validate(payload))
        return result.to_json() if result is not None else None
    from services.trainer.sft import SftJob, run_sft

    info = run_sft(settings, SftJob.model_validate(payload))
    if info is None:
        return None
    return {"path": info.path, "version": info.version, "sha256": info.sha256, "metrics": info.metrics}


def launch_command(config_file: Path, kind: JobKind, payload_file: Path, result_file: Path) -> list[str]:
    """The ``accelerate launch`` command line for a job."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file),
            "-m", "services.trainer.cli", kind, str(payload_file), str(result_file)]


def run_job(settings: Settings, kind: JobKind, payload: dict[str, Any]) -> dict[str, Any]:
    """Run a trainer job here, or under ``accelerate launch`` when an Accelerate config is set."""
    if settings.trainer_accelerate_config is None:
        result = run_here(settings, kind, payload)
        assert result is not None  # a single process is the main process
        return result
    with tempfile.TemporaryDirectory(prefix="webrl-train-") as tmp:
        payload_file, result_file = Path(tmp) / "payload.json", Path(tmp) / "result.json"
        payload_file.write_text(json.dumps(payload))
        command = launch_command(settings.trainer_accelerate_config, kind, payload_file, result_file)
        log.info("launching %s", " ".join(command))
        subprocess.run(command, check=True)
        return json.loads(result_file.read_text())
