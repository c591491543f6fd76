"""Build ``crane`` (github.com/google/go-containerregistry/cmd/crane) from its Go module: a real OCI registry.

``crane registry serve`` is a small registry (the same handler go-containerregistry's own tests use) that
speaks the distribution API over plain HTTP, logs every request, and keeps blobs in memory or under
``--disk``; ``crane push`` uploads a docker-archive tarball into it. The node tests run it inside their network
namespace so a kubelet pulls the agent's image the way a new node in a real cluster does, with no registry on
the internet involved.

Usage: ``python -m components.registry`` prints the bin folder holding ``crane``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from components.cache import cached, check_version, folder_main, go_install

__all__ = ["CRANE_MODULE", "CRANE_VERSION", "main", "registry_bin"]

CRANE_MODULE = "github.com/google/go-containerregistry"
CRANE_VERSION = "v0.22.1"


def _build_crane(out: Path) -> None:
    bin_dir = out / "bin"
    bin_dir.mkdir()
    # The version crane prints comes from the module's build info; -X makes it explicit as its Makefile does.
    ldflags = f"-s -w -X {CRANE_MODULE}/cmd/crane/cmd.Version={CRANE_VERSION}"
    go_install(f"{CRANE_MODULE}/cmd/crane@{CRANE_VERSION}", bin_dir, ldflags)
    check_version([bin_dir / "crane", "version"], CRANE_VERSION)


def registry_bin() -> Path:
    """Folder holding ``crane`` at CRANE_VERSION, built on first use."""
    return cached("registry", CRANE_VERSION, _build_crane) / "bin"


def main(argv: list[str] | None = None) -> int:
    return folder_main("registry", registry_bin, argv)


if __name__ == "__main__":
    sys.exit(main())
