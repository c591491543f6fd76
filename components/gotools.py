"""The Go tools the suite runs, as one table, and the one builder that builds any row.

Each row is a published Go module at a pinned version and the commands built from it, static and stamped with the
version they report (``-X``, as each project's own Makefile does; without it most say ``unknown`` or ``v0.0.0``).
A module without replace directives builds as published (``go install package@version``); one whose go.mod points
at sibling folders (etcd's server) builds through a throwaway wrapper module that requires it
(components.go.wrapper_module). Each row builds once into ``<cache>/<cache name>/<key>``; those names are what
finds an earlier build, so tests/deploy/test_component_cache.py pins them.

The Kubernetes control plane and the node's parts (components.kubernetes, components.node) and the Collector's
distribution (components.collector) are built differently and keep their own modules; they run Go the same way
(components.go).

    python -m components.gotools [NAME|all]   # NAME: a row's name (helm, prometheus, ...); prints bin folders
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from components.cache import cached, check_version, component_main, path_targets
from components.go import build_flags, download, go, wrapper_module

__all__ = ["GO_TOOLS", "GoTool", "build", "main", "tool_bin", "tool_home"]


@dataclass(frozen=True, kw_only=True)
class GoTool:
    """One Go tool: which module and version, what is built from it and how, and where it is cached."""

    name: str  # what callers and ``python -m components`` call it
    module: str
    version: str  # the module's version
    commands: Mapping[str, str]  # binary name -> package inside the module ("" is the module's root package)
    reports: str = ""  # the version the binary prints (default: ``version``); stamped and checked
    stamp: str = ""  # the ``package.Variable`` that ``-X`` sets to ``reports``
    check: Sequence[str] = ()  # arguments that make the first binary print ``reports`` (none: not checked)
    tags: Sequence[str] = ()
    wrapped: bool = False  # the module has replace directives: build through a wrapper module
    bin_dir: str = "bin"  # the binaries' folder inside the cache folder ("" the folder itself)
    cache: str = ""  # the cache folder's name (default: ``name``)
    key: str = ""  # the cache version key (default: ``version``)
    finish: Callable[[GoTool, Path], None] | None = field(default=None, compare=False)  # what else the row needs

    @property
    def cache_name(self) -> str:
        return self.cache or self.name

    @property
    def cache_key(self) -> str:
        return self.key or self.version

    @property
    def release(self) -> str:
        return self.reports or self.version

    @property
    def stamps(self) -> dict[str, str]:
        return {self.stamp: self.release} if self.stamp else {}


def build(tool: GoTool, out: Path) -> None:
    """Build ``tool``'s commands into ``out/<bin_dir>``, check the version they report, then run its ``finish``."""
    bin_dir = out / tool.bin_dir
    bin_dir.mkdir(parents=True, exist_ok=True)
    flags = build_flags(tool.stamps, tool.tags)
    if tool.wrapped:
        src = wrapper_module(out / "src", tool.name, {tool.module: tool.version})
        for binary, package in tool.commands.items():
            # -mod=mod lets go resolve the graph and write go.sum in the wrapper; the wrapper has no code of its own.
            go(["build", "-mod=mod", *flags, "-o", bin_dir / binary, _import_path(tool, package)], cwd=src)
    else:
        gobin = out / ".gobin"
        packages = [f"{_import_path(tool, package)}@{tool.version}" for package in tool.commands.values()]
        go(["install", *flags, *packages], env={"GOBIN": str(gobin)})
        for binary, package in tool.commands.items():
            (gobin / _installed_name(_import_path(tool, package))).rename(bin_dir / binary)
        gobin.rmdir()
    if tool.check:
        check_version([bin_dir / next(iter(tool.commands)), *tool.check], tool.release)
    if tool.finish:
        tool.finish(tool, out)


def _import_path(tool: GoTool, package: str) -> str:
    return f"{tool.module}/{package}" if package else tool.module


def _installed_name(import_path: str) -> str:
    """The name ``go install`` gives a command: the path's last element, or the one before a ``/vN`` suffix."""
    parts = PurePosixPath(import_path).parts
    return parts[-2] if re.fullmatch(r"v\d+", parts[-1]) else parts[-1]


def _krew_probe(tool: GoTool, out: Path) -> None:
    """krew prints its version only with a root of its own to read; the probe's root is removed after."""
    try:
        check_version([out / tool.bin_dir / "kubectl-krew", "version"], tool.release,
                      env={"KREW_ROOT": str(out / "probe-root"), "PATH": "/usr/bin:/bin", "HOME": str(out)})
    finally:
        shutil.rmtree(out / "probe-root", ignore_errors=True)


#: KWOK's upstream stage sets copied from its module, by the folder name they get under ``stages/``.
#: ``node-fast`` makes a Node Ready at once; ``pod-fast`` makes a bound pod Running (init containers completed,
#: sidecars running), completes Job pods and removes deleted pods.
KWOK_STAGE_SETS = {"node-fast": "kustomize/stage/node/fast", "pod-fast": "kustomize/stage/pod/fast"}


