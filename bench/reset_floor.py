"""Where an episode's time goes, layer by layer: bare Playwright with one reused page, then each thing the browser
pool adds to it, cumulatively, up to the pool itself, in the same run.

Every system runs the same episodes on the static fixture pages (``bench/browser_pool.py``'s page set): open the
start page, ``--steps`` scrolls, end. The layers, each on top of the one before:

1. ``bare page``: goto, bare ``scrollBy`` calls (no observation), the page reused by the next episode as it is;
2. ``+ init scripts``: inflight.js and observe.js on every new document (``INIT_JS``);
3. ``+ allow-list route``: the context's request route for hosts off the list (``AllowList.route``);
4. ``+ navigation guard``: every request paused and checked (``NavigationGuard``);
5. ``+ allow-list proxy``: the browser's every connection through an allow-list proxy in this process
   (``AllowListProxy``; the ratio of this layer to the one before is the proxy's cost);
6. ``+ observations``: an observation (``observe_view``: settling, observe.js, tab titles) at the start and
   after every step;
7. ``+ scrub navigation``: the page sent to ``about:blank`` after the episode (its unload handlers run there,
   before the storage is cleared: ``stage.py``);
8. ``+ storage clears``: history, cookies, the origin's storage, the HTTP cache (the rest of the scrub): the floor
   of any episode that observes and leaves nothing of itself to the next one;
9. ``webrl warm``: ``BrowserEpisode`` on a warm ``BrowserPool`` (the stock, the freeze, the bookkeeping).

Systems alternate within each round; the table gives each one's median ms per episode (over rounds) and its ratio to
the bare page, which is the reset target's reference (steps/s including resets within 2x of it).

    .venv/bin/python bench/reset_floor.py [--rounds 3] [--episodes 16] [--steps 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from browser_pool import SCRIPT, ResetRun, episodes_webrl, serve_fixtures, static_tasks  # noqa: E402

from services.browser_pool.observe import INIT_JS, observe_view  # noqa: E402
from services.browser_pool.pool import CHROMIUM_ARGS, BrowserPool  # noqa: E402
from services.browser_pool.safety import AllowList  # noqa: E402
from services.browser_pool.stage import VIEWPORT  # noqa: E402
from webrl.agent.schemas import TaskConfig  # noqa: E402
from webrl.config import Settings  # noqa: E402
from webrl.safety.allow_list import origin  # noqa: E402
from webrl.safety.allow_list_proxy import AllowListProxy  # noqa: E402
from webrl.safety.navigation_guard import NavigationGuard  # noqa: E402

LAYERS = ("bare page", "+ init scripts", "+ allow-list route", "+ navigation guard", "+ allow-list proxy",
          "+ observations", "+ scrub navigation", "+ storage clears")
SYSTEMS = (*LAYERS, "webrl warm")


class LayeredPage:
    """One browser, context and reused page with the first ``depth`` layers of :data:`LAYERS` switched on."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def on(self, layer: str) -> bool:
        return LAYERS.index(layer) < self.depth

    async def open(self, playwright, settings: Settings) -> None:  # type: ignore[no-untyped-def]
        allowed = settings.host_allow_list()
        self.proxy = await AllowListProxy(allowed).start() if self.on("+ allow-list proxy") else None
        proxy_args = self.proxy.chromium_args() if self.proxy is not None else []
        self.browser = await playwright.chromium.launch(executable_path=settings.browser.chromium_path,
                                                        args=[*CHROMIUM_ARGS, *proxy_args])
        self.context = await self.browser.new_context(viewport=VIEWPORT)
        if self.on("+ init scripts"):
            await self.context.add_init_script(INIT_JS)
        if self.on("+ allow-list route"):
            await AllowList(allowed).route(self.context)
        if self.on("+ navigation guard"):
            await NavigationGuard.on_browser(self.browser, allowed)
        self.page = await self.context.new_page()
        self.cdp = await self.context.new_cdp_session(self.page)

    async def episode(self, task: TaskConfig, steps: int) -> None:
        page = self.page
        await page.goto(task.start_url, wait_until="load")
        observe = self.on("+ observations")
        if observe:
            await observe_view(page)
        for index in range(steps):
            sign = 1 if SCRIPT[index % len(SCRIPT)].value == "Scroll Down" else -1
            await page.evaluate(f"window.scrollBy(0, {sign} * window.innerHeight * 2 / 3)")
            await page.wait_for_load_state("load")
            if observe:
                await observe_view(page)
        if self.on("+ scrub navigation"):
            await page.goto("about:blank")
        if self.on("+ storage clears"):
            await self.cdp.send("Page.resetNavigationHistory")
            await asyncio.gather(self.context.clear_cookies(), self.cdp.send("Network.clearBrowserCache"),
                                 self.cdp.send("Storage.clearDataForOrigin",
                                               {"origin": origin(task.start_url), "storageTypes": "all"}))

    async def run(self, tasks: list[TaskConfig], steps: int, run: ResetRun) -> None:
        start = time.perf_counter()
        for task in tasks:
            await self.episode(task, steps)
        run.steps += len(tasks) * steps
        run.wall_s += time.perf_counter() - start

    async def close(self) -> None:
        await self.browser.close()
        if self.proxy is not None:
            await self.proxy.close()


