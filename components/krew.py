"""Build krew (the kubectl plugin manager) from its Go module, for the plugin install test.

sigs.k8s.io/krew has no replace directives, so ``go install module/cmd/krew@version``
builds it as published. krew reports its version from ``-X`` flags (its
hack/make-binary.sh sets them); without them ``krew version`` says "unknown".
The binary is installed as ``kubectl-krew`` so that kubectl finds it as the
``krew`` plugin on PATH, as krew installs itself.

Usage: ``python -m components.krew`` prints the bin folder.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from components.cache import cached, check_version, folder_main, go_install

__all__ = ["KREW_MODULE", "KREW_VERSION", "krew_bin", "main"]

KREW_MODULE = "sigs.k8s.io/krew"
KREW_VERSION = "v0.4.3"


def _build_krew(out: Path) -> None:
    gobin = out / "gobin"
    ldflags = f"-s -w -X {KREW_MODULE}/internal/version.gitTag={KREW_VERSION}"
    go_install(f"{KREW_MODULE}/cmd/krew@{KREW_VERSION}", gobin, ldflags)
    bin_dir = out / "bin"
    bin_dir.mkdir()
    (gobin / "krew").rename(bin_dir / "kubectl-krew")
    gobin.rmdir()
    try:
        check_version([bin_dir / "kubectl-krew", "version"], KREW_VERSION,
                      env={"KREW_ROOT": str(out / "probe-root"), "PATH": "/usr/bin:/bin", "HOME": str(out)})
    finally:
        shutil.rmtree(out / "probe-root", ignore_errors=True)


def krew_bin() -> Path:
    """Folder holding ``kubectl-krew`` at KREW_VERSION, built on first use."""
    return cached("krew", KREW_VERSION, _build_krew) / "bin"


def main(argv: list[str] | None = None) -> int:
    return folder_main("krew", krew_bin, argv)


if __name__ == "__main__":
    sys.exit(main())
