"""Running trainer jobs: in this process, or under ``accelerate launch`` (DeepSpeed on GPUs).

``run_job(settings, job)`` is what the Celery tasks and the REST routes call, with a typed
:class:`~webrl.wire.contracts.PhaseJob`, :class:`~webrl.wire.contracts.SftJob` or
:class:`~webrl.wire.contracts.OrmHeadJob`. When ``settings.trainer.accelerate_config`` names an Accelerate config (e.g.
``configs/accelerate/deepspeed_zero3.yaml``) the job is written once as JSON and runs as
``accelerate launch --config_file <it> [--num_processes <settings.trainer.processes>] -m services.trainer.launch
<kind> <job.json> <result.json>``; its result is
read back from the JSON file the main process writes. Otherwise it runs here. An ORM head job always runs here:
it makes forward passes and fits a logistic head, nothing to shard.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, overload

from webrl.config import Settings
from webrl.process_group import run_process_group
from webrl.serving.paths import confined_path, is_configured_model, requested_model_file, requested_model_folder
from webrl.wire.contracts import InvalidRequest, OrmHeadJob, PhaseJob, PhaseResult, SftJob, SftResult, TrainJob

log = logging.getLogger("webrl.trainer.jobs")

JobKind = Literal["phase", "sft", "orm_head"]
JOB_TYPES: dict[JobKind, type[TrainJob]] = {"phase": PhaseJob, "sft": SftJob, "orm_head": OrmHeadJob}


def kind_of(job: TrainJob) -> JobKind:
    """The job's Celery task suffix (``train.<kind>``)."""
    return "phase" if isinstance(job, PhaseJob) else "sft" if isinstance(job, SftJob) else "orm_head"


def output_fields(job: TrainJob) -> dict[str, str]:
    """The job's fields that name where checkpoints are written (those given), by field name."""
    names = ("actor_output", "critic_output") if isinstance(job, PhaseJob) else ("output",)
    return {name: value for name in names if (value := getattr(job, name)) is not None}


def input_fields(job: TrainJob) -> dict[str, str]:
    """The job's fields that name model folders it loads (those given), by field name."""
    names = ("actor", "critic", "critic_base", "reference") if isinstance(job, PhaseJob) else ("base",)
    return {name: value for name in names if (value := getattr(job, name)) is not None}


def check_paths(settings: Settings, job: TrainJob) -> None:
    """Raise an :class:`~webrl.wire.contracts.InvalidRequest` naming the field unless every output path of ``job`` lies
    inside the artifacts store (a job replaces what is at its output, so it may write there only) and every model
    folder it loads is one a request may name and holds a model (:func:`~webrl.serving.paths.requested_model_folder`:
    loading runs a folder's pickles and code, and its error would tell whether any path exists; a phase job's
    ``critic`` also the heads of a saved critic), so a folder that holds none is refused before the job starts, not
    deep inside transformers. The configured models count as named (and are loaded as configured). The REST routes
    call this before enqueueing, :func:`run_job` before running. A phase job's outputs must keep apart from each
    other and from what it loads (:func:`_check_apart`), and its anchor loss needs its anchors."""
    outputs = {name: confined_path(settings, value, name) for name, value in output_fields(job).items()}
    configured = (settings.actor.model, settings.critic.model, settings.orm.model)
    inputs: dict[str, Path] = {}
    for name, value in input_fields(job).items():
        folder = inputs[name] = requested_model_folder(settings, value, name, configured=configured)
        if isinstance(job, PhaseJob) and name == "critic" and not is_configured_model(folder, configured):
            from webrl.models.critic import check_saved_critic  # lazily: torch

            check_saved_critic(folder, name, value)
    if isinstance(job, PhaseJob):
        _check_apart(outputs, inputs)
        if job.hyperparams.actor.anchor_kl > 0 and job.anchors is None:  # the update would fail after the critic's
            raise InvalidRequest("anchors", f"actor.anchor_kl is {job.hyperparams.actor.anchor_kl}: name the anchor "
                                 "steps it holds the policy on (`webrl probe anchors`)")
        for name, value in (("probe", job.probe), ("anchors", job.anchors)):
            if value is not None:
                requested_model_file(settings, value, name)


