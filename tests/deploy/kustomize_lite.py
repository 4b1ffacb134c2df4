"""A small, offline kustomize: exactly the subset webrl's k8s/ uses, so tests can render the overlays on a
machine without the kustomize binary (kubectl's built-in kustomize is used as a cross-check when present).

Supported kustomization fields, with kustomize v5's semantics:

- ``resources``: files (multi-document YAML) and directories holding a ``kustomization.yaml`` (rendered
  recursively, like a base);
- ``namespace``: set on every namespaced object; a ``Namespace`` object is renamed to it;
- ``labels`` (list of ``{pairs, includeTemplates, includeSelectors}``; ``includeSelectors`` must be false):
  added to ``metadata.labels`` and, with ``includeTemplates``, to pod template labels and StatefulSet
  volumeClaimTemplates;
- ``configMapGenerator`` (``literals`` only; ``behavior`` create or merge): the generated ConfigMap gets
  kustomize's content-hash suffix (see :func:`config_map_hash`) and every reference from a pod spec
  (``envFrom.configMapRef``, ``env.valueFrom.configMapKeyRef``, ``volumes.configMap``) is renamed;
- ``patches`` with ``path`` to a strategic-merge patch: matched on kind + name; maps merge recursively,
  ``null`` deletes a key, lists of objects merge on their Kubernetes patch merge key (``name`` for
  containers, env, volumes, volumeMounts...; ``containerPort`` for container ports; new elements come
  first, as kustomize's kyaml orders them), other lists are replaced; ``$patch: delete`` at the top removes the object;
- ``images`` (``name`` with ``newName`` and/or ``newTag``).

Anything else in a kustomization is an error, so the subset cannot silently drift from what k8s/ uses.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

KNOWN_FIELDS = {"apiVersion", "kind", "namespace", "resources", "labels", "configMapGenerator", "patches", "images"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass",
                  "CustomResourceDefinition", "PriorityClass", "IngressClass"}
POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}

#: Strategic-merge keys of the lists webrl's manifests patch (from the Kubernetes API's x-kubernetes-patch-merge-key).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "env": "name", "volumes": "name", "volumeMounts": "name",
    "imagePullSecrets": "name", "tolerations": "key", "hostAliases": "ip",
}
PORTS_MERGE_KEY = "containerPort"  # container ports; Service ports merge on "port"

Resource = dict[str, Any]


class KustomizeError(ValueError):
    """A kustomization uses something outside the supported subset, or refers to what is not there."""


def config_map_hash(data: dict[str, str]) -> str:
    """kustomize's name suffix for a generated ConfigMap.

    kustomize (kyaml/hasher) hashes the JSON ``{"data": ..., "kind": "ConfigMap", "name": ...}`` (keys sorted,
    Go's json.Marshal) with SHA-256, keeps the first 10 hex digits and maps 0,1,3,a,e to g,h,k,m,t. Its
    ``getNodeValues`` looks the name up as the single field "metadata/name", which is never there, so the
    name it hashes is always "" (checked against kubectl kustomize v5.5 in the tests).
    """
    encoded = json.dumps({"data": data, "kind": "ConfigMap", "name": ""}, sort_keys=True, separators=(",", ":"),
                         ensure_ascii=False)
    encoded = encoded.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")  # Go's escaping
    digest = hashlib.sha256(encoded.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def load_documents(path: Path) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _key(res: Resource) -> tuple[str, str]:
    return res["kind"], res["metadata"]["name"]


# ------------------------------------------------------------------ strategic merge


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """Merge ``patch`` into ``target`` the way a strategic-merge patch does (see the module docstring)."""
    if isinstance(target, dict) and isinstance(patch, dict):
        out = dict(target)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, key)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(target, list) and isinstance(patch, list):
        merge_key = MERGE_KEYS.get(field)
        if field == "ports" and all(isinstance(p, dict) and PORTS_MERGE_KEY in p for p in target + patch):
            merge_key = PORTS_MERGE_KEY
        if merge_key and all(isinstance(p, dict) and merge_key in p for p in target + patch):
            # kustomize (kyaml) lists the patch's new elements first, then the target's, merged in place.
            patches = {item[merge_key]: item for item in patch}
            known = {item[merge_key] for item in target}
            added = [copy.deepcopy(item) for item in patch if item[merge_key] not in known]
            kept = [strategic_merge(item, patches[item[merge_key]]) if item[merge_key] in patches
                    else copy.deepcopy(item) for item in target]
            return added + kept
    return copy.deepcopy(patch)


def apply_patch(resources: list[Resource], patch: Resource) -> list[Resource]:
    key = _key(patch)
    matches = [i for i, res in enumerate(resources) if _key(res) == key]
    if len(matches) != 1:
        raise KustomizeError(f"patch target {key} matches {len(matches)} resources")
    i = matches[0]
    if patch.get("$patch") == "delete":
        return resources[:i] + resources[i + 1:]
    body = {k: v for k, v in patch.items() if k != "$patch"}
    return [*resources[:i], strategic_merge(resources[i], body), *resources[i + 1:]]


# ------------------------------------------------------------------ transformers


def _pod_specs(res: Resource) -> list[dict]:
    if res.get("kind") in POD_TEMPLATE_KINDS:
        return [res.get("spec", {}).get("template", {}).get("spec", {})]
    return []


def _containers(pod: dict) -> list[dict]:
    return list(pod.get("initContainers", [])) + list(pod.get("containers", []))


def rename_config_map_refs(resources: list[Resource], old: str, new: str) -> None:
    for res in resources:
        for pod in _pod_specs(res):
            for container in _containers(pod):
                for source in container.get("envFrom", []):
                    ref = source.get("configMapRef")
                    if ref and ref.get("name") == old:
                        ref["name"] = new
                for env in container.get("env", []):
                    ref = (env.get("valueFrom") or {}).get("configMapKeyRef")
                    if ref and ref.get("name") == old:
                        ref["name"] = new
            for volume in pod.get("volumes", []):
                if (volume.get("configMap") or {}).get("name") == old:
                    volume["configMap"]["name"] = new


def _literals(items: list[str]) -> dict[str, str]:
    data = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise KustomizeError(f"configMapGenerator literal {item!r} is not KEY=VALUE")
        data[key] = value
    return data


def generate_config_maps(resources: list[Resource], generators: list[dict]) -> list[Resource]:
    """Run ``configMapGenerator`` entries: new ConfigMaps (behavior create) or merged data (behavior merge)."""
    for gen in generators:
        unknown = set(gen) - {"name", "literals", "behavior"}
        if unknown:
            raise KustomizeError(f"configMapGenerator fields {sorted(unknown)} are not supported")
        behavior = gen.get("behavior", "create")
        data = _literals(gen.get("literals", []))
        if behavior == "create":
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data,
                  "_generated": gen["name"]}
            resources.append(cm)
        elif behavior == "merge":
            found = [r for r in resources if r.get("_generated") == gen["name"]]
            if len(found) != 1:
                raise KustomizeError(f"configMapGenerator merge: no generated ConfigMap {gen['name']!r} in the bases")
            found[0]["data"] = {**found[0]["data"], **data}
        else:
            raise KustomizeError(f"configMapGenerator behavior {behavior!r} is not supported")
    return resources


def suffix_generated(resources: list[Resource]) -> None:
    """Give each generated ConfigMap its hash suffix (once, at the top level) and rename references."""
    for res in resources:
        base = res.pop("_generated", None)
        if base is not None:
            res["metadata"]["name"] = f"{base}-{config_map_hash(res['data'])}"
            rename_config_map_refs(resources, base, res["metadata"]["name"])


def set_namespace(resources: list[Resource], namespace: str) -> None:
    for res in resources:
        if res["kind"] == "Namespace":
            res["metadata"]["name"] = namespace
        elif res["kind"] not in CLUSTER_SCOPED:
            res["metadata"]["namespace"] = namespace


def add_labels(resources: list[Resource], entries: list[dict]) -> None:
    for entry in entries:
        if entry.get("includeSelectors"):
            raise KustomizeError("labels.includeSelectors is not supported")
        pairs = entry.get("pairs", {})
        for res in resources:
            res["metadata"].setdefault("labels", {}).update(pairs)
            if entry.get("includeTemplates") and res["kind"] in POD_TEMPLATE_KINDS:
                template = res["spec"]["template"].setdefault("metadata", {})
                template.setdefault("labels", {}).update(pairs)
                for claim in res["spec"].get("volumeClaimTemplates", []):  # StatefulSet PVC templates too
                    claim.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)


def set_images(resources: list[Resource], images: list[dict]) -> None:
    for res in resources:
        for pod in _pod_specs(res):
            for container in _containers(pod):
                name, _, tag = container["image"].partition(":")
                for image in images:
                    if image["name"] == name:
                        container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag or 'latest')}"


# ------------------------------------------------------------------ build


def _build(directory: Path) -> list[Resource]:
    kust_path = directory / "kustomization.yaml"
    if not kust_path.exists():
        raise KustomizeError(f"{directory} has no kustomization.yaml")
    kust = yaml.safe_load(kust_path.read_text()) or {}
    unknown = set(kust) - KNOWN_FIELDS
    if unknown:
        raise KustomizeError(f"{kust_path}: fields {sorted(unknown)} are outside the supported subset")
    resources: list[Resource] = []
    for entry in kust.get("resources", []):
        path = (directory / entry).resolve()
        resources.extend(_build(path) if path.is_dir() else load_documents(path))
    resources = generate_config_maps(resources, kust.get("configMapGenerator", []))
    for patch_entry in kust.get("patches", []):
        if set(patch_entry) != {"path"}:
            raise KustomizeError(f"{kust_path}: only `patches: - path:` is supported, got {patch_entry}")
        for patch in load_documents(directory / patch_entry["path"]):
            resources = apply_patch(resources, patch)
    if "namespace" in kust:
        set_namespace(resources, kust["namespace"])
    add_labels(resources, kust.get("labels", []))
    set_images(resources, kust.get("images", []))
    return resources


def build(directory: Path) -> list[Resource]:
    """Render the kustomization in ``directory`` (``kubectl kustomize DIR``) to a list of objects."""
    resources = _build(Path(directory))
    suffix_generated(resources)
    return resources
