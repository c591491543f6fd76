"""The kustomizations rendered offline: a small stand-in for `kustomize build` (tests/cluster checks it against
kubectl's built-in kustomize)."""

from __future__ import annotations

from pathlib import Path

import yaml

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}


def render(directory: Path) -> list[dict]:
    """kustomize build, for resources + namespace + configMapGenerator(files)."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[dict] = []
    for resource in k.get("resources", []):
        path = directory / resource
        objects += render(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for gen in k.get("configMapGenerator", []):
        data = {Path(f).name: (directory / f).read_text() for f in gen.get("files", [])}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    namespace = k.get("namespace")
    for obj in objects:
        if namespace and obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = namespace
        if obj["kind"] == "ClusterRoleBinding" and namespace:
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace
    return objects
