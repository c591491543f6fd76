"""Build the krew archive and manifest of the `kubectl node-requests` plugin, locally and offline.

    python krew/build.py [--out DIR]      # default DIR: build/krew; prints the manifest and archive paths

The agent is a Python program whose compiled dependencies (msgspec, PyYAML,
psutil, grpcio, pydantic-core, ...) are specific to a CPython version and a
platform, so the archive carries:

* ``kubectl-node_requests``: a launcher run by ``python3`` from PATH that
  checks the Python version, puts the bundled ``lib/`` (and no site-packages)
  on ``sys.path`` and calls ``agent.cli:main``, the same entry point as the
  project's console script;
* ``lib/``: the ``agent`` package from this checkout and exactly the runtime
  distributions of ``requirements.lock``, copied with their metadata from the
  Python environment running this script (no download: the build refuses if
  that environment's versions differ from the lock).

The archive is reproducible (sorted entries, fixed times and owners, gzip
without a timestamp), its sha256 goes into the manifest, and the manifest's
``uri`` is the archive's own ``file://`` path: nothing points outside this
machine, and krew installs it with ``--manifest`` and ``--archive``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata
import io
import os
import platform
import re
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "krew" / "node-requests.yaml"
LOCK = ROOT / "requirements.lock"
PLUGIN = "node-requests"
BIN = "kubectl-node_requests"
# Reproducible archives: every entry gets this time (1980-01-01, the zip epoch many tools accept).
MTIME = 315532800

_LOCKED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)
_MACHINES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

LAUNCHER = '''#!/usr/bin/env python3
"""kubectl node-requests: the node-requests-agent command from this plugin's own lib/ (installed by krew)."""
import os
import sys

NEEDED = ({major}, {minor})
if sys.version_info[:2] != NEEDED:
    sys.stderr.write("kubectl node-requests: needs Python %d.%d as python3 on PATH (its bundled compiled "
                     "dependencies are built for it); found %s at %s\\n"
                     % (NEEDED + (sys.version.split()[0], sys.executable)))
    sys.exit(3)
sys.dont_write_bytecode = True  # leave krew's store as krew unpacked it
LIB = os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib")
# Only the standard library and the bundled lib/: packages installed for this python3 cannot shadow them.
sys.path[:] = [LIB] + [p for p in sys.path[1:] if not p.rstrip("/").endswith(("site-packages", "dist-packages"))]
from agent.cli import main  # noqa: E402

sys.exit(main())
'''


class BuildError(RuntimeError):
    pass


def locked() -> dict[str, str]:
    """Distribution name -> version, the runtime set of requirements.lock."""
    return dict(_LOCKED.findall(LOCK.read_text()))


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependency_files() -> list[tuple[str, Path]]:
    """(path inside lib/, file) of every locked distribution, as installed in this environment."""
    files, wrong = [], []
    for name, version in sorted(locked().items()):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{name} {version} is not installed")
            continue
        if dist.version != version:
            wrong.append(f"{name} is {dist.version}, the lock says {version}")
            continue
        for entry in dist.files or ():
            text = str(entry)
            if "__pycache__" in entry.parts or text.endswith((".pyc", ".pyo")) or text.startswith(("..", "/")):
                continue  # bytecode and scripts outside site-packages (bin/) are not part of lib/
            path = Path(dist.locate_file(entry))
            if path.is_file():
                files.append((text, path))
    if wrong:
        raise BuildError("this Python environment does not hold requirements.lock's runtime set "
                         "(install it with `pip install -r requirements.lock` or `pip install -e .`): " + "; ".join(wrong))
    return files


def agent_files() -> list[tuple[str, Path]]:
    """The agent package from this checkout (samples included), without bytecode."""
    out = []
    for path in sorted((ROOT / "agent").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
            out.append((path.relative_to(ROOT).as_posix(), path))
    return out


def _add(tar: tarfile.TarFile, name: str, data: bytes, executable: bool = False) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), MTIME, 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def build_archive(path: Path) -> str:
    """Write the archive; return its sha256."""
    major, minor = sys.version_info[:2]
    entries: dict[str, tuple[bytes, bool]] = {BIN: (LAUNCHER.format(major=major, minor=minor).encode(), True)}
    for inside, source in agent_files() + dependency_files():
        entries[f"lib/{inside}"] = (source.read_bytes(), os.access(source, os.X_OK) and source.suffix != ".py")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            data, executable = entries[name]
            _add(tar, name, data, executable)
    with open(path, "wb") as out:
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
            gz.write(raw.getvalue())
    return hashlib.sha256(path.read_bytes()).hexdigest()


def platform_selector() -> dict[str, str]:
    system = platform.system().lower()
    arch = _MACHINES.get(platform.machine().lower())
    if system != "linux" or arch is None:
        raise BuildError(f"the bundled dependencies are this machine's; only linux/amd64 and linux/arm64 builds are "
                         f"made here, not {platform.system()}/{platform.machine()}")
    return {"os": system, "arch": arch}


def manifest(archive: Path, sha256: str, selector: dict[str, str]) -> dict:
    from agent import __version__

    plugin = yaml.safe_load(TEMPLATE.read_text())
    spec = plugin["spec"]
    spec["version"] = f"v{__version__}"
    spec["caveats"] = spec["caveats"].replace("{python}", "%d.%d" % sys.version_info[:2])
    spec["platforms"] = [{
        "selector": {"matchLabels": selector},
        "uri": archive.resolve().as_uri(),
        "sha256": sha256,
        "bin": BIN,
    }]
    return plugin


class _Dumper(yaml.SafeDumper):
    """Multi-line text as literal blocks, as hand-written krew manifests have it."""


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def build(out: Path) -> tuple[Path, Path]:
    """Build into ``out``; return (manifest, archive)."""
    selector = platform_selector()
    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"{PLUGIN}_{selector['os']}_{selector['arch']}.tar.gz"
    sha256 = build_archive(archive)
    manifest_path = out / f"{PLUGIN}.yaml"
    manifest_path.write_text(yaml.dump(manifest(archive, sha256, selector), Dumper=_Dumper, sort_keys=False, width=120))
    return manifest_path, archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "krew", help="output folder (default build/krew)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # `from agent import __version__` from this checkout
    try:
        manifest_path, archive = build(args.out)
    except BuildError as exc:
        print(f"krew/build.py: {exc}", file=sys.stderr)
        return 2
    print(manifest_path)
    print(archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
