"""How components run Go: one ``go`` build step, one module lookup, one wrapper module and one set of build flags,
used by every Go build here.

Every go command runs under ``nice -n 10`` (builds share two cores with other builds and the tests) and builds static
binaries (``CGO_ENABLED=0``: they go into empty images and onto nodes), without the build folder's paths or a symbol
table (``build_flags``). A module that cannot be built as published, or a program of our own, builds inside a
throwaway wrapper module (``wrapper_module``) written in the cache build folder, never in the repo. Everything else
(GOFLAGS, GOPROXY, and the module and build caches GOMODCACHE and GOCACHE) is Go's own setting from the environment,
the same for every component, so a build that reuses another's packages (the kubelet the control plane's) finds them
compiled.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from components.cache import NICE, run

__all__ = ["GO_ENV", "GO_VERSION", "Module", "build_flags", "download", "go", "go_command", "wrapper_gomod",
           "wrapper_module"]

#: What every go command here sets; the rest comes from the environment.
GO_ENV = {"CGO_ENABLED": "0"}

#: The ``go`` line of every wrapper module written here: the Go release the components are built with.
GO_VERSION = "1.26.0"


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
    proc = subprocess.run([*NICE, go_command(), "mod", "download", "-json", f"{path}@{version}"],
                          capture_output=True, text=True, env={**os.environ, **GO_ENV})
    try:
        info = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    if proc.returncode != 0 or "Error" in info or "Dir" not in info:
        raise RuntimeError(f"go mod download {path}@{version} failed (exit {proc.returncode}): "
                           f"{info.get('Error') or proc.stderr.strip()[-2000:]}")
    return Module(path=path, version=version, dir=Path(info["Dir"]), gomod=Path(info["GoMod"]))


def build_flags(stamps: Mapping[str, str] | None = None, tags: Sequence[str] = ()) -> list[str]:
    """The flags of every ``go build`` or ``go install`` here: ``-trimpath`` (no build folder paths in the binary),
    ``-s -w`` (no symbol table or DWARF), a ``-X package.Variable=value`` per stamp, and the build tags if any."""
    ldflags = " ".join(["-s", "-w", *(f"-X {variable}={value}" for variable, value in (stamps or {}).items())])
    return ["-trimpath", f"-ldflags={ldflags}", *(["-tags", ",".join(tags)] if tags else [])]


def wrapper_gomod(name: str, requires: Mapping[str, str] | None = None, *, go_version: str = GO_VERSION,
                  godebug: Sequence[str] = (), replace: Mapping[str, str] | None = None) -> str:
    """The go.mod of wrapper module ``nra.invalid/<name>``: ``requires`` (module -> version), ``godebug`` lines
    kept as given, and ``replace`` (module -> its replacement, ``module version``)."""
    blocks = [f"module nra.invalid/{name}", f"go {go_version}"]
    if godebug:
        blocks.append("\n".join(godebug))
    if requires:
        blocks.append(_directive("require", [f"{module} {version}" for module, version in requires.items()]))
    if replace:
        blocks.append(_directive("replace", [f"{module} => {target}" for module, target in replace.items()]))
    return "\n\n".join(blocks) + "\n"


def wrapper_module(src: Path, name: str, requires: Mapping[str, str] | None = None, *,
                   go_version: str = GO_VERSION, godebug: Sequence[str] = (),
                   replace: Mapping[str, str] | None = None) -> Path:
    """Create folder ``src`` holding the wrapper module's go.mod (``wrapper_gomod``'s text); returns ``src``."""
    src.mkdir(parents=True)
    (src / "go.mod").write_text(wrapper_gomod(name, requires, go_version=go_version, godebug=godebug, replace=replace))
    return src


def _directive(verb: str, entries: Sequence[str]) -> str:
    """One entry on the directive's line, several in a parenthesised block, as ``go mod tidy`` writes them."""
    if len(entries) == 1:
        return f"{verb} {entries[0]}"
    return f"{verb} (\n" + "".join(f"\t{entry}\n" for entry in entries) + ")"
