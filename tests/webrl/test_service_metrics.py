"""/metrics beyond health: per-route latency and request counts move with requests, and the Celery queues'
depth is read from a real Redis broker at scrape time."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from webrl.config import Settings
from webrl.serving.factory import create_app
from webrl.serving.metrics import QUEUE_NAMES, read_samples


def _probe_app(settings: Settings) -> TestClient:
    app = create_app("probe", settings=settings)

    @app.get("/v1/probe/{item}")
    def probe(item: str) -> dict[str, str]:
        return {"item": item}

    return TestClient(app)


def test_route_latency_and_requests_move_after_requests(settings: Settings) -> None:
    client = _probe_app(settings)
    before = read_samples(client.get("/metrics").text)
    route = 'route="/v1/probe/{item}"'  # the route's template, not the raw path: one series per route
    assert not any(route in key for key in before)
    for item in ("a", "b", "c"):
        assert client.get(f"/v1/probe/{item}").status_code == 200
    after = read_samples(client.get("/metrics").text)
    service = 'webrl_service="probe"'  # the series name their service, whatever the scrape config's job is
    assert after[f"webrl_http_request_seconds_count{{{route},{service}}}"] == 3
    assert after[f'webrl_http_request_seconds_bucket{{le="+Inf",{route},{service}}}'] == 3
    assert after[f"webrl_http_request_seconds_sum{{{route},{service}}}"] > 0
    assert after[f'webrl_http_requests_total{{method="GET",{route},status="200",{service}}}'] == 3
    assert not any(key.startswith("webrl_queue_depth") for key in after)  # embedded: no broker, no queue


@pytest.mark.redis
def test_queue_depth_counts_the_jobs_waiting_on_the_redis_broker(settings: Settings, redis_url: str) -> None:
    import redis

    from webrl.wire.queue import make_celery

    broker = redis_url.rsplit("/", 1)[0] + "/13"  # a database of its own: no worker consumes these queues
    broker_settings = settings.replace(jobs={"broker_url": broker, "result_backend": broker})
    server = redis.Redis.from_url(broker)
    keys = [*QUEUE_NAMES, *(f"_kombu.binding.{q}" for q in QUEUE_NAMES)]
    server.delete(*keys)
    try:
        client = _probe_app(broker_settings)
        depth = {q: f'webrl_queue_depth{{queue="{q}"}}' for q in QUEUE_NAMES}
        empty = read_samples(client.get("/metrics").text)
        assert {q: empty[depth[q]] for q in QUEUE_NAMES} == dict.fromkeys(QUEUE_NAMES, 0.0)
        celery = make_celery(broker_settings)
        celery.send_task("rollout.run", args=({"task_keys": ["k"]},))
        for _ in range(2):
            celery.send_task("orm.score", args=({"trajectory_ids": [1]},))
        waiting = read_samples(client.get("/metrics").text)
        assert (waiting[depth["rollout"]], waiting[depth["orm"]], waiting[depth["train"]]) == (1, 2, 0)
    finally:
        server.delete(*keys)


def test_an_unreachable_broker_leaves_the_queue_series_empty_and_metrics_answering(settings: Settings) -> None:
    client = _probe_app(settings.replace(jobs={"broker_url": "redis://127.0.0.1:1/0"}))
    reply = client.get("/metrics")
    assert reply.status_code == 200 and "# TYPE webrl_queue_depth gauge" in reply.text
    assert not any(key.startswith("webrl_queue_depth") for key in read_samples(reply.text))


@pytest.fixture
def silent_broker() -> Iterator[tuple[str, list[socket.socket]]]:
    """A TCP port that accepts connections and never answers (a hung Redis): its URL and the connections taken."""
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                taken.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0", taken
    stop.set()
    thread.join(timeout=5)
    for conn in [*taken, listener]:
        conn.close()


async def test_a_hung_broker_is_tried_once_a_scrape_and_health_answers_meanwhile(
        settings: Settings, silent_broker: tuple[str, list[socket.socket]]) -> None:
    """A scrape whose broker hangs reads it once (redis-py would retry it ten times, about 20 s) and off the event
    loop: /healthz answers while the scrape waits (the liveness probe does not restart a service for a slow
    broker)."""
    url, taken = silent_broker
    app = create_app("probe", settings=settings.replace(jobs={"broker_url": url}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://probe") as client:
        scrape = asyncio.create_task(client.get("/metrics"))
        while not taken:  # the scrape is connected to the broker, waiting for an answer
            await asyncio.sleep(0.01)
        assert (await client.get("/healthz")).status_code == 200
        assert not scrape.done()
        reply = await scrape
    assert reply.status_code == 200 and not any(k.startswith("webrl_queue_depth") for k in read_samples(reply.text))
    assert len(taken) == 1
