"""A real Prometheus 3 (and its promtool) for tests, built from its Go module.

Prometheus 3 is on the Go module proxy (module versions v0.3XX.Y are releases
3.XX.Y). It is compiled without the web UI bundle (the ``builtinassets`` tag is
off by default, the UI needs npm) and without the cloud service-discovery
plugins (``remove_all_sd``), so only the static and file discovery the tests
use remain. The same build gives promtool, which checks the shipped rules.
It is the one Prometheus the suite runs: no test needs a second version
(docs/testing.md says why Debian's 2.x went).

    python -m components.prometheus            # builds once, prints prometheus and promtool paths
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from components.cache import cached, run

__all__ = ["PROMETHEUS_VERSION", "prometheus_bin", "promtool_bin"]

PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_VERSION = "v0.316.0"  # Prometheus 3.16.0


def _release(module_version: str) -> str:
    """``v0.316.0`` -> ``3.16.0``: the Prometheus release a module version stands for."""
    minor_patch = module_version.removeprefix("v0.")
    minor, _, patch = minor_patch.partition(".")
    return f"{int(minor) // 100}.{int(minor) % 100}.{patch}"


def _build(out: Path) -> None:
    """``go install`` both commands at one module version into ``out`` (no replace directives, so @version works)."""
    go = shutil.which("go")
    if not go:
        raise RuntimeError("the go command is needed to build Prometheus 3")
    ldflags = f"-s -w -X github.com/prometheus/common/version.Version={_release(PROMETHEUS_VERSION)}"
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    for cmd in ("prometheus", "promtool"):
        run([*nice, go, "install", "-trimpath", "-tags", "remove_all_sd", f"-ldflags={ldflags}",
             f"{PROMETHEUS_MODULE}/cmd/{cmd}@{PROMETHEUS_VERSION}"], env={"GOBIN": str(out), "CGO_ENABLED": "0"})


def prometheus_bin() -> Path:
    """The Prometheus 3 server (remote-write receiver, OTLP receiver, scraping, rules and alerts)."""
    # The cache key predates the Debian build's removal: kept, so existing caches stay valid.
    return cached("prometheus3", PROMETHEUS_VERSION, _build) / "prometheus"


def promtool_bin() -> Path:
    """promtool from the same build: checks configs and rule files."""
    return prometheus_bin().parent / "promtool"


def main(argv: list[str]) -> int:
    """Print both binaries' paths, building them first if needed (``--v3``, once needed, is accepted and ignored)."""
    unknown = [a for a in argv if a != "--v3"]
    if unknown:
        print(__doc__, file=sys.stderr)
        return 2
    print(prometheus_bin())
    print(promtool_bin())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
