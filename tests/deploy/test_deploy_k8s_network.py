"""k8s/ as a network: every pod is isolated for ingress and admits exactly its callers (the
call graph below, read off the code), Chromium runs in pods of its own that reach only the sites and hold no
secret, the pods that egress is limited for reach exactly what they call, and prod opens the database to one
narrow address block, not the private ranges."""

from __future__ import annotations

import functools
import ipaddress
from pathlib import Path

import pytest
from k8s_callgraph import CDP_PORT, DNS, POOL, SITE_PORTS, calls
from k8s_network import egress_edges as egress_by_pod
from k8s_network import ingress_edges, pods, policies, selected
from kustomize_lite import build

K8S = Path(__file__).resolve().parents[2] / "k8s"
OVERLAYS = ["dev", "prod"]

@functools.cache
def _rendered(overlay: str) -> list[dict]:
    return build(K8S / "overlays" / overlay)


def _database_block(overlay: str) -> str | None:
    """The prod database's address block (k8s/overlays/prod/database-egress.yaml)."""
    blocks = {peer["ipBlock"]["cidr"] for policy in policies(_rendered(overlay), "Egress")
              for rule in policy["spec"]["egress"] for peer in rule["to"] if "ipBlock" in peer}
    assert len(blocks) <= 1, blocks
    return f"cidr:{blocks.pop()}" if blocks else None


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_is_isolated_for_ingress_by_a_default_deny(overlay: str) -> None:
    resources = _rendered(overlay)
    deny = [p for p in policies(resources, "Ingress")
            if p["spec"]["podSelector"] == {} and not p["spec"].get("ingress")]
    assert deny, "no default-deny ingress policy"
    everyone = pods(resources)
    isolated = {pod.name for policy in policies(resources, "Ingress") for pod in selected(policy, everyone)}
    assert isolated == set(everyone)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_pod_admits_exactly_its_callers(overlay: str) -> None:
    allowed = ingress_edges(_rendered(overlay))
    expected = calls(overlay)
    assert allowed == expected, f"admitted but not called: {sorted(allowed - expected)}; " \
                                f"called but not admitted: {sorted(expected - allowed)}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_egress_limited_pods_reach_exactly_what_they_call(overlay: str) -> None:
    egress = egress_by_pod(_rendered(overlay))
    assert set(egress) == POOL | {"chromium"}
    dns = {53}
    database = ("postgres", 5432) if overlay == "dev" else (_database_block(overlay), 5432)
    for pod, edges in egress.items():
        wanted = {edge for edge in calls(overlay) if edge[0] == pod}
        if pod in POOL:
            wanted.add((pod, *database))
        assert edges == wanted | {(pod, DNS, port) for port in dns}, pod


