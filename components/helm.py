"""Build helm from its Go module, for the chart tests (lint, template, install and upgrade into the real API server).

helm.sh/helm/v4 has no replace directives, so ``go install module/cmd/helm@version``
builds it as published. The version the binary reports comes from ``-X`` flags
(as helm's Makefile sets them); without them ``helm version`` says only ``v4.3``.

Usage: ``python -m components.helm`` prints the bin folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

from components.cache import cached, check_version, folder_main, go_install

__all__ = ["HELM_MODULE", "HELM_VERSION", "helm_bin", "main"]

HELM_MODULE = "helm.sh/helm/v4"
HELM_VERSION = "v4.3.1"


def _build_helm(out: Path) -> None:
    bin_dir = out / "bin"
    bin_dir.mkdir()
    ldflags = f"-s -w -X {HELM_MODULE}/internal/version.version={HELM_VERSION}"
    go_install(f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}", bin_dir, ldflags)
    check_version([bin_dir / "helm", "version", "--short"], HELM_VERSION)


def helm_bin() -> Path:
    """Folder holding ``helm`` at HELM_VERSION, built on first use."""
    return cached("helm", HELM_VERSION, _build_helm) / "bin"


def main(argv: list[str] | None = None) -> int:
    return folder_main("helm", helm_bin, argv)


if __name__ == "__main__":
    sys.exit(main())