def _check_apart(outputs: dict[str, Path], inputs: dict[str, Path]) -> None:
    """A phase publishes its critic, then its actor, each replacing what is at its output: an output that is, holds
    or lies in the other output or a model the job loads would delete it (the critic it just published, or the
    actor a retry of the job starts from again)."""
    named = list(outputs.items())
    for i, (name, path) in enumerate(named):
        for other, other_path in [*named[:i], *inputs.items()]:
            if path == other_path or path.is_relative_to(other_path) or other_path.is_relative_to(path):
                raise InvalidRequest(name, f"{str(path)!r} overlaps {other} ({str(other_path)!r}): the phase "
                                     "replaces what is at its outputs; give each its own folder")


@contextmanager
def training_threads(settings: Settings) -> Iterator[None]:
    """torch's intra-op threads set to ``settings.trainer.threads`` (default: every core) while a job trains in this
    process, then restored: an embedded run may hold its policy calls to fewer threads
    (``WEBRL_MODELS__TORCH_THREADS``: they share the CPU with Chromium) but has the CPU to itself while it trains
    (a critic step of the demo: 1 thread vs 2, docs/measurements.md)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(settings.trainer.threads or default_threads() or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def default_threads() -> int | None:
    """Every core, shared among the processes of this machine under a multi-process launch (``LOCAL_WORLD_SIZE``,
    set by ``accelerate launch``), so that N ranks on one CPU do not run N x cores threads."""
    cores = os.cpu_count()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, cores // local) if cores else None


def run_here(settings: Settings, job: TrainJob) -> PhaseResult | SftResult | None:
    """Run the job in this process; its result (None on non-main processes of a multi-process launch). The memory
    its training freed goes back to the system afterwards (:func:`webrl.process_memory.return_freed_memory`): the
    process goes on (an embedded run's next rollouts, evaluation and phase; a worker's next job) and would keep the
    job's peak of activations and gradients resident otherwise."""
    from webrl.process_memory import return_freed_memory

    try:
        with training_threads(settings):
            return _run_here(settings, job)
    finally:
        return_freed_memory()


def _run_here(settings: Settings, job: TrainJob) -> PhaseResult | SftResult | None:
    if isinstance(job, PhaseJob):
        from services.trainer.phase import run_phase

        trained = run_phase(settings, job)
        return trained.result() if trained is not None else None
    if isinstance(job, OrmHeadJob):
        from services.trainer.orm_head_fit import run_orm_head

        info = run_orm_head(settings, job)
    else:
        from services.trainer.sft import run_sft

        info = run_sft(settings, job)
    if info is None:
        return None
    return SftResult(path=info.path, version=info.version, sha256=info.sha256, metrics=info.metrics)


def launch_command(config_file: Path, kind: JobKind, job_file: Path, result_file: Path,
                   processes: int | None = None) -> list[str]:
    """The ``accelerate launch`` command line for a job, on ``processes`` processes (None: the config's)."""
    count = ["--num_processes", str(processes)] if processes else []
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_file), *count,
            "-m", "services.trainer.launch", kind, str(job_file), str(result_file)]


@overload
def run_job(settings: Settings, job: PhaseJob) -> PhaseResult: ...
@overload
def run_job(settings: Settings, job: SftJob | OrmHeadJob) -> SftResult: ...
def run_job(settings: Settings, job: TrainJob) -> PhaseResult | SftResult:
    """Run a trainer job here, or under ``accelerate launch`` when an Accelerate config is set. Paths a request
    may not name are refused first (:func:`check_paths`)."""
    check_paths(settings, job)
    if settings.trainer.accelerate_config is None or isinstance(job, OrmHeadJob):
        result = run_here(settings, job)
        assert result is not None  # a single process is the main process
        return result
    kind = kind_of(job)
    result_type = PhaseResult if kind == "phase" else SftResult
    with tempfile.TemporaryDirectory(prefix="webrl-train-") as tmp:
        job_file, result_file = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job_file.write_text(job.model_dump_json())
        command = launch_command(settings.trainer.accelerate_config, kind, job_file, result_file,
                                 settings.trainer.processes)
        log.info("launching %s", " ".join(command))
        run_process_group(command)  # a job stopped midway stops its ranks too
        return result_type.model_validate_json(result_file.read_text())