async def bench(settings: Settings, tasks: list[TaskConfig], rounds: int, steps: int) -> dict[str, list[float]]:
    """Milliseconds per episode of each system, one number per round."""
    from playwright.async_api import async_playwright

    per_round: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    async with async_playwright() as playwright, BrowserPool(settings, size=1) as pool:
        layered = {name: LayeredPage(depth) for depth, name in enumerate(LAYERS, start=1)}
        for page in layered.values():
            await page.open(playwright, settings)

        async def one(system: str, episodes: list[TaskConfig], run: ResetRun) -> None:
            if system == "webrl warm":
                await episodes_webrl(pool, episodes, settings, steps, run)
            else:
                await layered[system].run(episodes, steps, run)

        for system in SYSTEMS:  # warm-up: one episode each
            await one(system, tasks[:1], ResetRun())
        for r in range(rounds):
            order = SYSTEMS[r % len(SYSTEMS):] + SYSTEMS[:r % len(SYSTEMS)]
            for system in order:
                run = ResetRun()
                await one(system, tasks, run)
                per_round[system].append(run.wall_s * 1000 / len(tasks))
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
        for page in layered.values():
            await page.close()
    return per_round


def report(per_round: dict[str, list[float]], episodes: int, steps: int) -> None:
    bare = statistics.median(per_round["bare page"])
    print(f"\n{episodes} episodes of {steps} scrolls on static fixture pages per system and round; median over rounds")
    print(f"{'system':<22}{'ms / episode':>14}{'added ms':>10}{'x bare page':>13}")
    previous = None
    for system in SYSTEMS:
        ms = statistics.median(per_round[system])
        added = "" if previous is None else f"{ms - previous:+.1f}"
        print(f"{system:<22}{ms:>14.1f}{added:>10}{ms / bare:>13.2f}")
        previous = ms if system != "webrl warm" else previous


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=16, help="episodes per system and round")
    parser.add_argument("--steps", type=int, default=4, help="scrolls per episode")
    args = parser.parse_args()
    server, base_url = serve_fixtures()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-floor-") as home:
            host = base_url.split("//", 1)[1]
            settings = Settings(home=Path(home))
            settings = settings.replace(security={"allowed_hosts": [*settings.host_allow_list(), host]})
            per_round = asyncio.run(bench(settings, static_tasks(base_url, args.episodes), args.rounds, args.steps))
    finally:
        server.terminate()
        server.wait(timeout=30)
    report(per_round, args.episodes, args.steps)


if __name__ == "__main__":
    cli()
