from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from webrl.models.tiny import build_tiny_folder

CORPUS = [
    "Show me the products in the Electronics category",
    '<html> <a id="3"> Electronics </a> <a id="4"> Books </a> <button id="17"> Add to Cart </button> </html>',
    'do(action="Click", element="3")',
] * 30


def tiny_folder(path: Path, seed: int) -> Path:
    return build_tiny_folder(CORPUS, path, size="test", vocab_size=1200, seed=seed)


@pytest.fixture(scope="session")
def actor_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_folder(tmp_path_factory.mktemp("actor") / "actor-v1", seed=5)


@pytest.fixture(scope="session")
def second_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another checkpoint (a different seed): what a training step would publish."""
    return tiny_folder(tmp_path_factory.mktemp("actor") / "actor-v2", seed=9)


class Served:
    """An ASGI app served by uvicorn in a thread on a free port."""

    def __init__(self, app) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def serve() -> Iterator:
    started: list[Served] = []

    def _serve(app) -> Served:
        served = Served(app).__enter__()
        started.append(served)
        return served

    yield _serve
    for served in reversed(started):
        served.__exit__(None, None, None)
