"""Training metrics where people look for them: TensorBoard event files under the artifacts (the default), or
W&B / MLflow when their optional extra is installed and selected (``webrl train --log-with``).

A :class:`Tracker` is one stream of a run, written through Accelerate's trackers (``accelerate.tracking``, the
classes behind ``Accelerator(log_with=...)``):

- ``pipeline``: one point per phase (x = phase): every numeric stage metric as ``<stage>/<name>``: test success
  overall and per site, ORM accuracy, reward rate, the phase's losses, KL, beta, tokens/s, stage seconds;
- ``phase-<i>/critic`` and ``phase-<i>/actor``: one point per optimizer step of that phase's training (losses,
  KL, beta, learning rate, grad norm, tokens/s), and the distributions of V(s) and the advantages.

TensorBoard: ``tensorboard --logdir <artifacts>/tensorboard`` lists them as ``<run>/pipeline``,
``<run>/phase-1/actor``, ... W&B: project ``webrl``, one run per stream grouped by the run's name. MLflow: one
experiment per run (``MLFLOW_TRACKING_URI`` as mlflow reads it), one MLflow run per stream.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

from webrl.config import Settings
from webrl.wire.contracts import LogWith, TrackingSpec

#: The choices of ``--log-with``, the default first.
LOG_WITH: tuple[str, ...] = get_args(LogWith)
#: The package each tracker needs (tensorboard is a dependency; wandb and mlflow are the extras of those names).
PACKAGES: dict[str, str] = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
#: The W&B project every webrl run logs to (runs are grouped by the webrl run's name).
WANDB_PROJECT = "webrl"
#: Quantiles a tracker without histograms (MLflow) gets of a distribution instead.
QUANTILES = (0.0, 0.1, 0.5, 0.9, 1.0)


class TrackerUnavailable(RuntimeError):
    """The selected tracker's package is not installed."""


def missing_package(log_with: str) -> str | None:
    """Why ``log_with`` cannot be used here (its package is not installed), in one line; None when it can."""
    package = PACKAGES[log_with]
    if importlib.util.find_spec(package) is None:
        extra = "tensorboard" if log_with == "tensorboard" else f"'webrl[{log_with}]'"
        return f"--log-with {log_with} needs the {package!r} package, which is not installed: pip install {extra}"
    return None


def tracking_dir(settings: Settings, run: str) -> Path:
    """Where a run's TensorBoard streams live: ``<artifacts>/tensorboard/<run>/`` (beside ``reports/<run>/``)."""
    assert settings.artifacts_dir is not None
    return settings.artifacts_dir / "tensorboard" / run


def numeric(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of ``values`` (no bools, strings, lists or None), keys prefixed."""
    return {f"{prefix}{key}": float(value) for key, value in values.items()
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)}


def quantiles(values: Sequence[float]) -> dict[str, float]:
    """``{"p0": min, "p10": ..., "p100": max}`` of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return {f"p{round(100 * q)}": ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in QUANTILES}


def _backend(settings: Settings, spec: TrackingSpec, stream: str) -> Any:
    """The Accelerate tracker of ``spec.log_with`` for one stream (not started)."""
    problem = missing_package(spec.log_with)
    if problem:
        raise TrackerUnavailable(problem)
    from accelerate import tracking

    if spec.log_with == "wandb":
        assert settings.artifacts_dir is not None
        return tracking.WandBTracker(WANDB_PROJECT, name=f"{spec.run}/{stream}", group=spec.run,
                                     dir=str(settings.artifacts_dir))
    if spec.log_with == "mlflow":
        return tracking.MLflowTracker(experiment_name=spec.run, run_name=stream)
    return tracking.TensorBoardTracker(stream, tracking_dir(settings, spec.run))


class Tracker:
    """One stream of a run's metrics. Opens its backend on the first value (a resumed run that logs nothing
    leaves no empty file behind); use as a context manager or :meth:`close` it."""

    def __init__(self, settings: Settings, spec: TrackingSpec, stream: str) -> None:
        self.settings, self.spec, self.stream = settings, spec, stream
        self._backend: Any = None

    def _started(self) -> Any:
        if self._backend is None:
            self._backend = _backend(self.settings, self.spec, self.stream)
            self._backend.start()
        return self._backend

    def scalars(self, values: Mapping[str, Any], step: int, prefix: str = "") -> None:
        """Log the numeric entries of ``values`` at ``step`` as ``<prefix><name>``; the rest is skipped."""
        points = numeric(values, prefix)
        if points:
            self._started().log(points, step=step)

    def step_hook(self, prefix: str) -> Callable[[int, Mapping[str, Any]], None]:
        """``(step, metrics) -> None`` for the training loop's ``on_step``."""
        return lambda step, metrics: self.scalars(metrics, step, prefix)

    def histogram(self, tag: str, values: Sequence[float], step: int) -> None:
        """The distribution of ``values`` at ``step``: a histogram in TensorBoard and W&B, quantile scalars
        (``<tag>/p0`` ... ``<tag>/p100``) in MLflow, which has no histograms."""
        if not values:
            return
        backend = self._started()
        if self.spec.log_with == "tensorboard":
            import numpy as np

            backend.tracker.add_histogram(tag, np.asarray(values, dtype=np.float64), global_step=step)
            backend.tracker.flush()
        elif self.spec.log_with == "wandb":
            import wandb

            backend.log({tag: wandb.Histogram(list(values))}, step=step)
        else:
            backend.log({f"{tag}/{name}": v for name, v in quantiles(values).items()}, step=step)

    def close(self) -> None:
        if self._backend is not None:
            self._backend.finish()
            self._backend = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_stream(folder: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[int]]]:
    """One TensorBoard stream read back with TensorBoard's own event reader: ``({tag: [(step, value), ...]},
    {histogram tag: [step, ...]})``, steps ascending (every event file of the folder, as TensorBoard merges them)."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {tag: sorted((e.step, e.value) for e in accumulator.Scalars(tag)) for tag in tags["scalars"]}
    histograms = {tag: sorted(e.step for e in accumulator.Histograms(tag)) for tag in tags["histograms"]}
    return scalars, histograms
