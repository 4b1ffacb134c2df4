"""What one observation call costs: observe.js installed once per document (the pool's init script defines
``window.__webrlObserve``; each call sends a one-line function) against sending the whole script with every call
(what the pool did before commit caab667, 2026-11-26), alternating on the same unchanged page, in the same run.

On each browser-pool fixture page (third-party-like static pages) it times, per round:
- "round trip": ``page.evaluate("1")``, the floor of any call;
- "whole script per call": ``page.evaluate(OBSERVE_JS, opts)``;
- "installed once": ``page.evaluate(CALL_OBSERVE_JS, opts)``, what ``observe_view`` sends now.

    .venv/bin/python bench/observe_call.py [--repeats 30]

Prints the median and mean milliseconds per call and each one's ratio to the whole script per call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from settle import STATIC_PAGES, fixture_settings, serve_fixtures  # noqa: E402

from services.browser_pool.episode import BrowserEpisode  # noqa: E402
from services.browser_pool.observe import (  # noqa: E402
    CALL_OBSERVE_JS,
    MAX_FIELD_CHARS,
    MAX_OPTIONS,
    MAX_TEXT_CHARS,
    MAX_VALUE_CHARS,
    OBSERVE_JS,
    SETTLE,
)
from services.browser_pool.pool import BrowserPool  # noqa: E402
from webrl.agent.schemas import TaskConfig  # noqa: E402
from webrl.config import Settings  # noqa: E402

BASELINE = "whole script per call"
CALLS = {"round trip": ("1", None), BASELINE: (OBSERVE_JS, True), "installed once": (CALL_OBSERVE_JS, True)}
OPTIONS = {**SETTLE.options(), "maxText": MAX_TEXT_CHARS, "maxValue": MAX_VALUE_CHARS, "maxField": MAX_FIELD_CHARS,
           "maxOptions": MAX_OPTIONS, "bbox": False, "paths": False}


async def time_calls(settings: Settings, base_url: str, repeats: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in CALLS}
    async with BrowserPool(settings, size=1) as pool:
        for page_name in STATIC_PAGES:
            task = TaskConfig(task_id=page_name, sites=["wikipedia"], intent="look at the page",
                              start_url=f"{base_url}/{page_name}")
            episode = await BrowserEpisode.open(pool, task, settings)
            try:
                page = episode.active
                for r in range(repeats):
                    for name in list(CALLS)[r % len(CALLS):] + list(CALLS)[:r % len(CALLS)]:
                        script, with_options = CALLS[name]
                        start = time.perf_counter()
                        result = await (page.evaluate(script, OPTIONS) if with_options else page.evaluate(script))
                        out[name].append((time.perf_counter() - start) * 1000)
                        assert result is not None, f"{name} returned nothing on {page_name}"
            finally:
                await episode.close()
    return out


def main(repeats: int) -> None:
    server, url = serve_fixtures()
    try:
        settings = fixture_settings("bench-observe-call-", url)
        times = asyncio.run(time_calls(settings, url, repeats))
    finally:
        server.shutdown()
    base = times[BASELINE]
    print(f"\n{len(STATIC_PAGES)} static fixture pages x {repeats} rounds, calls alternating")
    print(f"{'call':<24}{'n':>6}{'median ms':>11}{'mean ms':>9}{'median / whole':>16}{'mean / whole':>14}")
    for name, values in times.items():
        print(f"{name:<24}{len(values):>6}{statistics.median(values):>11.2f}{statistics.mean(values):>9.2f}"
              f"{statistics.median(values) / statistics.median(base):>16.2f}"
              f"{statistics.mean(values) / statistics.mean(base):>14.2f}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="rounds per fixture page (each times every call)")
    main(parser.parse_args().repeats)


if __name__ == "__main__":
    cli()
