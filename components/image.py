"""Container images without any registry: the agent's from the shipped Dockerfile, the Collector's, CoreDNS, workloads.

* **Base**: ``mmdebstrap`` builds a Debian bookworm root filesystem with python3 (and the venv module the
  Dockerfile's build stage uses) from this machine's own apt sources, so no host name is written anywhere.
* **Agent**: ``buildah bud`` builds the shipped Dockerfile unchanged, with that base as ``PYTHON_IMAGE``. Its
  ``pip install --require-hashes`` goes through this machine's pip configuration (``pip config list``: index,
  certificate, find-links), written to a pip.conf that is mounted into the build's RUN steps only, never into
  the image. Users with Docker Hub run ``docker build`` on the same file (README).
* **Collector, CoreDNS, nra-tiny (pause and workloads)**: one static Go binary each in an otherwise empty image,
  written directly as a docker-archive (manifest.json, config, one layer), the format ``ctr images import`` reads.

Every image is a docker-archive tar in the component cache, tagged with the exact name a manifest references.

    python -m components.image [base|agent|collector|coredns|tiny|all]    # prints archive paths and sizes
    python -m components.image agent    # also its size uncompressed and gzipped, layer by layer (docs/benchmarks.md)
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from components.cache import cached, component_main, run
from components.node import PartMissing, coredns_bin, debian_tools, tiny_bin

__all__ = ["AGENT_IMAGE", "COLLECTOR_IMAGE", "COREDNS_IMAGE", "PAUSE_IMAGE", "TINY_IMAGE", "Image", "Layer",
           "agent_image", "all_images", "base_rootfs", "collector_image", "copy_context", "coredns_image", "describe",
           "layers",
           "pip_config", "tiny_image"]

ROOT = Path(__file__).resolve().parent.parent
#: The exact names the manifests reference (daemonset/daemonset.yaml, otel-config/collector-deployment.yaml).
AGENT_IMAGE = "node-requests-agent:0.1.0"
COLLECTOR_IMAGE = "otelcol-nra:0.165.1-nra"
COREDNS_IMAGE = "nra-coredns:1.15.0"
TINY_IMAGE = "nra-tiny:1"
# Agent images kept in the cache: one is built per change of agent/ or image/ (about 170 MB each; several
# worktrees build theirs side by side).
AGENT_IMAGES_KEPT = 6
#: containerd's CRI ``sandbox_image`` in the node tests (the same static program).
PAUSE_IMAGE = "nra-pause:1"

SUITE = "bookworm"
#: What the Dockerfile's build stage needs from ``PYTHON_IMAGE``: ``python`` (python-is-python3) with ``venv``, and
#: what the locked wheels link beyond the interpreter's own libraries: libstdc++ (grpcio's cygrpc; the slim image
#: has it through apt, which this base leaves out).
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "libstdc++6")
SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
#: The files of the shipped build context the Dockerfile copies (and so the agent image's cache key).
CONTEXT_FILES = ("Dockerfile", "requirements.lock", "requirements-build.lock", "pyproject.toml", "README.md")
CONTEXT_FOLDERS = ("image", "agent")


@dataclass(frozen=True)
class Image:
    """A docker-archive tar and the reference it carries."""

    name: str
    archive: Path

    @property
    def size(self) -> int:
        return self.archive.stat().st_size


# --------------------------------------------------------------------------- base root filesystem


def base_rootfs() -> Path:
    """A bookworm root filesystem tar with python3 and venv, from this machine's apt sources."""
    key = f"{SUITE}-" + hashlib.sha256(" ".join(BASE_PACKAGES).encode()).hexdigest()[:12]

    def build(out: Path) -> None:
        debian_tools(("mmdebstrap",))
        sources = SOURCES if SOURCES.exists() else Path("/etc/apt/sources.list")
        run(["mmdebstrap", "--variant=essential", f"--include={','.join(BASE_PACKAGES)}",
             # no documentation, manual pages or locales in an image
             "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
             "--dpkgopt=path-exclude=/usr/share/locale/*", "--dpkgopt=path-include=/usr/share/locale/locale.alias",
             SUITE, out / "rootfs.tar", str(sources)], nice=True)

    return cached("image-base", key, build) / "rootfs.tar"


# --------------------------------------------------------------------------- the machine's pip configuration


