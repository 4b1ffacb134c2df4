"""Browser-pool throughput: environment steps/s on sandbox tasks with the oracle policy.

For pool sizes 1, 2, 4 and 8 (one episode per browser, ``run_batch``), steps/s including resets and
evaluation, as ratios against one episode at a time (size 1) and against the floor: the bare Playwright
calls of the same actions (recorded from an oracle run, replayed by CSS path on one browser, a fresh
context per episode) with no observation extraction, no evaluation and no policy.

    .venv/bin/python bench/browser_pool.py [--tasks 12] [--sizes 1,2,4,8]

The sandbox sites run in a child process so the uvicorn threads do not share this process's GIL with the
Playwright client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.browser_pool.episode import VIEWPORT, BrowserEpisode, _episode_cookies, _login_cookies  # noqa: E402
from services.browser_pool.observe import observe_view  # noqa: E402
from services.browser_pool.pool import BrowserPool  # noqa: E402
from services.browser_pool.runs import run_batch  # noqa: E402
from webrl.actions import ActionType, parse_action  # noqa: E402
from webrl.agent.policy import PolicyRequest  # noqa: E402
from webrl.config import SITE_PLACEHOLDERS, Settings  # noqa: E402
from webrl.schemas import Step, TaskConfig  # noqa: E402

CSS_PATH_JS = """el => { const parts = [];
  for (let e = el; e && e.nodeType === 1 && e !== document.documentElement; e = e.parentElement) {
    let i = 1; for (let s = e.previousElementSibling; s; s = s.previousElementSibling) if (s.tagName === e.tagName) i++;
    parts.unshift(`${e.tagName.toLowerCase()}:nth-of-type(${i})`); }
  return 'html > ' + parts.join(' > '); }"""


@dataclass
class Recorded:
    """One action of an oracle run, addressed by CSS path so it can be replayed without observations."""

    kind: ActionType
    path: str | None
    argument: str | None


def serve_sandbox(home: str) -> None:
    """Child process: run the sandbox, print its site URLs as JSON, serve until stdin closes."""
    from webrl.sandbox.server import running_sandbox

    with running_sandbox(Settings(home=Path(home))) as running:
        print(json.dumps({site: running.site_url(site) for site in SITE_PLACEHOLDERS}), flush=True)
        sys.stdin.read()


async def record(tasks: list[TaskConfig], settings: Settings) -> tuple[list[list[Recorded]], list[float]]:
    """Run the oracle once per task (warming the sandbox), recording each action's target by CSS path, and
    time bare observations of each start page."""
    from webrl.sandbox.oracles import OraclePolicy

    oracle, scripts, observe_ms = OraclePolicy(), [], []
    async with BrowserPool(settings, size=1) as pool:
        for task in tasks:
            episode = await BrowserEpisode.open(pool, task, settings)
            for _ in range(3):
                start = time.perf_counter()
                await observe_view(episode.active)
                observe_ms.append((time.perf_counter() - start) * 1000)
            await episode.refresh()
            script, history = [], []
            for index in range(30):
                obs = episode.observation
                request = PolicyRequest(task=episode.task, intent=task.intent, observation=obs, history=history)
                text = (await oracle.act([request]))[0].response
                action = parse_action(text)
                path = None
                if action.element is not None:
                    path = await episode.active.locator(f'[data-webrl-id="{action.element}"]').evaluate(CSS_PATH_JS)
                script.append(Recorded(action.type, path, action.argument))
                result = await episode.step(text)
                history.append(Step(index=index, observation=obs, response=text, action=result.action))
                if result.done:
                    break
            scripts.append(script)
            await episode.close()
    return scripts, observe_ms


async def replay_bare(tasks: list[TaskConfig], scripts: list[list[Recorded]], settings: Settings) -> tuple[int, float]:
    """The floor: the same actions as bare Playwright calls, one episode at a time, no observation."""
    from playwright.async_api import async_playwright

    from services.browser_pool.pool import CHROMIUM_ARGS

    steps = 0
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=settings.chromium_path, args=CHROMIUM_ARGS)
        start = time.perf_counter()
        for i, (task, script) in enumerate(zip(tasks, scripts, strict=True)):
            resolved = task.resolved(settings)
            context = await browser.new_context(viewport=VIEWPORT)
            cookies = _episode_cookies(settings, f"bare{i}x{int(start)}")
            if resolved.require_login:
                cookies += _login_cookies(resolved, settings)
            await context.add_cookies(cookies)
            page = await context.new_page()
            await page.goto(resolved.start_urls(settings)[0], wait_until="load")
            for act in script:
                steps += 1
                await _bare(page, act)
                await page.wait_for_load_state("load")
            await context.close()
        wall = time.perf_counter() - start
        await browser.close()
    return steps, wall


async def _bare(page, act: Recorded) -> None:  # type: ignore[no-untyped-def]
    loc = page.locator(act.path) if act.path else None
    if act.kind is ActionType.CLICK:
        await loc.click()
    elif act.kind is ActionType.HOVER:
        await loc.hover()
    elif act.kind in (ActionType.TYPE, ActionType.SEARCH):
        await loc.fill("")
        await loc.press_sequentially(act.argument or "")
        if act.kind is ActionType.SEARCH:
            await loc.press("Enter")
    elif act.kind is ActionType.SELECT:
        await loc.select_option(label=act.argument)
    elif act.kind in (ActionType.SCROLL_DOWN, ActionType.SCROLL_UP):
        sign = 1 if act.kind is ActionType.SCROLL_DOWN else -1
        await page.evaluate(f"window.scrollBy(0, {sign} * window.innerHeight * 2 / 3)")
    elif act.kind is ActionType.PRESS_ENTER:
        await page.keyboard.press("Enter")
    elif act.kind is ActionType.GO_BACKWARD:
        await page.go_back()
    elif act.kind is ActionType.GO_FORWARD:
        await page.go_forward()


async def run_pool(tasks: list[TaskConfig], settings: Settings, size: int) -> tuple[int, float, float]:
    from webrl.sandbox.oracles import OraclePolicy

    async with BrowserPool(settings, size=size) as pool:
        start = time.perf_counter()
        trajs = await run_batch(tasks, OraclePolicy(), pool, settings, concurrency=size)
        wall = time.perf_counter() - start
    scores = [t.env_score or 0.0 for t in trajs]
    return sum(len(t.steps) for t in trajs), wall, sum(scores) / len(scores)


async def main(n_tasks: int, sizes: list[int], settings: Settings) -> None:
    from webrl.sandbox.tasks.suite import build_suite

    tasks = build_suite(0)["test"][:n_tasks]
    scripts, observe_ms = await record(tasks, settings)
    bare_steps, bare_wall = await replay_bare(tasks, scripts, settings)
    floor = bare_steps / bare_wall
    rows = []
    for size in sizes:
        steps, wall, success = await run_pool(tasks, settings, size)
        rows.append((size, steps, wall, steps / wall, success))
    one = rows[0][3]
    print(f"\nbrowser pool: {n_tasks} sandbox test tasks, oracle policy, steps/s include reset and evaluation")
    print(f"observation (one page.evaluate, no screenshot): median {statistics.median(observe_ms):.1f} ms, "
          f"p90 {sorted(observe_ms)[int(0.9 * len(observe_ms))]:.1f} ms over {len(observe_ms)} observations")
    print(f"{'mode':<14}{'pool':>5}{'steps':>7}{'wall s':>8}{'steps/s':>9}{'vs 1 at a time':>16}"
          f"{'vs floor':>10}{'success':>9}")
    print(f"{'bare floor':<14}{1:>5}{bare_steps:>7}{bare_wall:>8.1f}{floor:>9.2f}{'':>16}{1.0:>10.2f}{'':>9}")
    for size, steps, wall, rate, success in rows:
        print(f"{'webrl pool':<14}{size:>5}{steps:>7}{wall:>8.1f}{rate:>9.2f}{rate / one:>16.2f}"
              f"{rate / floor:>10.2f}{success:>9.2f}")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12, help="held-out sandbox tasks per configuration")
    parser.add_argument("--sizes", default="1,2,4,8", help="pool sizes, comma-separated (the first is the base)")
    parser.add_argument("--serve-sandbox", metavar="HOME", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sandbox:
        serve_sandbox(args.serve_sandbox)
        return
    with tempfile.TemporaryDirectory(prefix="bench-bp-") as home:
        child = subprocess.Popen([sys.executable, __file__, "--serve-sandbox", home], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert child.stdout is not None
            urls = json.loads(child.stdout.readline())
            settings = Settings(home=Path(home), **{f"{site}_url": url for site, url in urls.items()})
            asyncio.run(main(args.tasks, [int(s) for s in args.sizes.split(",")], settings))
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=30)


if __name__ == "__main__":
    cli()
