"""Browser-pool speed: resets, and environment steps/s on sandbox tasks with the oracle policy.

Resets (``--parts resets``): episodes of a fixed script (Scroll Down / Scroll Up) on static third-party-like
fixture pages (``tests/services/browser_pool/fixtures/``, served by a local http server) and on the start
pages of sandbox tasks. Reset p50/p95 and steps/s including resets, for the pool as it is (warm: contexts
made ahead, a scrubbed page reused on the same origin), the pool without its stock (cold: a context per
episode) and bare Playwright with one reused page (goto, the same scrolls, no observation), systems
alternating round by round in one run; ratios against the bare page.

Throughput (``--parts throughput``): for pool sizes 1, 2, 4 and 8 (one episode per browser, ``run_batch``),
steps/s including resets and evaluation, as ratios against one episode at a time (size 1) and against the
floor: the bare Playwright calls of the same actions (recorded from an oracle run, replayed by CSS path on
one browser, a fresh context per episode) with no observation extraction, no evaluation and no policy. Then the
cost of step screenshots (``--screenshots``, ``webrl.store.screenshots``): steps/s with them over steps/s without, at
the smallest and the largest pool size, and their mean size.

    .venv/bin/python bench/browser_pool.py [--parts resets,throughput] [--rounds 3 --episodes 8 --steps 4]
                                           [--tasks 12] [--sizes 1,2,4,8]

The sandbox sites run in a child process so the uvicorn threads do not share this process's GIL with the
Playwright client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from services.browser_pool.episode import BrowserEpisode, _episode_cookies, _login_cookies  # noqa: E402
from services.browser_pool.observe import observe_view  # noqa: E402
from services.browser_pool.pool import CHROMIUM_ARGS, BrowserPool  # noqa: E402
from services.browser_pool.runs import run_batch  # noqa: E402
from services.browser_pool.stage import VIEWPORT  # noqa: E402
from webrl.agent.actions import ActionType, parse_action  # noqa: E402
from webrl.agent.policy import PolicyRequest  # noqa: E402
from webrl.agent.schemas import Step, TaskConfig  # noqa: E402
from webrl.config import SITE_PLACEHOLDERS, Settings  # noqa: E402

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

    steps = 0
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=settings.browser.chromium_path, args=CHROMIUM_ARGS)
        start = time.perf_counter()
        for task, script in zip(tasks, scripts, strict=True):
            resolved = task.resolved(settings)
            context = await browser.new_context(viewport=VIEWPORT)
            await context.add_cookies(_bare_cookies(resolved, settings))
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


def _bare_cookies(resolved: TaskConfig, settings: Settings) -> list[dict]:
    """What the pool gives an episode's context: its own sandbox episode, and the login when it needs one."""
    cookies = _episode_cookies(settings, f"bare{uuid.uuid4().hex[:12]}")
    return cookies + (_login_cookies(resolved, settings) if resolved.require_login else [])


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


async def run_pool(tasks: list[TaskConfig], settings: Settings, size: int,
                   screenshots: bool = False) -> tuple[int, float, float, list[int]]:
    """Steps, wall seconds, mean evaluator score and the byte size of every screenshot taken."""
    from webrl.sandbox.oracles import OraclePolicy

    async with BrowserPool(settings, size=size) as pool:
        start = time.perf_counter()
        trajs = await run_batch(tasks, OraclePolicy(), pool, settings, concurrency=size, screenshots=screenshots)
        wall = time.perf_counter() - start
    scores = [t.env_score or 0.0 for t in trajs]
    shots = [len(s.screenshot) for t in trajs for s in t.steps if s.screenshot]
    return sum(len(t.steps) for t in trajs), wall, sum(scores) / len(scores), shots


# ----- resets ------------------------------------------------------------------------------------------
FIXTURES = REPO / "tests" / "services" / "browser_pool" / "fixtures"
STATIC_PAGES = ["elements.html", "icons.html", "wrapper.html", "pagination.html", "multiselect.html",
                "longvalue.html", "dates.html", "results.html"]  # fixture pages with nothing late or timed
SCRIPT = [ActionType.SCROLL_DOWN, ActionType.SCROLL_UP]  # each episode's steps, in turn: no navigation
SYSTEMS = ["bare page", "webrl warm", "webrl cold"]


