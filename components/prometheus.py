"""A real Prometheus (and promtool) for tests: Debian's packaged 2.x, or 3.x built from Go modules.

Debian packages Prometheus 2.53 (trixie) and 2.42 (bookworm). They lack the
OTLP receiver but scrape the Collector's prometheus exporter and evaluate rules
and alerts, which is what the end-to-end tests need; they are fetched in
seconds through components.debian. Prometheus 3 is on the Go module proxy
(module versions v0.3XX.Y are releases 3.XX.Y); it is compiled without the
web UI bundle (the ``builtinassets`` tag is off by default, the UI needs npm)
and without the cloud service-discovery plugins (``remove_all_sd``), which
only the static and file discovery the tests use survive.

    python -m components.prometheus            # prints prometheus and promtool paths
    python -m components.prometheus --v3       # also builds Prometheus 3
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from components.cache import cached, run
from components.debian import debian_binary

__all__ = ["DEBIAN_SUITE", "PROMETHEUS3_VERSION", "prometheus_bin", "promtool_bin", "prometheus3_bin",
           "promtool3_bin"]

DEBIAN_SUITE = "trixie"
PROMETHEUS3_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS3_VERSION = "v0.316.0"  # Prometheus 3.16.0
# Bookworm ships promtool inside the prometheus package; trixie splits it out.
_PROMTOOL_PACKAGE = {"bookworm": "prometheus"}


def prometheus_bin(suite: str = DEBIAN_SUITE) -> Path:
    """Debian ``suite``'s prometheus server binary."""
    return debian_binary("prometheus", "usr/bin/prometheus", suite)


def promtool_bin(suite: str = DEBIAN_SUITE) -> Path:
    """Debian ``suite``'s promtool, which checks configs and rule files and runs rule unit tests."""
    return debian_binary(_PROMTOOL_PACKAGE.get(suite, "promtool"), "usr/bin/promtool", suite)


def _release(module_version: str) -> str:
    """``v0.316.0`` -> ``3.16.0``: the Prometheus release a module version stands for."""
    minor_patch = module_version.removeprefix("v0.")
    minor, _, patch = minor_patch.partition(".")
    return f"{int(minor) // 100}.{int(minor) % 100}.{patch}"


def _build_prometheus3(out: Path) -> None:
    """``go install`` both commands at one module version into ``out`` (no replace directives, so @version works)."""
    go = shutil.which("go")
    if not go:
        raise RuntimeError("the go command is needed to build Prometheus 3")
    ldflags = f"-s -w -X github.com/prometheus/common/version.Version={_release(PROMETHEUS3_VERSION)}"
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    for cmd in ("prometheus", "promtool"):
        run([*nice, go, "install", "-trimpath", "-tags", "remove_all_sd", f"-ldflags={ldflags}",
             f"{PROMETHEUS3_MODULE}/cmd/{cmd}@{PROMETHEUS3_VERSION}"], env={"GOBIN": str(out), "CGO_ENABLED": "0"})


def prometheus3_bin() -> Path:
    """Prometheus 3 built from Go modules (has the OTLP receiver: ``--web.enable-otlp-receiver``)."""
    return cached("prometheus3", PROMETHEUS3_VERSION, _build_prometheus3) / "prometheus"


def promtool3_bin() -> Path:
    """promtool from the same Prometheus 3 build."""
    return prometheus3_bin().parent / "promtool"


def main(argv: list[str]) -> int:
    """Print the binaries' paths, fetching or building them first if needed."""
    print(prometheus_bin())
    print(promtool_bin())
    if "--v3" in argv:
        print(prometheus3_bin())
        print(promtool3_bin())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
