"""What the allow-list proxy (``webrl.safety.allow_list_proxy``) costs a page load: the same pages loaded by two
browsers, one launched with the proxy's switches and one without, alternating, the HTTP cache off.

Pages: the sandbox sites' start pages (keep-alive server, few subresources) and a generated page of ``--images``
images from ``python -m http.server`` (one connection per request either way), where the proxy's cost per
request shows. Prints each page set's median ms per load and the ratio with / without.

    .venv/bin/python bench/allow_list_proxy.py [--rounds 15] [--images 60]
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from webrl.config import Settings  # noqa: E402
from webrl.safety.allow_list_proxy import AllowListProxy  # noqa: E402
from webrl.serving.browser_server import CHROMIUM_ARGS  # noqa: E402

PIXEL = '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>'


def serve_directory(directory: Path) -> tuple[subprocess.Popen[str], str]:
    """``directory`` from ``python -m http.server`` in a child process on a free port; its base URL."""
    child = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                              str(directory)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None
    port = re.search(r"port (\d+)", child.stdout.readline())
    assert port, "http.server did not say its port"
    return child, f"http://127.0.0.1:{port.group(1)}"


async def bench(pages: dict[str, list[str]], allowed: list[str], rounds: int, chromium: str) -> None:
    from playwright.async_api import async_playwright

    proxy = await AllowListProxy(allowed).start()
    async with async_playwright() as playwright:
        browsers, tabs = [], {}
        for name, extra in (("without", []), ("with proxy", proxy.chromium_args())):
            browser = await playwright.chromium.launch(executable_path=chromium, args=[*CHROMIUM_ARGS, *extra])
            page = await (await browser.new_context()).new_page()
            cdp = await page.context.new_cdp_session(page)
            await cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
            browsers.append(browser)
            tabs[name] = page
        ms: dict[tuple[str, str], list[float]] = {(s, n): [] for s in pages for n in tabs}
        for r in range(rounds + 1):  # round 0 warms up
            for page_set, urls in pages.items():
                for name in (list(tabs) if r % 2 else list(tabs)[::-1]):
                    start = time.perf_counter()
                    for url in urls:
                        await tabs[name].goto(url, wait_until="load")
                    if r:
                        ms[(page_set, name)].append((time.perf_counter() - start) * 1000 / len(urls))
        for browser in browsers:
            await browser.close()
    await proxy.close()
    print(f"\n{rounds} rounds, systems alternating; median ms per page load")
    print(f"{'pages':<16}{'without':>10}{'with proxy':>12}{'ratio':>8}")
    for page_set in pages:
        without, with_proxy = (statistics.median(ms[(page_set, n)]) for n in ("without", "with proxy"))
        print(f"{page_set:<16}{without:>10.1f}{with_proxy:>12.1f}{with_proxy / without:>8.2f}")
    assert not [t for t in proxy.refused if t.split(":")[0] == "127.0.0.1"], proxy.refused  # nothing of ours refused


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--images", type=int, default=60, help="images on the generated page")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as home:
        (Path(home) / "pixel.svg").write_text(PIXEL)
        (Path(home) / "images.html").write_text("<html><body>" + "".join(
            f'<img src="/pixel.svg?{i}">' for i in range(args.images)) + "</body></html>")
        files, files_url = serve_directory(Path(home))
        sites = subprocess.Popen([sys.executable, str(REPO / "bench" / "browser_pool.py"), "--serve-sandbox", home],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            assert sites.stdout is not None
            urls = json.loads(sites.stdout.readline())
            settings = Settings(home=Path(home), sites={f"{site}_url": url for site, url in urls.items()})
            sandbox = [settings.site_url(site) + "/" for site in ("shopping", "shopping_admin", "reddit", "gitlab")]
            allowed = [*settings.host_allow_list(), files_url.split("//")[1]]
            pages = {"sandbox starts": sandbox, f"{args.images} images": [f"{files_url}/images.html"]}
            asyncio.run(bench(pages, allowed, args.rounds, settings.browser.chromium_path))
        finally:
            assert sites.stdin is not None
            sites.stdin.close()
            sites.wait(timeout=30)
            files.terminate()
            files.wait(timeout=30)


if __name__ == "__main__":
    cli()