@dataclass
class ResetRun:
    """One system's episodes on one page set: reset times, steps, wall time (resets and closes included)."""

    resets_ms: list[float] = field(default_factory=list)
    reused: int = 0  # resets that got a scrubbed page back (webrl warm)
    steps: int = 0
    wall_s: float = 0.0

    def p(self, q: float) -> float:
        ordered = sorted(self.resets_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def rate(self) -> float:
        return self.steps / self.wall_s


def serve_fixtures() -> tuple[subprocess.Popen[str], str]:
    """The fixture pages on a free port, from ``python -m http.server`` in a child process; its base URL."""
    child = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                              "--directory", str(FIXTURES)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
    assert child.stdout is not None
    port = re.search(r"port (\d+)", child.stdout.readline())
    assert port, "http.server did not say its port"
    return child, f"http://127.0.0.1:{port.group(1)}"


async def episodes_webrl(pool: BrowserPool, tasks: list[TaskConfig], settings: Settings, steps: int,
                         run: ResetRun) -> None:
    start = time.perf_counter()
    for task in tasks:
        begin = time.perf_counter()
        episode = await BrowserEpisode.open(pool, task, settings)
        run.resets_ms.append((time.perf_counter() - begin) * 1000)
        run.reused += episode.stage.episodes > 0
        for index in range(steps):
            await episode.step(f'do(action="{SCRIPT[index % len(SCRIPT)].value}")')
        await episode.close()
    run.steps += len(tasks) * steps
    run.wall_s += time.perf_counter() - start


async def episodes_bare(page, tasks: list[TaskConfig], settings: Settings, steps: int,  # type: ignore[no-untyped-def]
                        run: ResetRun) -> None:
    """One reused page: a reset is the next episode's cookies and a goto; steps are the bare scrolls."""
    start = time.perf_counter()
    for task in tasks:
        begin = time.perf_counter()
        resolved = task.resolved(settings)
        await page.context.add_cookies(_bare_cookies(resolved, settings))
        await page.goto(resolved.start_urls(settings)[0], wait_until="load")
        run.resets_ms.append((time.perf_counter() - begin) * 1000)
        for index in range(steps):
            await _bare(page, Recorded(SCRIPT[index % len(SCRIPT)], None, None))
            await page.wait_for_load_state("load")
    run.steps += len(tasks) * steps
    run.wall_s += time.perf_counter() - start


async def bench_resets(sets: dict[str, list[TaskConfig]], settings: Settings, rounds: int, steps: int) -> None:
    """Every system on every page set, systems in a rotating order each round (one warm-up episode each)."""
    from playwright.async_api import async_playwright

    runs = {(name, system): ResetRun() for name in sets for system in SYSTEMS}
    async with (BrowserPool(settings, size=1) as warm, BrowserPool(settings, size=1, warm=False) as cold,
                async_playwright() as p):
        browser = await p.chromium.launch(executable_path=settings.browser.chromium_path, args=CHROMIUM_ARGS)
        page = await (await browser.new_context(viewport=VIEWPORT)).new_page()

        async def one(system: str, tasks: list[TaskConfig], run: ResetRun) -> None:
            if system == "bare page":
                await episodes_bare(page, tasks, settings, steps, run)
            else:
                await episodes_webrl(warm if system == "webrl warm" else cold, tasks, settings, steps, run)

        for tasks in sets.values():
            for system in SYSTEMS:
                await one(system, tasks[:1], ResetRun())
        for r in range(rounds):
            for name, tasks in sets.items():
                for system in SYSTEMS[r % 3:] + SYSTEMS[:r % 3]:
                    await one(system, tasks, runs[(name, system)])
                    print(f"round {r + 1}/{rounds} {name:<8} {system:<11} done", file=sys.stderr)
        await browser.close()
    report_resets(runs, sets, rounds, steps)


def report_resets(runs: dict[tuple[str, str], ResetRun], sets: dict[str, list[TaskConfig]], rounds: int,
                  steps: int) -> None:
    print(f"\nresets: {rounds} rounds x {len(next(iter(sets.values())))} episodes of {steps} steps per page set; "
          "steps/s include resets and closes")
    print(f"{'pages':<9}{'system':<12}{'resets':>7}{'p50 ms':>8}{'p95 ms':>8}{'reused':>8}{'steps/s':>9}"
          f"{'p50 / bare':>12}{'bare steps/s / this':>21}{'cold p50 / this':>17}")
    for name in sets:
        bare, cold = runs[(name, "bare page")], runs[(name, "webrl cold")]
        for system in SYSTEMS:
            run = runs[(name, system)]
            print(f"{name:<9}{system:<12}{len(run.resets_ms):>7}{run.p(0.5):>8.1f}{run.p(0.95):>8.1f}"
                  f"{run.reused:>8}{run.rate:>9.2f}{run.p(0.5) / bare.p(0.5):>12.2f}{bare.rate / run.rate:>21.2f}"
                  f"{cold.p(0.5) / run.p(0.5):>17.2f}")


def static_tasks(base_url: str, episodes: int) -> list[TaskConfig]:
    return [TaskConfig(task_id=f"static-{i}", sites=[], intent="read the page",
                       start_url=f"{base_url}/{STATIC_PAGES[i % len(STATIC_PAGES)]}") for i in range(episodes)]


# ----- throughput ---------------------------------------------------------------------------------------
async def throughput(n_tasks: int, sizes: list[int], settings: Settings) -> None:
    from webrl.sandbox.tasks.suite import build_suite

    tasks = build_suite(0)["test"][:n_tasks]
    scripts, observe_ms = await record(tasks, settings)
    bare_steps, bare_wall = await replay_bare(tasks, scripts, settings)
    floor = bare_steps / bare_wall
    rows = []
    for size in sizes:
        steps, wall, success, _ = await run_pool(tasks, settings, size)
        rows.append((size, steps, wall, steps / wall, success))
    shot_rows = []
    for size in dict.fromkeys((sizes[0], sizes[-1])):  # the screenshots' cost at the smallest and largest pool
        steps, wall, success, shots = await run_pool(tasks, settings, size, screenshots=True)
        shot_rows.append((size, steps, wall, steps / wall, success, shots))
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
    without = {size: rate for size, _, _, rate, _ in rows}
    print("\nstep screenshots (--screenshots: one downscaled WebP/JPEG per step), steps/s with / without:")
    for size, steps, wall, rate, success, shots in shot_rows:
        mean_kb = statistics.mean(shots) / 1024 if shots else 0.0
        print(f"  pool {size}: {rate:.2f} / {without[size]:.2f} steps/s = {rate / without[size]:.2f}x "
              f"({len(shots)} screenshots for {steps} steps in {wall:.1f} s, mean {mean_kb:.1f} KB, "
              f"success {success:.2f})")


async def main(args: argparse.Namespace, settings: Settings) -> None:
    from webrl.sandbox.tasks.suite import build_suite

    parts = args.parts.split(",")
    if "resets" in parts:
        server, base_url = serve_fixtures()
        try:
            host = base_url.split("//", 1)[1]
            with_fixtures = settings.replace(security={"allowed_hosts": [*settings.host_allow_list(), host]})
            sets = {"static": static_tasks(base_url, args.episodes),
                    "sandbox": build_suite(0)["test"][:args.episodes]}
            await bench_resets(sets, with_fixtures, args.rounds, args.steps)
        finally:
            server.terminate()
            server.wait(timeout=30)
    if "throughput" in parts:
        await throughput(args.tasks, [int(s) for s in args.sizes.split(",")], settings)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="resets,throughput", help="which parts to run, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="resets: rounds, systems alternating")
    parser.add_argument("--episodes", type=int, default=8, help="resets: episodes per system, page set and round")
    parser.add_argument("--steps", type=int, default=4, help="resets: steps (scrolls) per episode")
    parser.add_argument("--tasks", type=int, default=12, help="throughput: held-out sandbox tasks per configuration")
    parser.add_argument("--sizes", default="1,2,4,8", help="throughput: pool sizes, comma-separated (first: base)")
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
            settings = Settings(home=Path(home), sites={f"{site}_url": url for site, url in urls.items()})
            asyncio.run(main(args, settings))
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=30)


if __name__ == "__main__":
    cli()
