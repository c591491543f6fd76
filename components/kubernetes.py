"""Build a real control plane (kube-apiserver, kube-scheduler, kube-controller-manager, kubectl; etcd) from Go modules.

There is no image registry or release download here, only the Go module
proxy, so the binaries are compiled once into the component cache and reused.
k8s.io/kubernetes is not importable as published: its go.mod points every
k8s.io/* staging module at ``./staging/...``. A throwaway wrapper module
(written inside the cache build folder, never the repo) requires it and
replaces each staging module with the published ``v0.<minor>.<patch>``. etcd is a row of components.gotools.

Usage: ``python -m components.kubernetes [1.37.2|1.36.3|all]`` prints the bin folder(s).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from components.cache import cached, check_version, component_main, path_targets
from components.go import GO_VERSION, build_flags, download, go, wrapper_module
from components.gotools import tool_bin

__all__ = ["KUBERNETES", "build_commands", "etcd_bin", "kubernetes_bin", "main"]

#: Which binaries each Kubernetes version provides; older ones only serve skew tests.
KUBERNETES: dict[str, tuple[str, ...]] = {
    "1.37.2": ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"),
    "1.36.3": ("kube-apiserver", "kube-scheduler"),
}

_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", re.MULTILINE)
_GODEBUG = re.compile(r"^godebug\b.*$", re.MULTILINE)


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """The k8s.io/* modules that k8s.io/kubernetes builds from its own staging tree."""
    return sorted(set(_STAGING_REPLACE.findall(kubernetes_gomod)))


def staging_replacements(version: str, kubernetes_gomod: str) -> dict[str, str]:
    """Each staging module replaced by its published ``v0.<minor>.<patch>``."""
    staging_version = "v0." + version.split(".", 1)[1]
    return {mod: f"{mod} {staging_version}" for mod in staging_modules(kubernetes_gomod)}


def version_stamps(version: str) -> dict[str, str]:
    """The -X stamps hack/lib/version.sh sets: without them /version says v0.0.0-master and the agent picks wrong
    rules."""
    major, minor, _ = version.split(".")
    values = {
        "gitVersion": f"v{version}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return {f"{pkg}.{key}": value
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
            for key, value in values.items()}


def build_commands(version: str, commands: tuple[str, ...], out: Path) -> None:
    """``k8s.io/kubernetes/cmd/<command>`` of ``version`` into ``out/bin``, through a wrapper module in ``out/src``.

    The control plane and the node's parts (components.node) are built this way, so they share the Go build cache.
    """
    kubernetes_gomod = download("k8s.io/kubernetes", f"v{version}").gomod.read_text()
    go_line = re.search(r"^go\s+(\S+)", kubernetes_gomod, re.MULTILINE)
    # Kubernetes' own godebug defaults only take effect from the main module, so they are carried over.
    src = wrapper_module(out / "src", "controlplane", {"k8s.io/kubernetes": f"v{version}"},
                         go_version=go_line.group(1) if go_line else GO_VERSION,
                         godebug=_GODEBUG.findall(kubernetes_gomod),
                         replace=staging_replacements(version, kubernetes_gomod))
    (out / "bin").mkdir()
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in commands]
    # -mod=mod lets go resolve the graph and write go.sum in the wrapper; the wrapper has no code of its own.
    go(["build", "-mod=mod", *build_flags(version_stamps(version)), "-o", str(out / "bin") + "/", *packages], cwd=src)
    check_version([out / "bin" / commands[0], "--version"], f"v{version}")


def kubernetes_bin(version: str = "1.37.2") -> Path:
    """Folder holding the Kubernetes binaries of ``version`` (see KUBERNETES), built on first use."""
    if version not in KUBERNETES:
        raise ValueError(f"unsupported Kubernetes version {version!r}; known: {', '.join(KUBERNETES)}")
    return cached("kubernetes", version, lambda out: build_commands(version, KUBERNETES[version], out)) / "bin"


def etcd_bin() -> Path:
    """Folder holding the etcd binary (the control plane's store; a row of components.gotools), built on first use."""
    return tool_bin("etcd")


def main(argv: Sequence[str] | None = None) -> int:
    return component_main("components.kubernetes", path_targets(kubernetes_bin, KUBERNETES), argv)


if __name__ == "__main__":
    sys.exit(main())
