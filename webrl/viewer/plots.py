"""The report's PNG plots (:mod:`webrl.runs.report`), drawn for the viewer in memory. Matplotlib's pyplot is not
thread-safe and the routes run in a thread pool, so plots are drawn one at a time; a plot is kept until its
input changes."""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webrl.runs.report import plot_calibration, plot_success

_LOCK = threading.Lock()
_CACHE: dict[str, bytes | None] = {}
CACHE_SIZE = 32  # plots kept (a run's success plot changes only when a phase records metrics)


def _drawn(key: str, draw: Callable[[Path], Path | None]) -> bytes | None:
    with _LOCK:
        if key not in _CACHE:
            with tempfile.TemporaryDirectory(prefix="webrl-plot-") as folder:
                out = draw(Path(folder) / "plot.png")
                _CACHE[key] = out.read_bytes() if out is not None else None
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
        return _CACHE[key]


def success_png(rows: list[dict[str, Any]]) -> bytes:
    """Test success per phase, overall and per site (``report.plot_success``) of the report's phase rows."""
    key = "success:" + json.dumps(rows, sort_keys=True, default=str)
    png = _drawn(key, lambda out: plot_success(rows, out))
    assert png is not None
    return png


def calibration_png(points: list[tuple[float, float]]) -> bytes | None:
    """The ORM's reliability diagram (``report.plot_calibration``); None when no ORM judged a scored trajectory."""
    return _drawn("calibration:" + json.dumps(points), lambda out: plot_calibration(points, out))
