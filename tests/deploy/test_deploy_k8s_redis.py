"""Redis on Kubernetes wants a password: the server requires the Secret's REDIS_PASSWORD, its
probe authenticates and checks the answer, and every Redis URL a container gets (broker, result backend, events)
carries the password, expanded by the kubelet from the same Secret key; only the broker's clients get one."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from k8s_callgraph import BROKER_CLIENTS
from k8s_network import pods
from kustomize_lite import build

K8S = Path(__file__).resolve().parents[2] / "k8s"
OVERLAYS = ["dev", "prod"]
REDIS_URL_VARS = ("WEBRL_JOBS__BROKER_URL", "WEBRL_JOBS__RESULT_BACKEND", "WEBRL_JOBS__REDIS_URL")
PASSWORD_REF = {"secretKeyRef": {"name": "webrl-secrets", "key": "REDIS_PASSWORD"}}
WITH_PASSWORD = re.compile(r"^redis://:\$\(REDIS_PASSWORD\)@redis:6379/\d+$")


@functools.cache
def _rendered(overlay: str) -> list[dict]:
    return build(K8S / "overlays" / overlay)


def _environment(container: dict, config: dict[str, str]) -> list[tuple[str, dict]]:
    """``(name, source)`` of each variable in the order the kubelet defines them: envFrom, then env."""
    out = [(key, {"value": value}) for source in container.get("envFrom", []) if "configMapRef" in source
           for key, value in config.items()]
    return out + [(e["name"], {k: v for k, v in e.items() if k != "name"}) for e in container.get("env", [])]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_redis_requires_the_secrets_password_and_its_probe_authenticates(overlay: str) -> None:
    redis = pods(_rendered(overlay))["redis"].spec["containers"][0]
    args = redis["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    env = {e["name"]: e.get("valueFrom") for e in redis["env"]}
    assert env["REDIS_PASSWORD"] == env["REDISCLI_AUTH"] == PASSWORD_REF
    probe = " ".join(redis["readinessProbe"]["exec"]["command"])
    assert "redis-cli ping" in probe and "PONG" in probe  # redis-cli exits 0 on NOAUTH: the answer is checked


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_redis_url_carries_the_password(overlay: str) -> None:
    resources = _rendered(overlay)
    config = next(r for r in resources if r["kind"] == "ConfigMap")["data"]
    with_broker = set()
    for name, pod in pods(resources).items():
        for container in pod.spec["containers"]:
            defined: set[str] = set()
            for var, source in _environment(container, config):
                if var in REDIS_URL_VARS:
                    assert WITH_PASSWORD.match(source.get("value", "")), (name, var, source)
                    assert "REDIS_PASSWORD" in defined, f"{name}: {var} expands REDIS_PASSWORD before it is defined"
                    with_broker.add(name)
                if var == "REDIS_PASSWORD":
                    assert source == {"valueFrom": PASSWORD_REF}, name
                defined.add(var)
    assert with_broker == BROKER_CLIENTS


def test_the_dev_secret_holds_a_redis_password_and_prod_expects_yours() -> None:
    secret = next(r for r in _rendered("dev") if r["kind"] == "Secret")
    assert re.fullmatch(r"[0-9a-z-]{16,}", secret["stringData"]["REDIS_PASSWORD"])  # URL-safe as it stands
    assert not [r for r in _rendered("prod") if r["kind"] == "Secret"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_redis_keeps_its_append_only_file_on_a_volume_that_outlives_the_pod(overlay: str) -> None:
    """Queued jobs, results and the job-start counters survive a drain or an apply: the append-only file is on a
    claim of its own (an emptyDir would go with the pod), mounted where Redis writes it."""
    rendered = _rendered(overlay)
    [redis] = [r for r in rendered if r["kind"] == "Deployment" and r["metadata"]["name"] == "redis"]
    spec = redis["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["args"][container["args"].index("--appendonly") + 1] == "yes"
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == "/data"]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    claim = volume["persistentVolumeClaim"]["claimName"]
    [pvc] = [r for r in rendered if r["kind"] == "PersistentVolumeClaim" and r["metadata"]["name"] == claim]
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"] and redis["spec"]["strategy"]["type"] == "Recreate"
