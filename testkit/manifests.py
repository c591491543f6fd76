"""The kustomizations rendered offline: a small stand-in for `kustomize build` (tests/cluster checks it against
kubectl's built-in kustomize)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from testkit.repo import REPO

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
AUTHORIZATION = REPO / "daemonset" / "apiserver"
#: The pieces of the webhook's user in the shipped file, which kustomization.yaml's replacements fill in.
SHIPPED_USER_PIECES = "' + 'node-requests-agent' + ':' + 'node-requests-agent' + '"


def render(directory: Path) -> list[dict]:
    """kustomize build, for resources + namespace + configMapGenerator(files, no name hash) + replacements."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[dict] = []
    for resource in k.get("resources", []):
        path = directory / resource
        objects += render(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for gen in k.get("configMapGenerator", []):
        assert k.get("generatorOptions", {}).get("disableNameSuffixHash"), "the stand-in adds no name hash"
        data = {Path(f).name: (directory / f).read_text() for f in gen.get("files", [])}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    namespace = k.get("namespace")
    for obj in objects:
        if namespace and obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = namespace
        if obj["kind"] == "Namespace" and namespace:
            obj["metadata"]["name"] = namespace
        if obj["kind"] == "ClusterRoleBinding" and namespace:
            # kustomize fills a ServiceAccount subject's missing namespace; one that names a namespace is left alone
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount" and not subject.get("namespace"):
                    subject["namespace"] = namespace
    for replacement in k.get("replacements", []):  # after every other transformer, as kustomize runs them
        (source,) = [o for o in objects if _selected(o, replacement["source"])]
        value = _field(source, _path(replacement["source"].get("fieldPath", "metadata.name")))
        for target in replacement["targets"]:
            for obj in (o for o in objects if _selected(o, target["select"])):
                for field_path in target["fieldPaths"]:
                    _replace(obj, _path(field_path), value, target.get("options", {}))
    return objects


def _selected(obj: dict, select: dict) -> bool:
    return obj["kind"] == select["kind"] and obj["metadata"]["name"] == select["name"]


def _path(field_path: str) -> list[str]:
    """kustomize's field path: dot-separated, a bracketed segment ([key.with.dots] or [field=value]) kept whole."""
    return [a or b for a, b in re.findall(r"\[([^\]]*)\]|([^.\[\]]+)", field_path)]


def _step(node, segment: str):
    if isinstance(node, list):  # [field=value]: the list element whose field has the value
        field, value = segment.split("=", 1)
        (found,) = [item for item in node if item.get(field) == value]
        return found
    return node[segment]


def _field(obj: dict, path: list[str]) -> str:
    node = obj
    for segment in path:
        node = _step(node, segment)
    return node


def _replace(obj: dict, path: list[str], value: str, options: dict) -> None:
    parent = _field(obj, path[:-1])
    key = path[-1]
    delimiter = options.get("delimiter")
    if delimiter:  # replace one piece of the value split at the delimiter, as kustomize's options do
        pieces = parent[key].split(delimiter)
        pieces[options.get("index", 0)] = value
        value = delimiter.join(pieces)
    parent[key] = value


def restricted_user(authorization_config: str) -> str:
    """The user whose cross-node reads the own-node webhook of an authorization configuration (daemonset/apiserver/
    authorization-config.yaml, or as rendered) refuses: its ``request.user == ...`` condition, a concatenation of
    quoted literals, evaluated. Anything else there is an error, not a guess."""
    config = yaml.safe_load(authorization_config)
    (webhook,) = [a for a in config["authorizers"] if a["type"] == "Webhook"]
    (condition,) = [c["expression"] for c in webhook["webhook"]["matchConditions"] if "request.user" in c["expression"]]
    match = re.fullmatch(r"request\.user == ((?:'[^']*'(?: \+ |$))+)", condition)
    assert match, f"not a comparison of request.user with literals: {condition}"
    return "".join(re.findall(r"'([^']*)'", match.group(1)))


def assert_restriction_follows_the_service_account(objects: list[dict]) -> str:
    """The ConfigMap's authorization configuration restricts exactly the ServiceAccount the DaemonSet's pods run as
    and the ClusterRoleBinding grants; otherwise it is the shipped file. Returns that user."""
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    namespace, name = account["metadata"]["namespace"], account["metadata"]["name"]
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == name
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    assert config_map["metadata"]["namespace"] == namespace
    data = config_map["data"]
    user = f"system:serviceaccount:{namespace}:{name}"
    assert restricted_user(data["authorization-config.yaml"]) == user
    assert data["authorization-config.yaml"] == (AUTHORIZATION / "authorization-config.yaml").read_text().replace(
        SHIPPED_USER_PIECES, f"' + '{namespace}' + ':' + '{name}' + '")
    assert data["own-node-deny.kubeconfig"] == (AUTHORIZATION / "own-node-deny.kubeconfig").read_text()
    # The webhook's kubeconfig is the file beside it, where NOTES.txt and docs/deployment.md put both.
    (webhook,) = [a for a in yaml.safe_load(data["authorization-config.yaml"])["authorizers"] if a["type"] == "Webhook"]
    assert webhook["webhook"]["connectionInfo"]["kubeConfigFile"] == \
        "/etc/kubernetes/node-requests-agent/own-node-deny.kubeconfig"
    return user
