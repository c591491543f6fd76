"""Build a real control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl) from Go modules.

There is no image registry or release download here, only the Go module
proxy, so the binaries are compiled once into the component cache and reused.
k8s.io/kubernetes is not importable as published: its go.mod points every
k8s.io/* staging module at ``./staging/...``. A throwaway wrapper module
(written inside the cache build folder, never the repo) requires it and
replaces each staging module with the published ``v0.<minor>.<patch>``.

Usage: ``python -m components.kubernetes [1.37.2|1.36.3|etcd|all]`` prints the bin folder(s).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from components.cache import cached, check_version, run

__all__ = ["ETCD_VERSION", "KUBERNETES", "build_commands", "etcd_bin", "kubernetes_bin", "main"]

ETCD_VERSION = "3.6.16"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"  # in v3.6 this module's root package is the etcd main

#: Which binaries each Kubernetes version provides; older ones only serve skew tests.
KUBERNETES: dict[str, tuple[str, ...]] = {
    "1.37.2": ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"),
    "1.36.3": ("kube-apiserver", "kube-scheduler"),
}

_WRAPPER_MODULE = "nra.invalid/controlplane"
_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", re.MULTILINE)
_GODEBUG = re.compile(r"^godebug\b.*$", re.MULTILINE)


def _go(*args: str, cwd: Path | None = None) -> str:
    """A Go query whose output we parse (not a build step, so no tail trimming needed)."""
    proc = subprocess.run(["go", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"go {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def nice_go() -> list[str]:
    """Builds share two cores with other builds and tests; yield to them."""
    return ["nice", "-n", "10", "go"]


def _module_gomod(path: str, version: str) -> str:
    """The go.mod of a published module version, fetched through the configured proxy."""
    info = json.loads(_go("mod", "download", "-json", f"{path}@{version}"))
    if "Error" in info:
        raise RuntimeError(f"go mod download {path}@{version}: {info['Error']}")
    return Path(info["GoMod"]).read_text()


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """The k8s.io/* modules that k8s.io/kubernetes builds from its own staging tree."""
    return sorted(set(_STAGING_REPLACE.findall(kubernetes_gomod)))


def wrapper_gomod(version: str, kubernetes_gomod: str) -> str:
    """A go.mod that can build k8s.io/kubernetes commands: every staging module pinned to ``v0.<minor>.<patch>``."""
    staging_version = "v0." + version.split(".", 1)[1]
    go_line = re.search(r"^go\s+(\S+)", kubernetes_gomod, re.MULTILINE)
    lines = [f"module {_WRAPPER_MODULE}", "", f"go {go_line.group(1) if go_line else '1.26.0'}", ""]
    # Kubernetes' own godebug defaults only take effect from the main module, so carry them over.
    lines += _GODEBUG.findall(kubernetes_gomod) + [""]
    lines += [f"require k8s.io/kubernetes v{version}", "", "replace ("]
    lines += [f"\t{mod} => {mod} {staging_version}" for mod in staging_modules(kubernetes_gomod)]
    lines += [")", ""]
    return "\n".join(lines)


def version_ldflags(version: str) -> str:
    """The -X flags hack/lib/version.sh sets: without them /version says v0.0.0-master and the agent picks wrong rules."""
    major, minor, _ = version.split(".")
    values = {
        "gitVersion": f"v{version}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def build_commands(version: str, commands: tuple[str, ...], out: Path) -> None:
    """``k8s.io/kubernetes/cmd/<command>`` of ``version`` into ``out/bin``, through a wrapper module in ``out/src``.

    The control plane and the node's parts (components.node) are built this way, so they share the Go build cache.
    """
    src = out / "src"
    src.mkdir()
    (src / "go.mod").write_text(wrapper_gomod(version, _module_gomod("k8s.io/kubernetes", f"v{version}")))
    (out / "bin").mkdir()
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in commands]
    # -mod=mod lets go resolve the graph and write go.sum in the wrapper; the wrapper has no code of its own.
    run([*nice_go(), "build", "-mod=mod", "-trimpath", "-ldflags", version_ldflags(version),
         "-o", str(out / "bin") + "/", *packages], cwd=src, env={"CGO_ENABLED": "0"})
    check_version([out / "bin" / commands[0], "--version"], f"v{version}")


def _build_etcd(out: Path) -> None:
    src = out / "src"
    src.mkdir()
    # etcd's server go.mod replaces its sibling modules with ../ paths, so `go install module@version` refuses it.
    (src / "go.mod").write_text(f"module {_WRAPPER_MODULE}\n\ngo 1.26.0\n\nrequire {ETCD_MODULE} v{ETCD_VERSION}\n")
    (out / "bin").mkdir()
    run([*nice_go(), "build", "-mod=mod", "-trimpath", "-ldflags", "-s -w",
         "-o", str(out / "bin" / "etcd"), ETCD_MODULE], cwd=src, env={"CGO_ENABLED": "0"})
    check_version([out / "bin" / "etcd", "--version"], ETCD_VERSION)


def kubernetes_bin(version: str = "1.37.2") -> Path:
    """Folder holding the Kubernetes binaries of ``version`` (see KUBERNETES), built on first use."""
    if version not in KUBERNETES:
        raise ValueError(f"unsupported Kubernetes version {version!r}; known: {', '.join(KUBERNETES)}")
    return cached("kubernetes", version, lambda out: build_commands(version, KUBERNETES[version], out)) / "bin"


def etcd_bin() -> Path:
    """Folder holding the etcd binary, built on first use."""
    return cached("etcd", ETCD_VERSION, _build_etcd) / "bin"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = args[0] if args else "all"
    if target not in (*KUBERNETES, "etcd", "all"):
        print(f"usage: python -m components.kubernetes [{'|'.join(KUBERNETES)}|etcd|all]", file=sys.stderr)
        return 2
    if target in ("etcd", "all"):
        print(etcd_bin())
    for version in KUBERNETES:
        if target in (version, "all"):
            print(kubernetes_bin(version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
