"""Fail the image build unless the venv holds exactly the locked distributions at their locked versions.

``pip install --require-hashes --no-deps -r LOCK`` installs only what the lock names, each file hash-checked, and
resolves nothing; what that leaves unproven is completeness: a dependency the lock lacks (pyproject asking for a new
package, a package's new requirement) would simply be missing, and a distribution the lock does not name would be
unpinned. This check runs in the build stage after the installs (Dockerfile) and fails the RUN on either:

* every installed distribution is named by a lock at exactly the installed version (``pip`` itself, the venv's
  bootstrap that the next step uninstalls, aside);
* every requirement of every installed distribution that applies here (markers evaluated for this interpreter,
  extras not asked for left out) is installed at a version it allows.

    python image/locked.py [--site DIR] LOCK...    # exit 0 silently, or 1 with one line per problem
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys

__all__ = ["lock_pins", "problems"]

#: The venv's own installer: present while the build installs, uninstalled right after this check.
BOOTSTRAP = frozenset({"pip"})


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text: str) -> dict[str, str]:
    """name -> version of a ``--generate-hashes`` requirements file (``name==version \\ --hash=...`` entries)."""
    pins: dict[str, str] = {}
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;]+)"
                             r"(?:\s*;[^-]*)?(?:\s+--hash=\S+)+", line)
        if match is None:
            raise ValueError(f"not a hash-pinned requirement: {line[:120]}")
        pins[canonical(match.group(1))] = match.group(2)
    return pins


def problems(pins: dict[str, str], distributions: list[importlib.metadata.Distribution], project: str) -> list[str]:
    """What makes the installed set differ from the locks; empty when the venv is exactly what they pin."""
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
    from pip._vendor.packaging.version import Version

    installed = {canonical(d.metadata["Name"]): d for d in distributions}
    found: list[str] = []
    for name, dist in sorted(installed.items()):
        if name in BOOTSTRAP or name == canonical(project):
            continue
        if name not in pins:
            found.append(f"{name} {dist.version} is installed but no lock pins it")
        elif Version(dist.version) != Version(pins[name]):
            found.append(f"{name} {dist.version} is installed but the lock pins {pins[name]}")
    for name, dist in sorted(installed.items()):
        for line in dist.requires or ():
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                found.append(f"{name}: unreadable requirement {line!r}")
                continue
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            wanted = canonical(requirement.name)
            if wanted not in installed:
                found.append(f"{name} requires {line!r}, which no lock pins")
            elif not requirement.specifier.contains(installed[wanted].version, prereleases=True):
                found.append(f"{name} requires {line!r}, the lock pins {installed[wanted].version}")
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="image/locked.py", description=__doc__.splitlines()[0])
    parser.add_argument("locks", nargs="+", help="requirements files written with --generate-hashes")
    parser.add_argument("--site", action="append", help="read distributions from this folder (default: sys.path)")
    parser.add_argument("--project", default="node-requests-agent", help="the distribution built from this tree")
    args = parser.parse_args(argv)
    pins: dict[str, str] = {}
    for lock in args.locks:
        with open(lock, encoding="utf-8") as handle:
            try:
                pins.update(lock_pins(handle.read()))
            except ValueError as exc:
                print(f"image/locked.py: {lock}: {exc}", file=sys.stderr)
                return 1
    found = problems(pins, list(importlib.metadata.distributions(path=args.site or sys.path)), args.project)
    for line in found:
        print(f"image/locked.py: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
