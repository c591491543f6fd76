"""Where built and downloaded components live: outside the clone, keyed by name and version.

A second run finds the finished folder and returns at once; concurrent runs
(two pytest sessions, CI beside a developer) serialise on a lock file so a
half-built folder is never used. A build writes into ``<dir>.partial`` and
renames it into place only when it succeeded.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["NICE", "cache_root", "cached", "check_version", "component_main", "path_targets", "run"]

#: Build steps share two cores with other builds and the tests, so they yield to them.
NICE = ("nice", "-n", "10")


def cache_root() -> Path:
    """``$NRA_COMPONENT_CACHE``, else ``$XDG_CACHE_HOME/node-requests-agent``, else ``~/.cache/node-requests-agent``."""
    explicit = os.environ.get("NRA_COMPONENT_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "node-requests-agent"


def cached(name: str, version: str, build: Callable[[Path], None], keep: int | None = None,
           family: str = "") -> Path:
    """The folder ``<cache>/<name>/<version>``, made by ``build(partial_dir)`` the first time.

    With ``keep``, a new build removes the oldest other versions beyond ``keep`` in all: a component keyed by a
    digest of the repository's own files (the agent image, the autoscaler oracle) gets a new version with every
    change of them. With ``family`` (a version's name without its last part, e.g. ``1.31.1-neon`` of
    ``1.31.1-neon-5d71e572a13d``), only that family's versions count and go: one program built for several releases
    keeps ``keep`` of each.
    """
    final = cache_root() / name / version
    if (final / ".complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".complete").exists():
            return final
        partial = final.with_name(final.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        started = time.monotonic()
        print(f"components: building {name} {version} into {final} (first run only)", file=sys.stderr, flush=True)
        build(partial)
        (partial / ".complete").write_text(f"built in {time.monotonic() - started:.0f} s\n")
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
        print(f"components: {name} {version} ready after {time.monotonic() - started:.0f} s", file=sys.stderr,
              flush=True)
    if keep is not None:
        _prune(final, keep, family)
    return final


def _prune(final: Path, keep: int, family: str) -> None:
    """Remove the least recently built finished versions of ``family`` beside ``final`` so that ``keep`` remain,
    ``final`` among them; a version another process holds the lock of (building it) is left alone."""
    finished = sorted((p for p in final.parent.iterdir() if p.is_dir() and (p / ".complete").exists() and p != final
                       and (not family or p.name.rsplit("-", 1)[0] == family)),
                      key=lambda p: (p / ".complete").stat().st_mtime, reverse=True)
    for old in finished[max(0, keep - 1):]:
        with open(old.parent / f".{old.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(old, ignore_errors=True)
        print(f"components: removed {old} (more than {keep} versions of {final.parent.name})", file=sys.stderr,
              flush=True)


def run(argv: Sequence[str | os.PathLike[str]], cwd: Path | None = None, env: dict[str, str] | None = None, *,
        nice: bool = False) -> None:
    """Run a build step (under ``nice -n 10`` with ``nice``); on failure raise with the command and the last 40
    lines of its output, the part that says why."""
    merged = dict(os.environ, **(env or {}))
    command = [*(NICE if nice else ()), *(str(a) for a in argv)]
    proc = subprocess.run(command, cwd=cwd, env=merged, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise RuntimeError(f"build step failed (exit {proc.returncode}): {' '.join(command)}\n{tail}")


def check_version(argv: Sequence[str | os.PathLike[str]], expected: str, env: dict[str, str] | None = None) -> None:
    """Fail the build (and leave no cache entry) when a built binary reports another version than ``expected``."""
    proc = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if expected not in proc.stdout:
        raise RuntimeError(f"{' '.join(map(str, argv))} printed {proc.stdout.strip()!r}, expected {expected}")


def path_targets(build: Callable[[str], Path], names: Iterable[str]) -> dict[str, Callable[[], list[Path]]]:
    """component_main's targets for a table of builds by name: each builds its row and prints the path it gives."""
    return {name: functools.partial(_built, build, name) for name in names}


def _built(build: Callable[[str], Path], name: str) -> list[Path]:
    return [build(name)]


def component_main(prog: str, targets: Mapping[str, Callable[[], Iterable[object]]],
                   argv: Sequence[str] | None = None) -> int:
    """``python -m <prog> [TARGET]``: build the target named (every one in turn by default, unless the module has
    its own ``all``) and print what it gives, for shell use. A failed build prints its whole error (the failed
    command and the tail of its output), not a traceback, and exits 1."""
    names = list(targets) if "all" in targets else [*targets, "all"]
    parser = argparse.ArgumentParser(prog=f"python -m {prog}")
    parser.add_argument("target", nargs="?", default="all", choices=names)
    chosen = parser.parse_args(argv).target
    try:
        for target in [targets[chosen]] if chosen in targets else targets.values():
            for line in target():
                print(line, flush=True)
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        print(f"{prog}: {error}", file=sys.stderr, flush=True)
        return 1
    return 0
