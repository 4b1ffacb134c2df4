"""What the settle rule costs per step: three rules in the same run, alternating so machine load hits all alike.

- "DOM + fetch quiet" (``DOM_ONLY_SETTLE``, the earlier rule): 25 ms of DOM quiet from the observation's start
  and no fetch/XHR in flight;
- "+ timers, media" (``QUIET_PER_CALL_SETTLE``): also short page timers, images in the viewport, web fonts and
  transitions, still 25 ms of quiet from the observation's start;
- "quiet since last change" (``SETTLE``, the pool's rule): the same waits, but the quiet window counts from the
  page's last DOM mutation (inflight.js records it), plus one frame when the page has animation-frame
  callbacks pending.

Two measurements:
- sandbox steps: the oracle's episodes on held-out sandbox tasks, each task run once per rule; a step is the
  action plus the observation after it;
- static pages: observing the browser-pool test fixtures (third-party-like pages) again and again, unchanged.

    .venv/bin/python bench/settle.py [--tasks 8] [--repeats 5]

Prints the median and mean milliseconds per step for each rule and their ratios to the first.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.browser_pool.act import execute  # noqa: E402
from services.browser_pool.episode import BrowserEpisode  # noqa: E402
from services.browser_pool.observe import (  # noqa: E402
    DOM_ONLY_SETTLE,
    QUIET_PER_CALL_SETTLE,
    SETTLE,
    SettleRule,
    observe_view,
)
from services.browser_pool.pool import BrowserPool  # noqa: E402
from webrl.agent.actions import ActionType, parse_action  # noqa: E402
from webrl.agent.early_stop import MAX_STEPS  # noqa: E402
from webrl.agent.policy import PolicyRequest  # noqa: E402
from webrl.agent.schemas import Step, TaskConfig  # noqa: E402
from webrl.config import Settings  # noqa: E402

FIXTURES = REPO / "tests" / "services" / "browser_pool" / "fixtures"
STATIC_PAGES = ("elements.html", "actions.html", "wrapper.html", "icons.html", "longvalue.html",
                "multiselect.html", "dates.html", "pagination.html")
RULES = {"DOM + fetch quiet": DOM_ONLY_SETTLE, "+ timers, media": QUIET_PER_CALL_SETTLE,
         "quiet since last change": SETTLE}


async def oracle_steps(pool: BrowserPool, task: TaskConfig, settings: Settings, rule: SettleRule) -> list[float]:
    """Milliseconds per step (action + observation under ``rule``) of one oracle episode on ``task``."""
    from webrl.sandbox.oracles import OraclePolicy

    oracle, times, history = OraclePolicy(), [], []
    episode = await BrowserEpisode.open(pool, task, settings)
    try:
        view = await observe_view(episode.active, settle_rule=rule)
        for index in range(MAX_STEPS):
            request = PolicyRequest(task=episode.task, intent=task.intent, observation=view.observation,
                                    history=history)
            response = (await oracle.act([request]))[0]
            action = parse_action(response.response)
            if action.type is ActionType.EXIT:
                break
            before, start = view.observation, time.perf_counter()
            await execute(episode.active, action, view.elements)
            view = await observe_view(episode.active, settle_rule=rule)
            times.append((time.perf_counter() - start) * 1000)
            history.append(Step(index=index, observation=before, response=response.response, action=action))
    finally:
        await episode.close()
    return times


async def sandbox_steps(settings: Settings, tasks: list[TaskConfig]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in RULES}
    async with BrowserPool(settings, size=1) as pool:
        for i, task in enumerate(tasks):
            order = list(RULES)[i % len(RULES):] + list(RULES)[:i % len(RULES)]
            for name in order:
                out[name] += await oracle_steps(pool, task, settings, RULES[name])
    return out


async def static_observations(settings: Settings, base_url: str, repeats: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in RULES}
    async with BrowserPool(settings, size=1) as pool:
        for page_name in STATIC_PAGES:
            url = f"{base_url}/{page_name}"
            task = TaskConfig(task_id=page_name, sites=["wikipedia"], intent="look at the page", start_url=url)
            episode = await BrowserEpisode.open(pool, task, settings)
            try:
                for r in range(repeats):
                    for name in list(RULES)[r % len(RULES):] + list(RULES)[:r % len(RULES)]:
                        start = time.perf_counter()
                        await observe_view(episode.active, settle_rule=RULES[name])
                        out[name].append((time.perf_counter() - start) * 1000)
            finally:
                await episode.close()
    return out


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # no access log between the results
        pass


def serve_fixtures() -> tuple[ThreadingHTTPServer, str]:
    handler = functools.partial(QuietHandler, directory=str(FIXTURES))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


def fixture_settings(prefix: str, url: str) -> Settings:
    """Settings in a fresh temporary home (SQLite) whose browsers may reach the fixture server at ``url``."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    return Settings(home=home, database={"url": f"sqlite:///{home / 'webrl.db'}"},
                    security={"allowed_hosts": [url.split("//", 1)[1]]})


def report(title: str, times: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    first = times[next(iter(RULES))]
    print(f"{'rule':<26}{'n':>6}{'median ms':>11}{'mean ms':>9}{'median / first':>16}{'mean / first':>14}")
    for name, values in times.items():
        print(f"{name:<26}{len(values):>6}{statistics.median(values):>11.1f}{statistics.mean(values):>9.1f}"
              f"{statistics.median(values) / statistics.median(first):>16.2f}"
              f"{statistics.mean(values) / statistics.mean(first):>14.2f}")


def main(n_tasks: int, repeats: int) -> None:
    from webrl.db.migrate import upgrade
    from webrl.sandbox.server import running_sandbox
    from webrl.sandbox.tasks.suite import build_suite

    home = Path(tempfile.mkdtemp(prefix="bench-settle-"))
    base = Settings(home=home, database={"url": f"sqlite:///{home / 'webrl.db'}"}, browser={"step_timeout_s": 30.0})
    upgrade(base)
    tasks = build_suite(0)["test"][:n_tasks]
    with running_sandbox(base) as running:
        steps = asyncio.run(sandbox_steps(running, tasks))
    server, url = serve_fixtures()
    try:
        fixture_settings = base.replace(security={"allowed_hosts": [url.split("//", 1)[1]]})
        static = asyncio.run(static_observations(fixture_settings, url, repeats))
    finally:
        server.shutdown()
    report(f"sandbox: {n_tasks} held-out tasks, oracle policy, action + observation per step", steps)
    report(f"static fixture pages ({len(STATIC_PAGES)}), observation of an unchanged page", static)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8, help="held-out sandbox tasks, each run once per rule")
    parser.add_argument("--repeats", type=int, default=5, help="observations per fixture page and rule")
    args = parser.parse_args()
    main(args.tasks, args.repeats)


if __name__ == "__main__":
    cli()