def pip_config() -> dict[str, str]:
    """``pip config list`` of the running interpreter as {option: value} (env, global, user and site scopes)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise PartMissing(f"pip configuration: `{sys.executable} -m pip config list` failed: {proc.stderr.strip()}")
    options: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        option = key.rsplit(".", 1)[-1]
        options.setdefault(option, value.strip().strip("'\""))  # env first: it wins in pip too
    return options


def _pip_build_options(work: Path) -> tuple[list[str], dict[str, str]]:
    """``-v`` mounts for buildah: a pip.conf of the machine's options, plus each host path it names."""
    options = {k: v for k, v in pip_config().items() if k not in ("disable-pip-version-check",)}
    conf = work / "pip.conf"
    conf.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in options.items()))
    mounts = ["-v", f"{conf}:/etc/pip.conf:ro"]
    for option in ("cert", "client-cert", "find-links"):
        for value in options.get(option, "").split():
            if value.startswith("/") and Path(value).exists():
                mounts += ["-v", f"{value}:{value}:ro"]
    return mounts, options


# --------------------------------------------------------------------------- the agent's image (buildah)


def _context_digest(root: Path) -> str:
    digest = hashlib.sha256()
    files = [root / f for f in CONTEXT_FILES]
    files += sorted(p for folder in CONTEXT_FOLDERS for p in (root / folder).rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def copy_context(target: Path, root: Path = ROOT) -> None:
    """The files of ``root`` the Dockerfile copies, without caches or the local virtual environment."""
    import shutil

    for name in CONTEXT_FILES:
        shutil.copy2(root / name, target / name)
    for folder in CONTEXT_FOLDERS:
        shutil.copytree(root / folder, target / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def agent_image(root: Path = ROOT) -> Image:
    """The shipped Dockerfile built by buildah on the mmdebstrap base, as a docker-archive named AGENT_IMAGE; from
    ``root``'s files (another tree: a release's staged copy, an earlier commit), cached by their content."""
    base = base_rootfs()

    def build(out: Path) -> None:
        tools = debian_tools(("buildah",))
        with tempfile.TemporaryDirectory(prefix="nra-buildah-") as tmp:
            work = Path(tmp)
            store = ["--root", str(work / "storage"), "--runroot", str(work / "run")]

            def buildah(*args: str | Path) -> None:
                run([tools["buildah"], *store, *args], nice=True)

            base_name = f"localhost/nra-python:3.11-{SUITE}"
            container = subprocess.run([tools["buildah"], *store, "from", "scratch"], check=True,
                                       stdout=subprocess.PIPE, text=True).stdout.strip()
            buildah("add", container, str(base), "/")  # a local tar is extracted
            buildah("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "--cmd", "python3", container)
            buildah("commit", "--rm", container, base_name)
            context = work / "context"
            context.mkdir()
            copy_context(context, root)
            mounts, options = _pip_build_options(work)
            (out / "pip-options.json").write_text(json.dumps(options, indent=1) + "\n")
            # --layers: a layer per COPY of the final stage (the runtime, then the venv), not one per stage.
            buildah("bud", "--layers", "--isolation", "chroot", "--network", "host", "--pull-never",
                    "--build-arg", f"PYTHON_IMAGE={base_name}", *mounts, "-t", AGENT_IMAGE,
                    "-f", str(context / "Dockerfile"), str(context))
            buildah("push", f"localhost/{AGENT_IMAGE}", f"docker-archive:{out / 'image.tar'}:{AGENT_IMAGE}")
            inspect = subprocess.run([tools["buildah"], *store, "inspect", "--type", "image",
                                      f"localhost/{AGENT_IMAGE}"], check=True, stdout=subprocess.PIPE, text=True).stdout
            (out / "inspect.json").write_text(inspect)
            buildah("rmi", "--all", "--force")

    folder = cached("image-agent", _context_digest(root), build, keep=AGENT_IMAGES_KEPT)
    return Image(AGENT_IMAGE, folder / "image.tar")


# --------------------------------------------------------------------------- what an image holds


@dataclass(frozen=True)
class Layer:
    """One layer of a docker-archive: what built it, its size as a tar and gzipped (as a registry stores it)."""

    created_by: str
    size: int
    gzipped: int


def layers(image: Image) -> list[Layer]:
    """The image's layers, base first, with the history line that made each (empty layers left out)."""
    import gzip

    with tarfile.open(image.archive) as archive:

        def member(name: str) -> bytes:
            found = archive.extractfile(name)  # None for a member that is not a regular file
            if found is None:
                raise RuntimeError(f"{image.archive}: {name} is not a file in the docker-archive")
            return found.read()

        (manifest,) = json.loads(member("manifest.json"))
        config = json.loads(member(manifest["Config"]))
        history = [h.get("created_by", "") for h in config.get("history", []) if not h.get("empty_layer")]
        out = []
        for i, name in enumerate(manifest["Layers"]):
            data = member(name)
            made_by = history[i] if len(history) == len(manifest["Layers"]) else ""
            out.append(Layer(" ".join(made_by.replace("/bin/sh -c #(nop) ", "").split()), len(data),
                             len(gzip.compress(data, compresslevel=6, mtime=0))))
    return out


def describe(image: Image) -> str:
    """Sizes for docs/benchmarks.md: the whole image uncompressed and gzipped, then each layer."""
    parts = layers(image)
    lines = [f"{image.name}: {sum(p.size for p in parts) / 1e6:.1f} MB uncompressed, "
             f"{sum(p.gzipped for p in parts) / 1e6:.1f} MB gzipped, {len(parts)} layers"]
    lines += [f"  {p.size / 1e6:7.1f} MB  {p.gzipped / 1e6:6.1f} MB gz  {p.created_by[:100]}" for p in parts]
    return "\n".join(lines)


# --------------------------------------------------------------------------- single-binary images


def _tar_bytes(files: dict[str, tuple[bytes, int]], dirs: tuple[str, ...]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_docker_archive(target: Path, name: str, files: dict[str, tuple[bytes, int]], entrypoint: list[str],
                         cmd: list[str] | None = None, user: str = "", dirs: tuple[str, ...] = ("tmp",)) -> Path:
    """A one-layer docker-archive (``docker save`` format) that ``ctr images import`` reads."""
    layer = _tar_bytes(files, dirs)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Cmd": cmd or [], "User": user,
                   "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "components/image.py write_docker_archive"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [name], "Layers": ["layer.tar"]}]
    with tarfile.open(target, "w") as tar:
        for member, data in ((config_name, config_bytes), ("layer.tar", layer),
                             ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return target


def _binary_image(component: str, name: str, binary: Path, path_in_image: str, cmd: list[str] | None = None,
                  user: str = "") -> Image:
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()[:16]

    def build(out: Path) -> None:
        write_docker_archive(out / "image.tar", name, {path_in_image.lstrip("/"): (binary.read_bytes(), 0o755)},
                             [path_in_image], cmd, user)

    return Image(name, cached(component, f"{name.replace(':', '-')}-{digest}", build) / "image.tar")


def collector_image(manifest: Path | None = None) -> Image:
    """The Collector distribution built from ``manifest`` (default otel-config/builder-config.yaml), alone in an
    image."""
    from components.collector import MANIFEST, otelcol_bin

    # The shipped Deployment passes --config; the image's user is the Deployment's runAsUser.
    return _binary_image("image-collector", COLLECTOR_IMAGE, otelcol_bin(manifest or MANIFEST), "/otelcol-nra",
                         user="10001")


def coredns_image() -> Image:
    return _binary_image("image-coredns", COREDNS_IMAGE, coredns_bin(), "/coredns", user="65532")


def tiny_image(name: str = TINY_IMAGE) -> Image:
    return _binary_image("image-tiny", name, tiny_bin(), "/nra-tiny", user="65532")


def all_images() -> list[Image]:
    return [agent_image(), collector_image(), coredns_image(), tiny_image(), tiny_image(PAUSE_IMAGE)]


def _line(image: Image) -> str:
    return f"{image.name} {image.archive} {image.size} bytes"


def main(argv: Sequence[str] | None = None) -> int:
    """Print each image's archive and size; ``agent`` also its layers' sizes, ``base`` the root filesystem's."""
    def base() -> list[str]:
        path = base_rootfs()
        return [f"{path} {path.stat().st_size} bytes"]

    def agent() -> list[str]:
        image = agent_image()
        return [_line(image), describe(image)]

    return component_main("components.image", {
        "base": base,
        "agent": agent,
        "collector": lambda: [_line(collector_image())],
        "coredns": lambda: [_line(coredns_image())],
        "tiny": lambda: [_line(tiny_image()), _line(tiny_image(PAUSE_IMAGE))],
        "all": lambda: [_line(image) for image in all_images()],
    }, argv)


if __name__ == "__main__":
    sys.exit(main())
