"""Prometheus series a service exports besides its HTTP requests and latency (``webrl.serving.factory.create_app``):
the Celery queues' depth, read from the Redis broker at scrape time, and values a service reads from its own
logic at scrape time (the actor's generated tokens, the browser pool's episodes in flight).

The series, by name (``k8s/monitoring/webrl-dashboard.json`` plots them; ``tests/deploy`` checks it names no
other):

- ``webrl_http_requests_total{webrl_service, route, method, status}``, ``webrl_http_request_seconds{webrl_service,
  route}`` (histogram): every service, named by ``webrl_service`` (``webrl/serving/factory.py``);
- ``webrl_queue_depth{queue}``: messages waiting in each Celery queue; every service, when the broker is Redis;
- ``webrl_actor_tokens_generated_total``, ``webrl_actor_requests_in_flight``: the actor;
- ``webrl_browser_episodes_in_flight``, ``webrl_browser_pool_size``, ``webrl_browser_restarts_total``: the browser pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Literal

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from webrl.wire.queue import QUEUES

log = logging.getLogger("webrl.serving.factory")

#: The Celery queues whose depth is exported (one per service, and the default queue).
QUEUE_NAMES: tuple[str, ...] = tuple(sorted(set(QUEUES.values())))
#: A scrape must answer quickly even when Redis does not: a slow broker leaves the series without samples.
BROKER_TIMEOUT_S = 1.0


class ValueCollector(Collector):
    """One unlabelled gauge or counter whose value ``read()`` gives at scrape time (None: no sample yet, e.g.
    before the service's lifespan loaded its model). A counter's ``name`` is given without ``_total``."""

    def __init__(self, name: str, documentation: str, kind: Literal["gauge", "counter"],
                 read: Callable[[], float | None]) -> None:
        self.name, self.documentation, self.kind, self.read = name, documentation, kind, read

    def _family(self) -> GaugeMetricFamily | CounterMetricFamily:
        family = GaugeMetricFamily if self.kind == "gauge" else CounterMetricFamily
        return family(self.name, self.documentation)

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        value = self.read()
        if value is not None:
            family.add_metric([], float(value))
        yield family


class QueueDepthCollector(Collector):
    """``webrl_queue_depth{queue}``: the length of each Celery queue's Redis list (kombu keeps a queue's waiting
    messages in a list of the queue's name). No broker, or not Redis (the embedded mode): no samples."""

    def __init__(self, broker_url: str | None) -> None:
        self.broker_url = broker_url if broker_url and broker_url.startswith(("redis://", "rediss://")) else None
        self._client = None

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("webrl_queue_depth", "Jobs waiting in each Celery queue (Redis broker)",
                                 labels=["queue"])

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def _depths(self) -> list[int]:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if self._client is None:  # one try: redis-py retries a failed command by default, a scrape must not
            self._client = redis.Redis.from_url(self.broker_url, socket_timeout=BROKER_TIMEOUT_S,
                                                socket_connect_timeout=BROKER_TIMEOUT_S, retry=Retry(NoBackoff(), 0))
        pipe = self._client.pipeline(transaction=False)
        for queue in QUEUE_NAMES:
            pipe.llen(queue)
        return [int(n) for n in pipe.execute()]

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        if self.broker_url is not None:
            import redis

            try:
                for queue, depth in zip(QUEUE_NAMES, self._depths(), strict=True):
                    family.add_metric([queue], depth)
            except redis.RedisError as exc:
                log.warning("queue depth: broker unreachable (%s)", type(exc).__name__)
        yield family


def register_value(registry: CollectorRegistry, name: str, documentation: str,
                   kind: Literal["gauge", "counter"], read: Callable[[], float | None]) -> None:
    """Export ``read()`` as ``name`` (a gauge, or a counter exposed as ``<name>_total``) on ``registry``."""
    registry.register(ValueCollector(name, documentation, kind, read))


def attribute_reader(root: Any, path: str) -> Callable[[], float | None]:
    """``() -> root.<path>`` for a dotted ``path``; None while a part is missing (before a lifespan sets it)."""

    def read() -> float | None:
        value = root
        for name in path.split("."):
            value = getattr(value, name, None)
            if value is None:
                return None
        return float(value)

    return read


def read_samples(text: str) -> dict[str, float]:
    """``/metrics`` text back as ``{'name{label="value",...}': value}`` (labels sorted; no braces without
    labels), for tests and scripts that watch a series move."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out
