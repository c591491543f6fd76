"""Binaries from Debian packages of any suite, unpacked into the component cache.

Some real parts (VictoriaMetrics) are packaged by Debian but only in a newer
suite than the machine runs, and nothing may be installed system-wide.
So the package is fetched with ``apt-get download`` through a temporary sources
list that reuses the Debian mirror this machine is already configured with (no
host name is written in this repository) and unpacked with ``dpkg -x``. apt's
lists and caches for that suite live in a temporary folder, so the system's apt
state is left as it was.

    python -m components.debian victoria-metrics usr/bin/victoria-metrics trixie
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from components.cache import cached, run

__all__ = ["AptSource", "configured_debian_source", "deb_version", "debian_package", "debian_binary"]

SOURCES_D = Path("/etc/apt/sources.list.d")
SOURCES_LIST = Path("/etc/apt/sources.list")
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


@dataclass(frozen=True)
class AptSource:
    """A Debian archive as configured on this machine: where it is and which key signs it."""

    uri: str
    signed_by: str = DEFAULT_KEYRING


def _deb822_sources(text: str) -> list[AptSource]:
    """Main-archive entries of a deb822 ``.sources`` file (security archives have other suites)."""
    found = []
    for block in re.split(r"\n\s*\n", text):
        uris = re.search(r"^URIs:\s*(\S+)", block, re.M)
        suites = re.search(r"^Suites:\s*(.+)$", block, re.M)
        if not uris or not suites or "security" in suites.group(1):
            continue
        key = re.search(r"^Signed-By:\s*(/\S+)\s*$", block, re.M)
        found.append(AptSource(uris.group(1), key.group(1) if key else DEFAULT_KEYRING))
    return found


def _one_line_sources(text: str) -> list[AptSource]:
    """Main-archive entries of a classic one-line ``sources.list``."""
    found = []
    for line in text.splitlines():
        m = re.match(r"^deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
        if not m or "security" in m.group(3):
            continue
        key = re.search(r"signed-by=(\S+?)[\s\]]", m.group(1) or "")
        found.append(AptSource(m.group(2), key.group(1) if key else DEFAULT_KEYRING))
    return found


def configured_debian_source() -> AptSource:
    """The first Debian main archive in this machine's apt configuration."""
    candidates: list[AptSource] = []
    for path in sorted(SOURCES_D.glob("*.sources")):
        candidates += _deb822_sources(path.read_text())
    for path in [SOURCES_LIST, *sorted(SOURCES_D.glob("*.list"))]:
        if path.exists():
            candidates += _one_line_sources(path.read_text())
    if not candidates:
        raise RuntimeError(f"no Debian archive configured in {SOURCES_LIST} or {SOURCES_D}")
    return candidates[0]


def _apt_options(work: Path) -> list[str]:
    """apt-get options that confine lists and caches to ``work`` and read only its sources."""
    return ["-q", "-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={work / 'parts'}",
            "-o", f"Dir::State::Lists={work / 'lists'}", "-o", f"Dir::Cache={work / 'cache'}",
            "-o", "APT::Sandbox::User=root"]


def _download_deb(package: str, suite: str, work: Path) -> Path:
    """Fetch ``package``'s .deb from ``suite`` into ``work`` and return its path."""
    source = configured_debian_source()
    for sub in ("parts", "lists/partial", "cache/archives/partial"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    (work / "parts" / f"{suite}.sources").write_text(
        f"Types: deb\nURIs: {source.uri}\nSuites: {suite}\nComponents: main\nSigned-By: {source.signed_by}\n")
    run(["apt-get", *_apt_options(work), "update"])
    run(["apt-get", *_apt_options(work), "download", package], cwd=work)
    debs = sorted(work.glob(f"{package}_*.deb"))
    if not debs:
        raise RuntimeError(f"apt-get download {package} ({suite}) left no .deb in {work}")
    return debs[0]


def debian_package(package: str, suite: str) -> Path:
    """The unpacked root of Debian ``suite``'s ``package``, fetched once per suite.

    The cache is keyed by suite, not by package version: tests keep using the
    build they first fetched; delete the folder to pick up a newer one.
    """
    def build(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix=f"{package}-fetch-") as tmp:
            deb = _download_deb(package, suite, Path(tmp))
            run(["dpkg", "-x", deb, out / "root"])
            (out / "deb").write_text(deb.name + "\n")

    return cached(f"debian-{package}", suite, build) / "root"


def debian_binary(package: str, path_in_package: str, suite: str) -> Path:
    """``path_in_package`` (e.g. ``usr/bin/prometheus``) inside Debian ``suite``'s ``package``."""
    binary = debian_package(package, suite) / path_in_package
    if not binary.exists():
        raise FileNotFoundError(f"{path_in_package} is not in Debian {suite}'s {package}")
    return binary


def deb_version(package: str, suite: str) -> str:
    """The .deb file name that was unpacked (package_version_arch.deb), for reports."""
    return (debian_package(package, suite).parent / "deb").read_text().strip()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m components.debian PACKAGE PATH SUITE`` prints the unpacked file's path."""
    parser = argparse.ArgumentParser(prog="python -m components.debian", description=__doc__.split("\n\n")[0])
    parser.add_argument("package")
    parser.add_argument("path", help="the file inside the package, e.g. usr/bin/victoria-metrics")
    parser.add_argument("suite", help="the Debian suite, e.g. trixie")
    args = parser.parse_args(argv)
    if not shutil.which("apt-get"):
        parser.error("apt-get is needed to fetch Debian packages")
    try:
        print(debian_binary(args.package, args.path, args.suite))
    except (RuntimeError, OSError) as error:
        print(f"components.debian: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
