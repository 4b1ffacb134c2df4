"""`webrl ui` as users run it: a real uvicorn process on the home of a real smoke run (tests/webrl/conftest.py),
one real Chromium (Playwright) for the module, and a page per test that records every console error and
every script-opened dialog."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from local_ports import free_port

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 300.0  # python + FastAPI + SQLAlchemy imports on a busy 2-core machine
WARM_TIMEOUT_S = 300.0  # the first trajectory page imports torch (returns) and loads the actor's tokenizer


@pytest.fixture(scope="module")
def viewer_url(smoke_home, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """`webrl ui` serving the smoke home on a free port; its log is under the test's tmp folder."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBRL_")}
    env.update({**smoke_home.env, "PYTHONPATH": str(REPO)})
    log_path = tmp_path_factory.mktemp("viewer") / "ui.log"
    with log_path.open("w") as log:
        process = subprocess.Popen([sys.executable, "-m", "webrl.cli", "ui", "--port", str(port)], cwd=REPO, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(f"{url}/healthz", START_TIMEOUT_S, process, log_path)
        _wait(f"{url}/trajectories/1", WARM_TIMEOUT_S, process, log_path)
        yield url
    finally:
        process.terminate()  # uvicorn shuts down on SIGTERM
        process.wait(timeout=60)


def _wait(url: str, timeout_s: float, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"webrl ui exited:\n{log_path.read_text()}"
        try:
            if httpx.get(url, timeout=timeout_s).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer 200 within {timeout_s:.0f} s:\n{log_path.read_text()}")


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    from webrl.config import Settings

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=Settings(_env_file=None).browser.chromium_path)
        yield browser
        browser.close()


@dataclass
class Visit:
    """A page of the viewer in Chromium, with what went wrong on it."""

    page: object
    base: str
    shots: Path
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def open(self, path: str):  # type: ignore[no-untyped-def]
        response = self.page.goto(self.base + path)
        assert response is not None and response.status == 200, (path, response and response.status)
        return response

    def shoot(self, name: str) -> Path:
        """A full-page screenshot under the test's tmp folder (look at them when changing a template)."""
        out = self.shots / f"{name}.png"
        self.page.screenshot(path=str(out), full_page=True)
        return out


@pytest.fixture
def visit(chromium, viewer_url: str, tmp_path: Path) -> Iterator[Visit]:  # type: ignore[no-untyped-def]
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    seen = Visit(page, viewer_url, tmp_path)
    page.on("console", lambda message: seen.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: seen.errors.append(str(error)))

    def on_dialog(dialog) -> None:  # type: ignore[no-untyped-def]
        seen.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    yield seen
    context.close()
