"""webrl.runs.tracking: what a stream writes is what TensorBoard's own reader reads back; `--log-with` a tracker whose
package is missing is a one-line CLI error naming it; the run's tracking reaches the trainer's job."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from webrl.config import Settings
from webrl.runs.tracking import Tracker, missing_package, quantiles, read_stream, tracking_dir
from webrl.wire.contracts import TrackingSpec


def test_scalars_keep_finite_numbers_and_histograms_every_value(settings: Settings) -> None:
    from tensorboard.backend.event_processing import event_accumulator

    with Tracker(settings, TrackingSpec(run="r"), "pipeline") as tracker:
        for phase, success in enumerate([0.25, 0.5]):
            tracker.scalars({"success": success, "n": 8, "judge": "evaluators", "subset": True, "solved": ["k"],
                             "orm_accuracy": None, "kl": float("nan")}, step=phase, prefix="evaluate/")
        tracker.histogram("advantage/binarised", [1.0, -0.6, -0.6, 1.0, 1.0], step=1)
    folder = tracking_dir(settings, "r") / "pipeline"
    scalars, histograms = read_stream(folder)
    assert scalars == {"evaluate/success": [(0, 0.25), (1, 0.5)], "evaluate/n": [(0, 8.0), (1, 8.0)]}
    assert histograms == {"advantage/binarised": [1]}
    accumulator = event_accumulator.EventAccumulator(str(folder))
    accumulator.Reload()
    histogram = accumulator.Histograms("advantage/binarised")[0].histogram_value
    assert (histogram.num, histogram.min, histogram.max) == (5, -0.6, 1.0)
    assert histogram.sum == pytest.approx(3 * 1.0 - 2 * 0.6)


def test_a_stream_that_logs_nothing_writes_no_file(settings: Settings) -> None:
    with Tracker(settings, TrackingSpec(run="quiet"), "pipeline") as tracker:
        tracker.scalars({"judge": "evaluators"}, step=0)
    assert not tracking_dir(settings, "quiet").exists()  # a resumed run with nothing left to do adds no files


def test_quantiles_are_nearest_rank() -> None:
    assert quantiles([3.0, 1.0, 2.0, 5.0, 4.0]) == {"p0": 1.0, "p10": 1.0, "p50": 3.0, "p90": 5.0, "p100": 5.0}


@pytest.mark.parametrize("log_with", ["wandb", "mlflow"])
def test_log_with_a_missing_tracker_is_a_one_line_error_naming_its_package(settings: Settings, tmp_path: Path,
                                                                           log_with: str) -> None:
    if importlib.util.find_spec(log_with) is not None:
        pytest.skip(f"{log_with} is installed here")
    from webrl.cli import app

    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--log-with", log_with])
    assert result.exit_code == 2
    assert f"needs the '{log_with}' package" in result.output and f"webrl[{log_with}]" in result.output
    assert missing_package("tensorboard") is None  # the default is a dependency


def test_a_run_name_that_cannot_be_a_folder_is_refused(settings: Settings, tmp_path: Path) -> None:
    from webrl.cli import app

    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--run", "../elsewhere"])
    assert result.exit_code == 2 and "--run" in result.output
