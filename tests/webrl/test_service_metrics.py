"""/metrics beyond health: per-route latency and request counts move with requests, and the Celery queues'
depth is read from a real Redis broker at scrape time."""

from __future__ import annotations

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
