"""A real OpenTelemetry Collector for tests, built from Go modules with the official builder.

No collector image or release archive can be downloaded here, but the Go module
proxy serves the collector's modules, so ``ocb`` (cmd/builder) generates the
small ``main.go``/``components.go`` module described by
``otel-config/builder-config.yaml`` and compiles it. The result is cached under
a key made of the builder version and a hash of the manifest, so editing the
manifest triggers exactly one rebuild and a warm call only hashes a file.

    python -m components.collector      # prints the otelcol binary's path
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from components.cache import cached, run

__all__ = ["BUILDER_VERSION", "MANIFEST", "builder_bin", "otelcol_bin"]

BUILDER_VERSION = "v0.165.0"
BUILDER_MODULE = "go.opentelemetry.io/collector/cmd/builder"
MANIFEST = Path(__file__).resolve().parent.parent / "otel-config" / "builder-config.yaml"
DIST_NAME = "otelcol-nra"  # dist.name and dist.output_path in the manifest
#: This repository's own Collector components (Go modules the manifest names by ``path``), copied next to it.
LOCAL_MODULES = ("nodeidentityprocessor",)


def _nice(argv: list[str | os.PathLike[str]]) -> list[str | os.PathLike[str]]:
    """Go builds share the machine with other builds: run them at low priority."""
    return ["nice", "-n", "10", *argv] if shutil.which("nice") else argv


def _go() -> str:
    """The ``go`` client; without it nothing here can be built."""
    found = shutil.which("go")
    if not found:
        raise RuntimeError("the go command is needed to build the OpenTelemetry Collector")
    return found


def builder_bin() -> Path:
    """The ``builder`` binary, installed once with ``go install`` into its own cache folder."""
    def build(out: Path) -> None:
        run(_nice([_go(), "install", f"{BUILDER_MODULE}@{BUILDER_VERSION}"]), env={"GOBIN": str(out)})

    return cached("otelcol-builder", BUILDER_VERSION, build) / "builder"


def _manifest_key(manifest: Path) -> str:
    """Cache key: builder version plus the manifest's and the local modules' content, so any edit rebuilds once."""
    h = hashlib.sha256(manifest.read_bytes())
    for name in LOCAL_MODULES:
        for path in sorted((manifest.parent / name).rglob("*")):
            if path.is_file():
                h.update(str(path.relative_to(manifest.parent)).encode() + b"\0" + path.read_bytes())
    digest = h.hexdigest()[:16]
    return f"{BUILDER_VERSION}-{digest}"


def otelcol_bin(manifest: Path = MANIFEST) -> Path:
    """The collector binary described by ``manifest``, built on first use."""
    def build(out: Path) -> None:
        shutil.copy(manifest, out / "builder-config.yaml")  # records what was built
        for name in LOCAL_MODULES:
            shutil.copytree(manifest.parent / name, out / name)
        # The builder writes sources and binary to dist.output_path, relative to its cwd.
        run(_nice([builder_bin(), "--config", out / "builder-config.yaml"]), cwd=out)
        if not (out / DIST_NAME / DIST_NAME).is_file():
            raise RuntimeError(f"builder finished but {out / DIST_NAME / DIST_NAME} is missing")

    return cached(DIST_NAME, _manifest_key(manifest), build) / DIST_NAME / DIST_NAME


def main() -> int:
    """Print the binary's path (building it first if needed) for shell use."""
    print(otelcol_bin())
    return 0


if __name__ == "__main__":
    sys.exit(main())
