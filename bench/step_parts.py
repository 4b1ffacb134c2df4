"""Where one environment step's time goes: a scroll step on static fixture pages, part by part, in the same run.

Per page and step, in this order: a bare round trip (``page.evaluate("1")``); the Scroll action alone
(``act.execute``); a bare ``scrollBy`` (what a loop that takes no observation does); the load-state check; the
observation (``observe_view``: settling, the DOM walk, the tab titles) with the settle time it reports; and a whole
``BrowserEpisode.step`` (action + observation). Each part's median is printed with its ratio to the bare round
trip and to the bare scroll, so the floor of an observing step is plain to see.

    .venv/bin/python bench/step_parts.py [--steps 60] [--pages actions.html pagination.html]
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

from services.browser_pool.act import execute  # noqa: E402
from services.browser_pool.episode import BrowserEpisode  # noqa: E402
from services.browser_pool.observe import observe_view, settle  # noqa: E402
from services.browser_pool.pool import BrowserPool  # noqa: E402
from webrl.agent.actions import parse_action  # noqa: E402
from webrl.agent.schemas import TaskConfig  # noqa: E402
from webrl.config import Settings  # noqa: E402

PARTS = ("round trip", "scroll action", "bare scrollBy", "load-state check", "observation", "  of it settling",
         "whole step")
SCROLLS = ("Scroll Down", "Scroll Up")


async def _timed(out: list[float], call) -> object:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = await call
    out.append((time.perf_counter() - start) * 1000)
    return result


async def time_parts(settings: Settings, base_url: str, pages: list[str],
                     steps: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    async with BrowserPool(settings, size=1) as pool:
        for name in pages:
            task = TaskConfig(task_id=name, sites=["wikipedia"], intent="look at the page",
                              start_url=f"{base_url}/{name}")
            episode = await BrowserEpisode.open(pool, task, settings)
            times: dict[str, list[float]] = {part: [] for part in PARTS}
            try:
                page = episode.active
                for i in range(steps):
                    action = parse_action(f'do(action="{SCROLLS[i % 2]}")')
                    await _timed(times["round trip"], page.evaluate("1"))
                    await _timed(times["scroll action"], execute(page, action, episode.elements))
                    await _timed(times["bare scrollBy"], page.evaluate(f"window.scrollBy(0, {1 - 2 * (i % 2)} * 480)"))
                    await _timed(times["load-state check"], settle(page))
                    view = await _timed(times["observation"], observe_view(page))
                    times["  of it settling"].append(view.settle_ms)  # type: ignore[attr-defined]
                    await _timed(times["whole step"], episode.step(f'do(action="{SCROLLS[(i + 1) % 2]}")'))
            finally:
                await episode.close()
            out[name] = times
    return out


def main(steps: int, pages: list[str]) -> None:
    server, url = serve_fixtures()
    try:
        settings = fixture_settings("bench-step-parts-", url)
        results = asyncio.run(time_parts(settings, url, pages, steps))
    finally:
        server.shutdown()
    print(f"\nscroll steps on static fixture pages, {steps} per page, parts timed in the same step (p50 ms)")
    print(f"{'page':<20}{'part':<20}{'p50 ms':>9}{'/ round trip':>14}{'/ bare scrollBy':>17}")
    for name, times in results.items():
        trip, bare = statistics.median(times["round trip"]), statistics.median(times["bare scrollBy"])
        for part in PARTS:
            p50 = statistics.median(times[part])
            print(f"{name:<20}{part:<20}{p50:>9.2f}{p50 / trip:>14.2f}{p50 / bare:>17.2f}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="scroll steps per page")
    parser.add_argument("--pages", nargs="+", default=["actions.html", "pagination.html"], choices=STATIC_PAGES,
                        help="browser-pool fixture pages")
    args = parser.parse_args()
    main(args.steps, args.pages)


if __name__ == "__main__":
    cli()
