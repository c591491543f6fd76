"""How components run Go: one ``go`` build step and one module lookup, used by every Go build here.

Every go command runs under ``nice -n 10`` (builds share two cores with other builds and the tests) and builds static
binaries (``CGO_ENABLED=0``: they go into empty images and onto nodes). Everything else (GOFLAGS, GOPROXY, and the
module and build caches GOMODCACHE and GOCACHE) is Go's own setting from the environment, the same for every
component, so a build that reuses another's packages (the kubelet the control plane's) finds them compiled.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from components.cache import run

__all__ = ["GO_ENV", "Module", "download", "go", "go_command"]

#: What every go command here sets; the rest comes from the environment.
GO_ENV = {"CGO_ENABLED": "0"}


def go_command() -> str:
    """The ``go`` client; without it no Go component can be built."""
    found = shutil.which("go")
    if not found:
        raise RuntimeError("the go command (Go 1.26) is needed to build the components; docs/testing.md says how")
    return found


def go(args: Sequence[str | os.PathLike[str]], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    """``nice -n 10 go ARGS`` with GO_ENV (and ``env``) as a build step; a failure raises with its output's tail."""
    run([go_command(), *args], cwd=cwd, env={**GO_ENV, **(env or {})}, nice=True)


@dataclass(frozen=True, kw_only=True)
class Module:
    """A published module version in the Go module cache."""

    path: str
    version: str
    dir: Path  # the unpacked source tree (read-only)
    gomod: Path  # its go.mod


def download(path: str, version: str) -> Module:
    """``go mod download -json path@version``: fetched through the configured proxy the first time, read from the
    module cache after."""
    proc = subprocess.run([go_command(), "mod", "download", "-json", f"{path}@{version}"],
                          capture_output=True, text=True)
    try:
        info = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    if proc.returncode != 0 or "Error" in info or "Dir" not in info:
        raise RuntimeError(f"go mod download {path}@{version} failed (exit {proc.returncode}): "
                           f"{info.get('Error') or proc.stderr.strip()[-2000:]}")
    return Module(path=path, version=version, dir=Path(info["Dir"]), gomod=Path(info["GoMod"]))