def _kwok_stages(tool: GoTool, out: Path) -> None:
    """kwok refuses to start without Stages ("no stages found"); its module ships the upstream ones as YAML."""
    module = download(tool.module, tool.version).dir
    for name, folder in KWOK_STAGE_SETS.items():
        target = out / "stages" / name
        target.mkdir(parents=True)
        stages = sorted(p for p in (module / folder).glob("*.yaml") if p.name != "kustomization.yaml")
        if not stages:
            raise RuntimeError(f"{tool.module}@{tool.version} has no stages under {folder}")
        for stage in stages:
            shutil.copyfile(stage, target / stage.name)


_TOOLS = (
    # The chart tests: lint, template, install and upgrade into the real API server.
    GoTool(name="helm", module="helm.sh/helm/v4", version="v4.3.1", commands={"helm": "cmd/helm"},
           stamp="helm.sh/helm/v4/internal/version.version", check=("version", "--short")),
    # The plugin install test; kept as kubectl-krew so that kubectl finds it as the krew plugin on PATH.
    GoTool(name="krew", module="sigs.k8s.io/krew", version="v0.4.3", commands={"kubectl-krew": "cmd/krew"},
           stamp="sigs.k8s.io/krew/internal/version.gitTag", finish=_krew_probe),
    # Simulated nodes against any API server (bin/kwok and stages/<set>/*.yaml).
    GoTool(name="kwok", module="sigs.k8s.io/kwok", version="v0.8.0", commands={"kwok": "cmd/kwok"},
           stamp="sigs.k8s.io/kwok/pkg/consts.Version", check=("--version",), finish=_kwok_stages),
    # crane: `crane registry serve` is the registry the node tests' kubelets pull the agent's image from.
    GoTool(name="registry", module="github.com/google/go-containerregistry", version="v0.22.1",
           commands={"crane": "cmd/crane"}, stamp="github.com/google/go-containerregistry/cmd/crane/cmd.Version",
           check=("version",)),
    # Prometheus 3 (module v0.3XX.Y is release 3.XX.Y) and promtool; without the web UI bundle (it needs npm) and the
    # cloud service discoveries (remove_all_sd), with Kubernetes discovery (enable_kubernetes_sd: the configuration
    # the Prometheus Operator writes discovers its targets so); the other tests use static and file discovery. The
    # cache name predates the Debian 2.x build's removal and is kept; the key names the discovery added.
    GoTool(name="prometheus", module="github.com/prometheus/prometheus", version="v0.316.0", reports="3.16.0",
           commands={"prometheus": "cmd/prometheus", "promtool": "cmd/promtool"},
           stamp="github.com/prometheus/common/version.Version", tags=("remove_all_sd", "enable_kubernetes_sd"),
           bin_dir="", cache="prometheus3", key="v0.316.0-k8s-sd"),
    # The OpenTelemetry Collector's builder (ocb); components.collector builds the distribution with it.
    GoTool(name="otelcol-builder", module="go.opentelemetry.io/collector/cmd/builder", version="v0.165.0",
           commands={"builder": ""}, bin_dir=""),
    # etcd 3.6: its server module's root package is the etcd main, and its go.mod replaces its siblings with ../
    # paths, so `go install module@version` refuses it.
    GoTool(name="etcd", module="go.etcd.io/etcd/server/v3", version="v3.6.16", reports="3.6.16",
           commands={"etcd": ""}, check=("--version",), wrapped=True, key="3.6.16"),
    # The Prometheus Operator (tests/cluster/test_prometheus_operator.py): only the operator command, which turns a
    # Prometheus object, its ServiceMonitors and PrometheusRules into the config Secret and rule ConfigMaps. v0.85.0
    # is the only version the module proxy serves here; its go.mod replaces pkg/apis and pkg/client with ./ paths.
    GoTool(name="prometheus-operator", module="github.com/prometheus-operator/prometheus-operator",
           version="v0.85.0", reports="0.85.0", commands={"prometheus-operator": "cmd/operator"},
           stamp="github.com/prometheus/common/version.Version", check=("--short-version",), wrapped=True),
)
GO_TOOLS: dict[str, GoTool] = {tool.name: tool for tool in _TOOLS}


def tool_home(name: str) -> Path:
    """The cache folder of Go tool ``name`` (a row of GO_TOOLS), built on first use."""
    tool = GO_TOOLS[name]
    return cached(tool.cache_name, tool.cache_key, lambda out: build(tool, out))


def tool_bin(name: str) -> Path:
    """The folder holding Go tool ``name``'s binaries, built on first use."""
    return tool_home(name) / GO_TOOLS[name].bin_dir


def main(argv: Sequence[str] | None = None) -> int:
    return component_main("components.gotools", path_targets(tool_bin, GO_TOOLS), argv)


if __name__ == "__main__":
    sys.exit(main())
