"""The monitoring profile and the Grafana dashboard: Prometheus scrapes exactly the APIs compose runs, Grafana
provisions it and the dashboard from files that exist, and the dashboard names only series the services
export (read from each service's real /metrics)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
import yaml
from compose_lite import COMPOSE_FILE, container_port_of, load
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

ROOT = COMPOSE_FILE.parent
DASHBOARD = ROOT / "k8s" / "monitoring" / "webrl-dashboard.json"
PROMETHEUS_CONFIG = ROOT / "docker" / "monitoring" / "prometheus.yml"
SERVICE_DIRS = sorted(p.name for p in (ROOT / "services").iterdir() if p.is_dir() and not p.name.startswith("_"))
#: The sample names a metric family of each type exposes (prometheus_client's text format).
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


def exported_series() -> dict[str, set[str]]:
    """Service folder -> the series its app's /metrics declares (``# TYPE`` lines, samples or not)."""
    out = {}
    for folder in SERVICE_DIRS:
        app = importlib.import_module(f"services.{folder}.app").app
        text = TestClient(app).get("/metrics").text  # no lifespan: no model loaded, every family still declared
        out[folder] = {family.name + suffix for family in text_string_to_metric_families(text)
                       for suffix in SUFFIXES.get(family.type, ("",))}
    return out


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_dashboard_names_only_series_the_services_export() -> None:
    exported = exported_series()
    every = set().union(*exported.values())
    named = {name for expr in dashboard_expressions()  # the series, not the labels a `by (...)` groups by
             for name in re.findall(r"\bwebrl_[a-z0-9_]+", re.sub(r"\bby \([^)]*\)", "", expr))}
    assert named and named <= every, sorted(named - every)
    for series in ("webrl_queue_depth", "webrl_browser_episodes_in_flight", "webrl_actor_tokens_generated_total",
                   "webrl_http_request_seconds_bucket"):  # what the dashboard shows
        assert series in named, series
    assert "webrl_actor_tokens_generated_total" in exported["actor"]
    assert "webrl_browser_episodes_in_flight" in exported["browser_pool"]
    for folder, series in exported.items():  # shared by every service through create_app
        assert {"webrl_queue_depth", "webrl_http_request_seconds_bucket", "webrl_http_requests_total"} <= series, folder


def test_dashboard_groups_requests_by_the_service_label_each_service_sets() -> None:
    """Under Prometheus' stock ``kubernetes-pods`` job every pod's ``job`` is the same: the request panels group by
    ``webrl_service``, which each service's own series carry (its folder's name)."""
    http = [expr for expr in dashboard_expressions() if "webrl_http_" in expr]
    assert http and all("by (webrl_service, route" in expr and "job" not in expr for expr in http), http
    for folder in SERVICE_DIRS:
        client = TestClient(importlib.import_module(f"services.{folder}.app").app)
        client.get("/metrics")
        families = text_string_to_metric_families(client.get("/metrics").text)
        samples = [s for f in families if f.name.startswith("webrl_http_") for s in f.samples]
        assert samples and {s.labels["webrl_service"] for s in samples} == {folder}, folder


def test_dashboard_panels_use_the_selected_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and all(t["datasource"] == panel["datasource"] for t in panel["targets"])


@pytest.fixture(scope="module")
def monitoring() -> dict[str, dict]:
    return {name: svc for name, svc in load()["services"].items() if "monitoring" in (svc.get("profiles") or [])}


def test_prometheus_scrapes_every_api_compose_runs(monitoring: dict[str, dict]) -> None:
    apis = {name: container_port_of(svc["command"]) for name, svc in load()["services"].items()
            if (svc.get("command") or [""])[0] == "uvicorn"}
    assert sorted(apis) == sorted(folder.replace("_", "-") for folder in SERVICE_DIRS)
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    jobs = {job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]]
            for job in config["scrape_configs"]}
    assert jobs == {name: [f"{name}:{port}"] for name, port in apis.items()}
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in config["scrape_configs"])
    mounts = monitoring["prometheus"]["volumes"]
    assert "./docker/monitoring/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts


def test_grafana_provisions_prometheus_and_the_dashboard_from_files_that_exist(monitoring: dict[str, dict]) -> None:
    grafana = monitoring["grafana"]
    assert grafana["depends_on"] == {"prometheus": {"condition": "service_healthy"}}
    mounts = {target.split(":")[0]: source for source, target in
              (volume.split(":", 1) for volume in grafana["volumes"] if volume.startswith("./"))}
    assert (ROOT / mounts["/etc/grafana/provisioning"]).is_dir()
    assert Path(ROOT / mounts["/var/lib/grafana/dashboards/webrl-dashboard.json"]).resolve() == DASHBOARD
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    port = monitoring["prometheus"]["healthcheck"]["test"][-1].split(":")[-1].split("/")[0]
    assert source["type"] == "prometheus" and source["url"] == f"http://prometheus:{port}"
    provider = yaml.safe_load((provisioning / "dashboards" / "webrl.yml").read_text())["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    for svc in monitoring.values():  # reachable from this machine only
        assert all(str(port).startswith("127.0.0.1:") for port in svc["ports"])
