"""Build KWOK's controller (sigs.k8s.io/kwok/cmd/kwok) from its Go module, with the Stages its module ships.

KWOK simulates nodes against any API server: it keeps the Nodes it manages Ready (status and Lease) and moves
their pods through ``Stage`` objects. The binary refuses to start without stages ("no stages found"), and its
module carries the upstream ones as YAML under ``kustomize/stage/``; they are copied from the module cache
into the component cache next to the binary, never into the repo.

Usage: ``python -m components.kwok`` prints the folder holding ``bin/kwok`` and ``stages/``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from components.cache import cached, check_version, folder_main, go_install

__all__ = ["KWOK_MODULE", "KWOK_VERSION", "STAGE_SETS", "kwok_home", "main"]

KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_VERSION = "v0.8.0"

#: The upstream stage sets copied from the module, by the folder name they get under ``stages/``.
#: ``node-fast`` makes a Node Ready at once; ``pod-fast`` makes a bound pod Running (init containers completed,
#: sidecars running), completes Job pods and removes deleted pods.
STAGE_SETS = {"node-fast": "kustomize/stage/node/fast", "pod-fast": "kustomize/stage/pod/fast"}


def _module_dir() -> Path:
    proc = subprocess.run(["go", "mod", "download", "-json", f"{KWOK_MODULE}@{KWOK_VERSION}"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Error" in info or "Dir" not in info:
        raise RuntimeError(f"go mod download {KWOK_MODULE}@{KWOK_VERSION} failed: "
                           f"{info.get('Error') or proc.stderr.strip()[-2000:]}")
    return Path(info["Dir"])


def _build_kwok(out: Path) -> None:
    gobin = out / "gobin"
    ldflags = f"-s -w -X {KWOK_MODULE}/pkg/consts.Version={KWOK_VERSION}"
    go_install(f"{KWOK_MODULE}/cmd/kwok@{KWOK_VERSION}", gobin, ldflags)
    (out / "bin").mkdir()
    (gobin / "kwok").rename(out / "bin" / "kwok")
    gobin.rmdir()
    check_version([out / "bin" / "kwok", "--version"], KWOK_VERSION)
    module = _module_dir()
    for name, folder in STAGE_SETS.items():
        target = out / "stages" / name
        target.mkdir(parents=True)
        stages = sorted(p for p in (module / folder).glob("*.yaml") if p.name != "kustomization.yaml")
        if not stages:
            raise RuntimeError(f"{KWOK_MODULE}@{KWOK_VERSION} has no stages under {folder}")
        for stage in stages:
            shutil.copyfile(stage, target / stage.name)


def kwok_home() -> Path:
    """Folder with ``bin/kwok`` and ``stages/<set>/*.yaml`` at KWOK_VERSION, built on first use."""
    return cached("kwok", KWOK_VERSION, _build_kwok)


def main(argv: list[str] | None = None) -> int:
    return folder_main("kwok", kwok_home, argv)


if __name__ == "__main__":
    sys.exit(main())
