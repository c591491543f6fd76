"""What a release version may be, and the files of a source tree that carry it.

The package (pyproject.toml), the agent's ``__version__`` (its ``service.version`` and ``version`` command), the image
tag and the chart's ``version`` and ``appVersion`` are one number. Helm wants SemVer 2 and pip PEP 440; plain
``MAJOR.MINOR.PATCH`` is both, so a release takes only that. A tree is released at another version than its own by
stamping a staged copy of it; the source tree is never written.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from release import ReleaseError

__all__ = ["VERSION", "check_version", "source_version", "stamp", "stamp_version"]

VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
#: Where a tree writes its version, relative to its root: (file, the one line that holds it).
CARRIERS = (("pyproject.toml", re.compile(r'^version = "([^"]*)"$', re.M)),
            ("agent/__init__.py", re.compile(r'^__version__ = "([^"]*)"$', re.M)))


def check_version(version: str) -> str:
    if not VERSION.fullmatch(version):
        raise ReleaseError(f"version {version!r} is not MAJOR.MINOR.PATCH (what both Helm and pip take)")
    return version


def source_version(tree: Path) -> str:
    """The version a source tree's pyproject.toml gives."""
    try:
        return tomllib.loads((tree / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as error:
        raise ReleaseError(f"{tree / 'pyproject.toml'}: no project version ({error})") from None


def stamp(path: Path, pattern: re.Pattern[str], value: str) -> None:
    """Replace the first group of the one match of ``pattern`` in ``path`` by ``value``."""
    text = path.read_text()
    matches = list(pattern.finditer(text))
    if len(matches) != 1:
        raise ReleaseError(f"{path}: expected one line matching {pattern.pattern!r}, found {len(matches)}")
    match = matches[0]
    path.write_text(text[:match.start(1)] + value + text[match.end(1):])


def stamp_version(tree: Path, version: str) -> None:
    """Write ``version`` into each file of a (staged) tree that carries it; unchanged files stay byte-identical, so
    a tree released at its own version builds the image the suite already has."""
    for name, pattern in CARRIERS:
        stamp(tree / name, pattern, version)
