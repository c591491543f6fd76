"""The cluster-autoscaler itself, and our oracle program inside its source, built from its released source.

The Go module proxy does not serve the cluster-autoscaler, so its source comes from the folder the project's machines
hold beside the clone (``../shared/autoscaler/``, or ``$NRA_AUTOSCALER_SOURCE``): 1.36.1 as released, and 1.31.1 with
neon's production patch (``neon-ca.patch``, applied with ``patch -p2`` inside ``cluster-autoscaler/``). Its
dependencies come from the Go module proxy like every other Go component's. Nothing of it enters the repository: each
build unpacks the archive into the cache's build folder and removes the tree once the binaries are out.

Two entries per build, keyed by the release, a digest of the archive and the patch (and, for the oracle, of its
source in components/autoscaler_oracle/), so a changed oracle rebuilds only the oracle:

* ``cluster-autoscaler/<key>/bin/cluster-autoscaler`` (``-tags kwok``: the kwok cloud provider alone, which runs the
  whole autoscaler against any API server);
* ``autoscaler-oracle/<key>/bin/nra-autoscaler-oracle``: components/autoscaler_oracle/ (the release-independent
  ``*.go`` plus the release's adapter folder) compiled as ``cmd/nra-autoscaler-oracle`` inside the tree, so it calls
  the autoscaler's own packages at that release (tests/autoscaler/ use it as the judge).

    python -m components.autoscaler [1.36.1|neon|all]   # prints the bin folders (autoscaler, then oracle)
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from components.cache import cached, check_version, component_main, run
from components.go import build_flags, go

__all__ = ["AUTOSCALERS", "AutoscalerBuild", "ORACLE_SOURCE", "autoscaler_bin", "oracle_bin", "source_folder", "main"]

#: Our oracle program's source: release-independent files here, one adapter folder per autoscaler API generation.
ORACLE_SOURCE = Path(__file__).with_name("autoscaler_oracle")
_ORACLE_BINARY = "nra-autoscaler-oracle"
_ORACLE_PACKAGE = "cmd/" + _ORACLE_BINARY


@dataclass(frozen=True, kw_only=True)
class AutoscalerBuild:
    """One autoscaler build: which archive, which patch, and which oracle adapter fits its packages."""

    name: str  # what callers call it: the release, or "neon"
    version: str  # the release the source is (version.ClusterAutoscalerVersion)
    archive: str  # in the source folder
    patch: str = ""  # in the source folder, applied with patch -p2 inside cluster-autoscaler/
    adapter: str  # components/autoscaler_oracle/<adapter>/: the release's package API
    mod_mod: bool = False  # -mod=mod: the tree's go.sum lacks entries the build needs (the patched 1.31.1)

    def key(self, *extra: Path) -> str:
        """``<version>[-<name>]-<digest>``: the archive, the patch and ``extra`` files, so any change rebuilds."""
        digest = hashlib.sha256()
        for path in (source_folder() / self.archive, *([source_folder() / self.patch] if self.patch else ()), *extra):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        suffix = "" if self.name == self.version else f"-{self.name}"
        return f"{self.version}{suffix}-{digest.hexdigest()[:12]}"


_BUILDS = (
    AutoscalerBuild(name="1.36.1", version="1.36.1", archive="cluster-autoscaler-1.36.1.tar.gz", adapter="v1_36"),
    AutoscalerBuild(name="neon", version="1.31.1", archive="cluster-autoscaler-1.31.1.tar.gz",
                    patch="neon-ca.patch", adapter="v1_31", mod_mod=True),
)
AUTOSCALERS: dict[str, AutoscalerBuild] = {build.name: build for build in _BUILDS}


def source_folder() -> Path:
    """``$NRA_AUTOSCALER_SOURCE``, else ``shared/autoscaler`` beside the clone (where the project's machines hold
    it)."""
    explicit = os.environ.get("NRA_AUTOSCALER_SOURCE")
    folder = Path(explicit) if explicit else Path(__file__).resolve().parents[2] / "shared" / "autoscaler"
    if not folder.is_dir():
        raise RuntimeError(f"the cluster-autoscaler's source is not at {folder} (set NRA_AUTOSCALER_SOURCE to the "
                           "folder holding cluster-autoscaler-<version>.tar.gz and neon-ca.patch)")
    return folder


def _unpack(build: AutoscalerBuild, into: Path) -> Path:
    """The archive unpacked under ``into`` with the patch applied; returns its ``cluster-autoscaler/`` folder."""
    with tarfile.open(source_folder() / build.archive) as archive:
        archive.extractall(into, filter="data")
    tree = into / "cluster-autoscaler"
    if build.patch:
        run(["patch", "-p2", "--forward", "--batch", "-i", source_folder() / build.patch], cwd=tree)
    return tree


def _go_build(build: AutoscalerBuild, tree: Path, output: Path, package: str) -> None:
    go(["build", *(["-mod=mod"] if build.mod_mod else []), *build_flags(tags=("kwok",)), "-o", output, package],
       cwd=tree)


def _oracle_files(build: AutoscalerBuild) -> list[Path]:
    """The oracle's Go files for ``build``: the shared ones and its adapter's (sorted, so the key is stable)."""
    files = sorted(ORACLE_SOURCE.glob("*.go")) + sorted((ORACLE_SOURCE / build.adapter).glob("*.go"))
    if not files:
        raise RuntimeError(f"no oracle source in {ORACLE_SOURCE}")
    return files


def _build_autoscaler(build: AutoscalerBuild, out: Path) -> None:
    tree = _unpack(build, out / "src")
    try:
        (out / "bin").mkdir()
        _go_build(build, tree, out / "bin" / "cluster-autoscaler", ".")
        # No --version flag: --help names the flags, and fails fast if the binary cannot start.
        proc = subprocess.run([out / "bin" / "cluster-autoscaler", "--help"], capture_output=True, text=True)
        if "--cloud-provider" not in proc.stdout + proc.stderr:
            raise RuntimeError(f"the built cluster-autoscaler {build.name} does not start: {proc.stderr[-500:]}")
    finally:
        shutil.rmtree(out / "src", ignore_errors=True)


def _build_oracle(build: AutoscalerBuild, out: Path) -> None:
    tree = _unpack(build, out / "src")
    try:
        package = tree / _ORACLE_PACKAGE
        package.mkdir(parents=True)
        for file in _oracle_files(build):
            shutil.copyfile(file, package / file.name)
        (out / "bin").mkdir()
        _go_build(build, tree, out / "bin" / _ORACLE_BINARY, "./" + _ORACLE_PACKAGE)
        check_version([out / "bin" / _ORACLE_BINARY, "--version"], build.version)
    finally:
        shutil.rmtree(out / "src", ignore_errors=True)


#: Oracle builds kept per release in the component cache.
ORACLES_KEPT = 2


def autoscaler_bin(name: str) -> Path:
    """The folder holding ``cluster-autoscaler`` of build ``name`` (a key of AUTOSCALERS), built on first use."""
    build = AUTOSCALERS[name]
    return cached("cluster-autoscaler", build.key(), lambda out: _build_autoscaler(build, out)) / "bin"


def oracle_bin(name: str) -> Path:
    """The oracle program built inside build ``name``'s tree (``bin/nra-autoscaler-oracle``), built on first use."""
    build = AUTOSCALERS[name]
    key = build.key(*_oracle_files(build))
    # A new version with every change of the oracle's source: the newest two of each release stay (switching
    # between two branches rebuilds nothing), older ones go (about 50 MB each).
    return cached("autoscaler-oracle", key, lambda out: _build_oracle(build, out), keep=ORACLES_KEPT,
                  family=key.rsplit("-", 1)[0]) / "bin"


def _both(name: str) -> list[Path]:
    return [autoscaler_bin(name), oracle_bin(name)]


def main(argv: Sequence[str] | None = None) -> int:
    return component_main("components.autoscaler", {name: functools.partial(_both, name) for name in AUTOSCALERS}, argv)


if __name__ == "__main__":
    sys.exit(main())
