"""Fixtures for the evaluation tests: a local website and judge on a free port, and real Chromium.

The site serves the small HTML pages below; ``POST /v1/chat/completions`` is an OpenAI-compatible judge
that grades by a fixed rule (every word of the reference in the student answer -> "correct"; a word of
four letters or more of the reason in the report -> "same"), so fuzzy_match runs over real HTTP.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import pytest
from playwright.async_api import Browser, BrowserContext, async_playwright

from services.browser_pool.pool import CHROMIUM_ARGS
from webrl.config import Settings

CHROMIUM = "/usr/bin/chromium"

PAGES: dict[str, str] = {
    "/form": """<html><body><h1>Contact us</h1>
        <div id="greeting">Fish &amp; Chips</div>
        <input name="title" value=""><textarea id="message"></textarea></body></html>""",
    "/order/view/5/": """<html><body><h1>Order # 5</h1><span class="status">Canceled</span>
        <p>Total: $27.00</p><p>Shipped to Pittsburgh</p></body></html>""",
    "/f/books/12/": """<html><body><div class="submission__inner"><h1>Best fantasy novels</h1>
        <a href="https://example.org/dune">Dune</a></div></body></html>""",
    "/f/books/12/best-fantasy/comment/3": """<html><body><p class="comment">A comment</p></body></html>""",
    "/gitlab/members": """<html><body><table>
        <tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@yjlou</span></td>
            <td class="col-max-role"><span>Developer</span></td></tr>
        <tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@vinta</span></td>
            <td class="col-max-role"><span>Maintainer</span></td></tr></table></body></html>""",
    "/admin/rule": """<html><body>
        <div data-index="actions"><strong class="admin__collapsible-title">Actions</strong></div>
        <input name="discount_amount" value="">
        <script>
          document.querySelector('.admin__collapsible-title').addEventListener('click', () => {
            document.querySelector('[name="discount_amount"]').value = '20';
          });
        </script></body></html>""",
}


@dataclass
class LocalSite:
    """The running test server: its base url and the judge requests it received."""

    url: str
    judge_requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # every GET it answered


def _judge_answer(prompt: str) -> str:
    """The test judge's rule, applied to the prompt text webrl sends."""
    if "Report_1 =" in prompt:
        reason = re.search(r"Reason_1 = (.*)", prompt).group(1).lower()
        report = re.search(r"Report_1 = (.*)", prompt).group(1).lower()
        shared = {w for w in re.findall(r"[a-z]{4,}", reason)} & set(re.findall(r"[a-z]{4,}", report))
        return "[same]" if shared else "[different]"
    reference = re.search(r"reference answer: (.*)", prompt).group(1).lower()
    student = re.search(r"student answer: (.*)", prompt).group(1).lower()
    words = re.findall(r"\w+", reference)
    return "The answer is correct." if all(w in student for w in words) else "The answer is incorrect."


def _handler(site: LocalSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            site.paths.append(self.path)
            path, _, query = self.path.partition("?")
            if path == "/away":  # an open redirect: 302 to the url in the query
                self.send_response(302)
                self.send_header("Location", unquote(query.removeprefix("to=")))
                self.end_headers()
            elif path in PAGES:
                self._send(200, PAGES[path], "text/html; charset=utf-8")
            else:
                self._send(404, "<html><body>Not found</body></html>", "text/html")

        def do_POST(self) -> None:
            if self.path != "/v1/chat/completions":
                self._send(404, "{}", "application/json")
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            site.judge_requests.append({"body": body, "authorization": self.headers.get("Authorization")})
            answer = _judge_answer(body["messages"][-1]["content"])
            reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}
            self._send(200, json.dumps(reply), "application/json")

    return Handler


def _serve_site() -> Iterator[LocalSite]:
    site = LocalSite(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    site.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def local_site() -> Iterator[LocalSite]:
    yield from _serve_site()


@pytest.fixture(scope="session")
def outside_site() -> Iterator[LocalSite]:
    """The same pages on another port, which no settings list: a host off the allow-list."""
    yield from _serve_site()


@pytest.fixture
def eval_settings(settings: Settings, local_site: LocalSite) -> Settings:
    """Settings whose sites all point at the local test server, no judge configured."""
    urls = {f"{site}_url": local_site.url for site in ("shopping", "shopping_admin", "reddit", "gitlab")}
    return settings.replace(sites=urls)


@pytest.fixture
def judge_settings(eval_settings: Settings, local_site: LocalSite) -> Settings:
    """:func:`eval_settings` plus the local judge."""
    local_site.judge_requests.clear()
    return eval_settings.replace(llm_judge={"endpoint": f"{local_site.url}/v1", "model": "judge-test",
                                            "api_key": "secret"})


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        await chromium.close()


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    ctx = await browser.new_context()
    yield ctx
    await ctx.close()
