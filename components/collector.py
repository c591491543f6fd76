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
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from components.cache import cached, component_main, run
from components.go import GO_ENV
from components.gotools import GO_TOOLS, tool_bin

__all__ = ["MANIFEST", "builder_bin", "main", "otelcol_bin"]

MANIFEST = Path(__file__).resolve().parent.parent / "otel-config" / "builder-config.yaml"
DIST_NAME = "otelcol-nra"  # dist.name and dist.output_path in the manifest
#: This repository's own Collector components (Go modules the manifest names by ``path``), copied next to it.
LOCAL_MODULES = ("nodeidentityprocessor",)


def builder_bin() -> Path:
    """The ``builder`` binary (a row of components.gotools), installed once into its own cache folder."""
    return tool_bin("otelcol-builder") / "builder"


def _manifest_key(manifest: Path) -> str:
    """Cache key: builder version plus the manifest's and the local modules' content, so any edit rebuilds once."""
    h = hashlib.sha256(manifest.read_bytes())
    for name in LOCAL_MODULES:
        for path in sorted((manifest.parent / name).rglob("*")):
            if path.is_file():
                h.update(str(path.relative_to(manifest.parent)).encode() + b"\0" + path.read_bytes())
    digest = h.hexdigest()[:16]
    return f"{GO_TOOLS['otelcol-builder'].version}-{digest}"


def otelcol_bin(manifest: Path = MANIFEST) -> Path:
    """The collector binary described by ``manifest``, built on first use."""
    def build(out: Path) -> None:
        shutil.copy(manifest, out / "builder-config.yaml")  # records what was built
        for name in LOCAL_MODULES:
            shutil.copytree(manifest.parent / name, out / name)
        # The builder writes sources and binary to dist.output_path, relative to its cwd; it runs go itself.
        run([builder_bin(), "--config", out / "builder-config.yaml"], cwd=out, env=GO_ENV, nice=True)
        if not (out / DIST_NAME / DIST_NAME).is_file():
            raise RuntimeError(f"builder finished but {out / DIST_NAME / DIST_NAME} is missing")

    return cached(DIST_NAME, _manifest_key(manifest), build) / DIST_NAME / DIST_NAME


def main(argv: Sequence[str] | None = None) -> int:
    return component_main("components.collector", {DIST_NAME: lambda: [otelcol_bin()]}, argv)


if __name__ == "__main__":
    sys.exit(main())
