"""Rendered k8s/ objects read as a network: the pods (one per workload, by its name) and the connections the
NetworkPolicies allow, as ``(from, to, port)`` edges, so that tests compare them with the call graph.

Only the subset k8s/ uses is understood; anything else is an error, so the reading cannot silently drift:
``podSelector``/``namespaceSelector`` with ``matchLabels``, ``ipBlock`` without ``except``, ports by number or by
the name of a container port of the destination pod. A peer outside the namespace is ``"<namespace>/<app or *>"``
(``kube-system/kube-dns``, ``monitoring/*``), an address block is ``"cidr:<block>"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

POD_KINDS = {"Deployment", "StatefulSet", "Job"}
NAME = "app.kubernetes.io/name"

Edge = tuple[str, str, int]


@dataclass
class Pod:
    name: str
    labels: dict[str, str]
    spec: dict[str, Any]
    ports: dict[str, int] = field(default_factory=dict)  # container port name -> number


def pods(resources: list[dict]) -> dict[str, Pod]:
    """The pod template of every workload, by the workload's name."""
    out = {}
    for res in resources:
        if res["kind"] in POD_KINDS:
            template = res["spec"]["template"]
            ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])
                     if "name" in p}
            out[res["metadata"]["name"]] = Pod(res["metadata"]["name"], template["metadata"]["labels"],
                                               template["spec"], ports)
    return out


def policies(resources: list[dict], direction: str) -> list[dict]:
    """NetworkPolicies with ``direction`` ("Ingress" or "Egress") in their policyTypes."""
    return [r for r in resources if r["kind"] == "NetworkPolicy" and direction in r["spec"]["policyTypes"]]


def selects(selector: dict, labels: dict[str, str]) -> bool:
    if set(selector) - {"matchLabels"}:
        raise ValueError(f"selector {selector} is outside the subset (matchLabels only)")
    return selector.get("matchLabels", {}).items() <= labels.items()


def selected(policy: dict, all_pods: dict[str, Pod]) -> list[Pod]:
    return [pod for pod in all_pods.values() if selects(policy["spec"]["podSelector"], pod.labels)]


def _peers(rule_peers: list[dict] | None, all_pods: dict[str, Pod]) -> list[str | Pod]:
    if rule_peers is None:
        return ["*"]  # no from/to: anyone
    out: list[str | Pod] = []
    for peer in rule_peers:
        if "ipBlock" in peer:
            if set(peer["ipBlock"]) != {"cidr"}:
                raise ValueError(f"ipBlock {peer['ipBlock']} is outside the subset")
            out.append(f"cidr:{peer['ipBlock']['cidr']}")
        elif "namespaceSelector" in peer:
            namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            labels = peer.get("podSelector", {}).get("matchLabels", {})
            out.append(f"{namespace}/{labels.get(NAME) or labels.get('k8s-app') or '*'}")
        else:
            out.extend(pod for pod in all_pods.values() if selects(peer["podSelector"], pod.labels))
    return out


def _port_numbers(rule_ports: list[dict] | None, destination: str | Pod) -> list[int]:
    if rule_ports is None:
        return [0]  # every port
    numbers = []
    for port in rule_ports:
        value = port["port"]
        if isinstance(value, str):
            if not isinstance(destination, Pod):
                raise ValueError(f"named port {value!r} towards {destination}, which has no container ports")
            value = destination.ports[value]
        numbers.append(value)
    return numbers


def _label(peer: str | Pod) -> str:
    return peer.name if isinstance(peer, Pod) else peer


def ingress_edges(resources: list[dict]) -> set[Edge]:
    """``(caller, pod, port)`` for every connection some ingress rule admits."""
    all_pods, edges = pods(resources), set()
    for policy in policies(resources, "Ingress"):
        for target in selected(policy, all_pods):
            for rule in policy["spec"].get("ingress", []):
                for peer in _peers(rule.get("from"), all_pods):
                    edges |= {(_label(peer), target.name, port) for port in _port_numbers(rule.get("ports"), target)}
    return edges


def egress_edges(resources: list[dict]) -> dict[str, set[Edge]]:
    """For each pod some egress policy selects: ``(pod, destination, port)`` for every connection it may open."""
    all_pods, out = pods(resources), {}
    for policy in policies(resources, "Egress"):
        for source in selected(policy, all_pods):
            edges = out.setdefault(source.name, set())
            for rule in policy["spec"].get("egress", []):
                for peer in _peers(rule.get("to"), all_pods):
                    edges |= {(source.name, _label(peer), port) for port in _port_numbers(rule.get("ports"), peer)}
    return out
