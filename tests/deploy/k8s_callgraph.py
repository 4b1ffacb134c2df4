"""The call graph of webrl's pods, read off the code: who opens a connection to whom, on which port. The
NetworkPolicies in k8s/ must admit exactly these (tests/deploy/test_deploy_k8s_network.py)."""

from __future__ import annotations

from webrl.config import SANDBOX_PORTS

API_PORTS = {"browser-pool": 8101, "actor": 8102, "orm": 8103, "critic": 8104, "taskgen": 8105, "trainer": 8106,
             "viewer": 8107}
WORKERS = {f"{api}-worker" for api in API_PORTS} - {"viewer-worker"}
#: Every webrl process but the sites and Chromium opens the database (readiness, jobs, rows); the viewer reads it.
DATABASE_CLIENTS = {*API_PORTS, *WORKERS, "webrl-migrate"}
#: The broker: Celery jobs, queue depth on /metrics, webrl:checkpoints. The viewer and the migration need none.
BROKER_CLIENTS = DATABASE_CLIENTS - {"viewer", "webrl-migrate"}
SITE_PORTS = {SANDBOX_PORTS[site] for site in ("shopping", "shopping_admin", "reddit", "gitlab")}
POOL = {"browser-pool", "browser-pool-worker"}
CDP_PORT = 9230
DNS = "kube-system/kube-dns"

#: Who calls whom over HTTP (and CDP), from the code.
CALLS = {
    ("actor", "browser-pool", 8101),  # agent runs drive the pool (services/actor/agent.py, WEBRL_BROWSER__POOL_URL)
    *((pool, "actor", 8102) for pool in POOL),  # rollouts: POST /v1/act on WEBRL_ACTOR__URL (models/model_policies.py)
    ("trainer-worker", "actor", 8102),  # `webrl train`, run in the trainer worker: GET /v1/model (actor_service.py)
    *((pool, "chromium", CDP_PORT) for pool in POOL),  # the pool's browsers (WEBRL_BROWSER__CDP_URL)
    *(("chromium", "sites", port) for port in SITE_PORTS),  # what the agent browses
    *(("monitoring/*", api, port) for api, port in API_PORTS.items()),  # Prometheus scrapes /metrics
}
#: prod: vLLM serves the actor (WEBRL_ACTOR__ENDPOINT) and asks the trainer for checkpoints (docker/vllm_supervisor.py).
PROD_CALLS = {("actor", "vllm", 8000), ("actor-worker", "vllm", 8000), ("vllm", "trainer", 8106)}


def calls(overlay: str) -> set[tuple[str, str, int]]:
    """Every connection of the overlay: HTTP and CDP calls, the broker, and the in-cluster database (dev)."""
    out = CALLS | {(client, "redis", 6379) for client in BROKER_CLIENTS}
    if overlay == "dev":
        return out | {(client, "postgres", 5432) for client in DATABASE_CLIENTS}
    return out | PROD_CALLS
