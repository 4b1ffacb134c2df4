"""k8s/: the dev and prod overlays render (tests/deploy/kustomize_lite.py, cross-checked against kubectl's
kustomize when it is installed), validate against the Kubernetes schemas, and carry what the deployment
needs: a Deployment per service running its real entry point, probes, GPU requests, Chromium's egress policy.
The network as a whole and Redis's password: test_deploy_k8s_network.py, test_deploy_k8s_redis.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kustomize_lite import build, config_map_hash, strategic_merge
from vllm_context import max_model_len, served_contexts
from worker_queues import consumed, queues_of

from webrl.config import Settings, setting_variables

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = ["dev", "prod"]
K8S_VERSION = "1.30.0"  # the oldest Kubernetes minor still supported upstream when this was written
SERVICE_DIRS = sorted(p.name for p in (ROOT / "services").iterdir() if p.is_dir() and not p.name.startswith("_"))
#: WEBRL_ variables that are no setting, by container: docker/vllm_supervisor.py reads the trainer's URL.
OWN_VARS = {"vllm": {"WEBRL_TRAINER_URL"}}


def _rendered(overlay: str) -> list[dict]:
    return build(K8S / "overlays" / overlay)


def _by_key(resources: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["kind"], r["metadata"]["name"]): r for r in resources}


def _containers(resource: dict) -> list[dict]:
    return resource["spec"]["template"]["spec"]["containers"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_validates_against_kubernetes_schemas(overlay: str) -> None:
    resources = _rendered(overlay)
    assert len(resources) > 20
    for resource in resources:
        kubernetes_validate.validate(resource, K8S_VERSION, strict=True)


def test_config_map_hash_matches_kustomize_known_values() -> None:
    # Values printed by kubectl kustomize v5.5.0 for `literals: [A=1]` and `[A=1, B=http://x:1]`.
    assert config_map_hash({"A": "1"}) == "89g4tffbfk"
    assert config_map_hash({"A": "1", "B": "http://x:1"}) == "76m57hcbgb"


def test_strategic_merge_merges_containers_by_name_and_replaces_plain_lists() -> None:
    target = {"containers": [{"name": "a", "image": "x", "args": ["1"]}, {"name": "b", "image": "y"}]}
    patch = {"containers": [{"name": "a", "args": ["2"], "image": None}, {"name": "c", "image": "z"}]}
    merged = strategic_merge(target, patch)
    assert merged == {"containers": [{"name": "c", "image": "z"}, {"name": "a", "args": ["2"]},
                                     {"name": "b", "image": "y"}]}
    assert strategic_merge({"args": ["1", "2"]}, {"args": ["3"]}) == {"args": ["3"]}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) not installed")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_lite_renderer_matches_kubectl_kustomize(overlay: str) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(K8S / "overlays" / overlay)], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    real = _by_key([doc for doc in yaml.safe_load_all(out) if doc])
    lite = _by_key(_rendered(overlay))
    assert sorted(lite) == sorted(real)
    for key, resource in real.items():
        assert lite[key] == resource, f"{key} differs from kubectl kustomize"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_has_api_and_worker_running_its_entry_point(overlay: str) -> None:
    objects = _by_key(_rendered(overlay))
    for svc in SERVICE_DIRS:
        name = svc.replace("_", "-")
        api = objects[("Deployment", name)]
        command = _containers(api)[0]["command"]
        assert command[:2] == ["uvicorn", f"services.{svc}.app:app"], command
        key = {e["name"]: e for e in _containers(api)[0]["env"]}["WEBRL_SECURITY__API_KEY"]  # required: no key, no pod
        assert key["valueFrom"]["secretKeyRef"] == {"name": "webrl-secrets", "key": "WEBRL_SECURITY__API_KEY"}, name
        port = int(command[command.index("--port") + 1])
        assert objects[("Service", name)]["spec"]["ports"][0]["port"] == port
        worker = _containers(objects[("Deployment", f"{name}-worker")])[0]["command"]
        assert worker[:4] == ["celery", "-A", f"services.{svc}.worker", "worker"], worker
        assert consumed(worker) >= queues_of(svc), (name, worker)  # every queue its tasks are sent to



@pytest.mark.parametrize("overlay", OVERLAYS)
def test_apis_probe_readyz_and_healthz(overlay: str) -> None:
    for resource in _rendered(overlay):
        if resource["kind"] != "Deployment" or resource["spec"]["template"]["metadata"]["labels"].get(
                "app.kubernetes.io/component") != "api":
            continue
        container = _containers(resource)[0]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", resource["metadata"]["name"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", resource["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_apis_are_scraped_by_prometheus_on_their_http_port(overlay: str) -> None:
    apis = [r for r in _rendered(overlay) if r["kind"] == "Deployment"
            and r["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "api"]
    assert len(apis) >= 7
    for resource in apis:
        annotations = resource["spec"]["template"]["metadata"].get("annotations", {})
        port = next(p["containerPort"] for p in _containers(resource)[0]["ports"] if p["name"] == "http")
        assert annotations.get("prometheus.io/scrape") == "true", resource["metadata"]["name"]
        assert (annotations.get("prometheus.io/port"), annotations.get("prometheus.io/path")) == (str(port),
                                                                                                  "/metrics")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workloads_run_as_non_root_and_read_config(overlay: str) -> None:
    resources = _rendered(overlay)
    config_names = {r["metadata"]["name"] for r in resources if r["kind"] == "ConfigMap"}
    assert len(config_names) == 1 and next(iter(config_names)).startswith("webrl-config-")
    for resource in resources:
        if resource["kind"] not in {"Deployment", "StatefulSet", "Job"}:
            continue
        pod = resource["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, resource["metadata"]["name"]
        for container in pod["containers"]:
            assert "livenessProbe" in container or resource["kind"] == "Job", resource["metadata"]["name"]
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_names


#: Workloads whose root filesystem stays writable: Postgres initialises its cluster under its root, vLLM writes its
#: compile and kernel caches under its home (docs/deployment.md, "Security").
WRITABLE_ROOT = {"postgres", "vllm"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_containers_drop_capabilities_and_keep_a_read_only_root(overlay: str) -> None:
    for resource in _rendered(overlay):
        if resource["kind"] not in {"Deployment", "StatefulSet", "Job"}:
            continue
        name, pod = resource["metadata"]["name"], resource["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in _containers(resource):
            context = container["securityContext"]
            assert context["capabilities"]["drop"] == ["ALL"] and context["allowPrivilegeEscalation"] is False, name
            assert context.get("readOnlyRootFilesystem", False) is (name not in WRITABLE_ROOT), name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_webrl_variable_is_a_setting_and_settings_accept_them(overlay: str, monkeypatch: pytest.MonkeyPatch,
                                                                      ) -> None:
    """The ConfigMap, the Secret and each container's env name only Settings' variables (an old flat name or a
    misspelt one would be refused at start), and Settings loads what each container gets."""
    known = set(setting_variables())
    resources = _rendered(overlay)
    config = next(r for r in resources if r["kind"] == "ConfigMap")["data"]
    secrets = [r for r in resources if r["kind"] == "Secret"]
    for name in [*config, *(key for s in secrets for key in {**s.get("stringData", {}), **s.get("data", {})})]:
        assert not name.startswith("WEBRL_") or name in known, f"{overlay}: {name} is not a setting"
    for resource in resources:
        if resource["kind"] not in {"Deployment", "StatefulSet", "Job"}:
            continue
        for container in resource["spec"]["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value", "x") for e in container.get("env", []) if e["name"].startswith("WEBRL_")}
            where = f"{overlay}/{resource['metadata']['name']}/{container['name']}"
            unknown = set(env) - known - OWN_VARS.get(container["name"], set())
            assert not unknown, f"{where}: {sorted(unknown)} are no settings"
            if not any("configMapRef" in source for source in container.get("envFrom", [])) and not env:
                continue
            with monkeypatch.context() as mp:
                for name in [n for n in os.environ if n.startswith("WEBRL_")]:
                    mp.delenv(name)
                for name, value in {**config, **env}.items():
                    mp.setenv(name, value)
                Settings(_env_file=None)  # raises on an old flat name, a misspelt group field or a bad value


def test_workers_scale_with_an_hpa() -> None:
    objects = _by_key(_rendered("prod"))
    hpas = {name for kind, name in objects if kind == "HorizontalPodAutoscaler"}
    assert {"browser-pool-worker", "actor-worker", "orm-worker", "critic-worker"} <= hpas
    for name in hpas:
        target = objects[("HorizontalPodAutoscaler", name)]["spec"]["scaleTargetRef"]
        assert ("Deployment", target["name"]) in objects


def test_prod_puts_vllm_and_the_trainer_on_gpus_and_uses_a_managed_database() -> None:
    objects = _by_key(_rendered("prod"))
    for name in ("vllm", "trainer-worker"):
        limits = _containers(objects[("Deployment", name)])[0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "1", name
    assert _containers(objects[("Deployment", "trainer-worker")])[0]["image"].startswith("webrl-gpu:")
    assert ("StatefulSet", "postgres") not in objects and ("Secret", "webrl-secrets") not in objects
    config = next(r for (kind, _), r in objects.items() if kind == "ConfigMap")["data"]
    assert config["WEBRL_ACTOR__BACKEND"] == "openai" and config["WEBRL_ACTOR__ENDPOINT"] == "http://vllm:8000/v1"
    pvc = objects[("PersistentVolumeClaim", "webrl-artifacts")]["spec"]
    assert pvc["accessModes"] == ["ReadWriteMany"] and pvc["storageClassName"]


def test_prod_vllm_max_model_len_fits_the_models_it_serves() -> None:
    """vLLM does not start with a --max-model-len above the model's context: the actor `webrl bootstrap` writes,
    or the SmolLM2 base an adapter is served on (tests/deploy/vllm_context.py)."""
    args = _containers(_by_key(_rendered("prod"))[("Deployment", "vllm")])[0]["args"]
    contexts = served_contexts(args)
    assert max_model_len(args) <= min(contexts.values()), (max_model_len(args), contexts)


def test_prod_vllm_outlives_a_reload_and_the_pipeline_waits_for_it() -> None:
    """A full-weight reload restarts vLLM inside its container, where only the liveness probe applies: it allows
    the startup probe's budget, and the pipeline's wait for the new checkpoint (actor.reload_timeout_s) covers that
    budget plus the supervisor's look-up and stop (docker/vllm_supervisor.py's options as the container gives them)."""
    import sys

    sys.path.insert(0, str(ROOT / "docker"))
    from vllm_supervisor import parse_args

    rendered = _rendered("prod")
    [container] = _containers(_by_key(rendered)[("Deployment", "vllm")])
    budget = {probe: container[probe]["periodSeconds"] * container[probe]["failureThreshold"]
              for probe in ("startupProbe", "livenessProbe")}
    assert budget["livenessProbe"] >= budget["startupProbe"], budget
    supervisor = parse_args(container["args"])
    [config] = [r["data"] for r in rendered if r["kind"] == "ConfigMap" and "WEBRL_HOME" in r["data"]]
    wait = Settings(_env_file=None, actor={"reload_timeout_s": config["WEBRL_ACTOR__RELOAD_TIMEOUT_S"]})
    assert wait.actor.reload_timeout_s > budget["startupProbe"] + supervisor.poll_s + supervisor.stop_timeout_s


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_that_keep_state_in_their_process_run_one_replica(overlay: str) -> None:
    """The browser pool's REST episodes live in its memory and each actor replica loads the published checkpoint
    on its own: a second replica behind the Service would answer half the requests wrongly."""
    objects = _by_key(_rendered(overlay))
    for name in ("browser-pool", "actor"):
        assert objects[("Deployment", name)]["spec"].get("replicas", 1) == 1, (overlay, name)
    assert objects[("Deployment", "orm")]["spec"]["replicas"] == (2 if overlay == "prod" else 1)  # stateless


def test_dev_keeps_the_in_cluster_database_and_a_migration_job() -> None:
    objects = _by_key(_rendered("dev"))
    assert ("StatefulSet", "postgres") in objects and ("Deployment", "redis") in objects
    job = objects[("Job", "webrl-migrate")]
    assert _containers(job)[0]["command"] == ["webrl", "db", "upgrade"]
    assert all(r["metadata"].get("namespace") == "webrl-dev" for (kind, _), r in objects.items() if kind != "Namespace")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_browser_egress_is_limited_to_the_sites(overlay: str) -> None:
    """Chromium's pods reach the sandbox sites and DNS only (the whole network: test_deploy_k8s_network.py)."""
    resources = _rendered(overlay)
    policy = _by_key(resources)[("NetworkPolicy", "browser-egress")]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    browsers = [r for r in resources if r["kind"] == "Deployment"
                and selector.items() <= r["spec"]["template"]["metadata"]["labels"].items()]
    assert {r["metadata"]["name"] for r in browsers} == {"chromium"}
    assert policy["spec"]["policyTypes"] == ["Egress"]
    allowed = set()
    for rule in policy["spec"]["egress"]:
        for peer in rule["to"]:
            assert "ipBlock" not in peer  # never a CIDR: the internet stays closed
            allowed.add(peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
                        or peer["podSelector"]["matchLabels"].get("k8s-app"))
    assert allowed == {"sites", "kube-dns"}
    sites_ports = {p["port"] for p in policy["spec"]["egress"][0]["ports"]}
    from webrl.config import SANDBOX_PORTS

    assert sites_ports == {SANDBOX_PORTS[s] for s in ("shopping", "shopping_admin", "reddit", "gitlab")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_viewer_serves_webrl_ui_with_the_key_and_reads_the_artifacts_read_only(overlay: str) -> None:
    objects = _by_key(_rendered(overlay))
    pod = objects[("Deployment", "viewer")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][:2] == ["webrl", "ui"]
    port = int(container["command"][container["command"].index("--port") + 1])
    assert objects[("Service", "viewer")]["spec"]["ports"][0]["port"] == port
    assert {e["name"] for e in container["env"]} == {"WEBRL_SECURITY__API_KEY"}
    mount = next(v for v in container["volumeMounts"] if v["name"] == "artifacts")
    claim = next(v for v in pod["volumes"] if v["name"] == "artifacts")["persistentVolumeClaim"]
    assert mount["readOnly"] is True and claim["readOnly"] is True