BROWSER_TOKEN = "WEBRL_BROWSER__CDP_TOKEN"  # the credential of `webrl browser serve` (webrl/config.py)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_chromium_runs_apart_reaching_only_the_sites_and_holding_only_its_credential(overlay: str) -> None:
    resources = _rendered(overlay)
    everyone = pods(resources)
    browsers = {name for name, pod in everyone.items() if pod.labels.get("webrl.dev/browser") == "true"}
    assert browsers == {"chromium"}
    images = {name: c["image"] for name, pod in everyone.items() for c in pod.spec["containers"]}
    assert {name for name, image in images.items() if image.startswith("webrl-browser:")} == browsers
    for edge in ingress_edges(resources):
        assert not (edge[0] in browsers and edge[1] in {"postgres", "redis"}), edge
    assert {edge[1:] for pod in browsers for edge in egress_by_pod(resources)[pod]} == \
        {("sites", port) for port in SITE_PORTS} | {(DNS, 53)}
    for name in browsers | {"sites"}:  # what Chromium runs in, and what it reaches: nothing to steal
        pod = everyone[name].spec
        text = str([{k: v for k, v in c.items() if k != "env"} for c in pod["containers"]])
        assert "secretRef" not in text and "secretKeyRef" not in text and "secret" not in {
            key for volume in pod.get("volumes", []) for key in volume}, name
        secret_keys = {e["valueFrom"]["secretKeyRef"]["key"] for c in pod["containers"] for e in c.get("env", [])
                       if "secretKeyRef" in e.get("valueFrom", {})}
        assert secret_keys == ({BROWSER_TOKEN} if name in browsers else set()), name
    for pool in POOL:
        container = everyone[pool].spec["containers"][0]
        config = next(r for r in resources if r["kind"] == "ConfigMap")["data"]
        assert config["WEBRL_BROWSER__CDP_URL"] == f"ws://chromium:{CDP_PORT}/"
        assert "dshm" not in {v["name"] for v in container.get("volumeMounts", [])}, pool
    chromium = everyone["chromium"].spec["containers"][0]
    assert chromium["command"][:3] == ["webrl", "browser", "serve"]
    assert chromium["command"][chromium["command"].index("--port") + 1] == str(CDP_PORT)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_browser_server_wants_a_credential_the_pool_holds(overlay: str) -> None:
    """The chromium pod's server listens on every address, loopback included, where a page of its own browsers
    can reach it and no NetworkPolicy looks: it must want a credential (webrl/serving/browser_server.py), the same one
    the pool sends, from the Secret."""
    resources = _rendered(overlay)
    everyone = pods(resources)
    chromium = everyone["chromium"].spec["containers"][0]
    command = chromium["command"]
    assert command[command.index("--host") + 1] == "0.0.0.0"  # reached by the pool pods over the pod network
    [token] = [e for e in chromium.get("env", []) if e["name"] == BROWSER_TOKEN]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "webrl-secrets", "key": BROWSER_TOKEN}
    for pool in POOL:
        container = everyone[pool].spec["containers"][0]
        assert {"secretRef": {"name": "webrl-secrets"}} in container["envFrom"], pool
    if overlay == "dev":  # prod brings its own Secret (docs/deployment.md names the key)
        secret = next(r for r in resources if r["kind"] == "Secret" and r["metadata"]["name"] == "webrl-secrets")
        assert secret["stringData"][BROWSER_TOKEN]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_browser_servers_allow_list_is_the_pools(overlay: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chromium pod's browsers reach only WEBRL_SECURITY__ALLOWED_HOSTS (through the server's allow-list proxy);
    it names exactly the hosts the pool's settings (the ConfigMap) allow."""
    from webrl.config import Settings

    resources = _rendered(overlay)
    chromium = pods(resources)["chromium"].spec["containers"][0]
    [hosts] = [e["value"] for e in chromium["env"] if e["name"] == "WEBRL_SECURITY__ALLOWED_HOSTS"]
    config = next(r for r in resources if r["kind"] == "ConfigMap")["data"]
    monkeypatch.delenv("WEBRL_SECURITY__ALLOWED_HOSTS", raising=False)
    for key, value in config.items():
        monkeypatch.setenv(key, value)
    assert sorted(hosts.split(",")) == sorted(Settings(_env_file=None).host_allow_list())


def test_prod_opens_the_database_to_one_narrow_block_not_the_private_ranges() -> None:
    block = _database_block("prod")
    assert block is not None
    network = ipaddress.ip_network(block.removeprefix("cidr:"))
    assert network.prefixlen >= 24, f"{network} is wider than a /24: name your database's address"
    for wide in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"):
        assert not network.supernet_of(ipaddress.ip_network(wide)) and network != ipaddress.ip_network(wide)
    assert _database_block("dev") is None  # dev reaches its in-cluster database by pod selector


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_pod_mounts_a_service_account_token(overlay: str) -> None:
    for name, pod in pods(_rendered(overlay)).items():
        assert pod.spec.get("automountServiceAccountToken") is False, name
