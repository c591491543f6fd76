"""The agent's container image: what the build refuses (a lock that misses a pin) and what the built image holds.

The lock check (image/locked.py) runs here against crafted site-packages and locks, fast; the Dockerfile's build stage
runs it after its installs (tests/deploy/test_deploy.py reproduces that stage with this machine's Python).

Marker ``node``: the image itself, built by components/image.py (buildah on the mmdebstrap base, as the node tests
use it), read from its docker-archive: non-root, nothing but what runs (no shell, no apt or dpkg), bytecode for
exactly the modules ``node-requests-agent run`` imports at start and used without reading their sources, and the
agent starting from it. Commands run inside the image's root filesystem with chroot, as root (the image has no
shell; the agent runs as the image's uid).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCKED = ROOT / "image" / "locked.py"
# Found here: the commands' PATH is the image's.
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"


# --------------------------------------------------------------------------- the lock check (fast)


def dist(site: Path, name: str, version: str, *requires: str) -> None:
    """A minimal installed distribution: a .dist-info folder with its METADATA, as pip writes it."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def pin(name: str, version: str) -> str:
    return f"{name}=={version} \\\n    --hash=sha256:{'0' * 64}\n"


def check(site: Path, lock: str, tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "crafted.lock").write_text(lock)
    return subprocess.run([sys.executable, str(LOCKED), "--site", str(site), str(tmp_path / "crafted.lock")],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def site(tmp_path) -> Path:
    """The project needing two packages, one of which needs a third only with an extra the project does not ask."""
    site = tmp_path / "site-packages"
    dist(site, "node-requests-agent", "0.1.0", "kubernetes==37.0.2", "psutil>=5.9")
    dist(site, "kubernetes", "37.0.2", "urllib3>=2", 'google-auth>=1; extra == "google-auth"')
    dist(site, "psutil", "7.2.2")
    dist(site, "urllib3", "2.8.0")
    return site


def test_lock_check_passes_when_the_venv_is_exactly_the_lock(site, tmp_path):
    done = check(site, pin("kubernetes", "37.0.2") + pin("psutil", "7.2.2") + pin("urllib3", "2.8.0"), tmp_path)
    assert (done.returncode, done.stderr) == (0, "")


def test_lock_check_fails_when_the_lock_lacks_a_pin(site, tmp_path):
    """urllib3 installed (say by hand, or by an install that resolved) but not in the lock: refused, by name."""
    done = check(site, pin("kubernetes", "37.0.2") + pin("psutil", "7.2.2"), tmp_path)
    assert done.returncode == 1
    assert "image/locked.py: urllib3 2.8.0 is installed but no lock pins it" in done.stderr.splitlines()


def test_lock_check_fails_when_a_requirement_is_missing(tmp_path):
    """pyproject asks for a package the lock never got (``--no-deps`` installs nothing for it): refused."""
    site = tmp_path / "site-packages"
    dist(site, "node-requests-agent", "0.1.0", "kubernetes==37.0.2", "msgspec==0.23.0")
    dist(site, "kubernetes", "37.0.2")
    done = check(site, pin("kubernetes", "37.0.2"), tmp_path)
    assert done.returncode == 1
    assert "image/locked.py: node-requests-agent requires 'msgspec==0.23.0', which no lock pins" in done.stderr


def test_lock_check_fails_on_another_version_or_an_unpinned_line(site, tmp_path):
    done = check(site, pin("kubernetes", "37.0.2") + pin("psutil", "7.2.1") + pin("urllib3", "2.8.0"), tmp_path)
    assert done.returncode == 1 and "psutil 7.2.2 is installed but the lock pins 7.2.1" in done.stderr
    done = check(site, pin("kubernetes", "37.0.2") + "psutil>=7\n" + pin("urllib3", "2.8.0"), tmp_path)
    assert done.returncode == 1 and "not a hash-pinned requirement: psutil>=7" in done.stderr


def test_build_stage_runs_the_lock_check_after_installing_without_resolving():
    """The Dockerfile installs with --require-hashes and --no-deps, then checks, before pip leaves the venv."""
    from testkit.image import dockerfile_stages

    (build, _final) = dockerfile_stages((ROOT / "Dockerfile").read_text())
    (install,) = [arg for op, arg in build if op == "RUN" and "pip install" in arg]
    steps = [step.strip() for step in install.split("&&")]
    locks = "-r requirements.lock -r requirements-build.lock"
    assert any("--require-hashes" in s and "--no-deps" in s and locks in s for s in steps), steps
    checked = [i for i, s in enumerate(steps) if "image/locked.py requirements.lock requirements-build.lock" in s]
    installs = [i for i, s in enumerate(steps) if "pip install" in s]
    uninstall = [i for i, s in enumerate(steps) if "pip uninstall" in s]
    assert checked and max(installs) < checked[0] < uninstall[0]


#: The data files the agent reads at run time (importlib.resources): the debug page's templates, the sample capture.
DATA = ("agent/debug/templates/page.html", "agent/debug/templates/page.css", "agent/debug/templates/page.js",
        "agent/samples/sample-node.json")


def test_the_package_build_ships_every_data_file_the_agent_reads(tmp_path):
    """setuptools' build_py, the step of a wheel's build that lays out the package (pyproject's package-data
    decides what besides .py goes in), run on a copy of the checkout: every file of agent/ is in what it lays out,
    so the image's and pip's installs have them. The page's module loads them at start (debug/template.py)."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "agent", tmp_path / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
                           "--build-lib", "out"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    source = {str(p.relative_to(tmp_path)) for p in (tmp_path / "agent").rglob("*") if p.is_file()}
    built = {str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert set(DATA) <= source
    assert source == built, (sorted(source - built), sorted(built - source))


# --------------------------------------------------------------------------- the built image (root, buildah)


def extract(archive: Path, target: Path) -> dict:
    """The image's layers unpacked in order into ``target`` (GNU tar: links, modes and owners as stored); its config."""
    with tarfile.open(archive) as tar:
        (manifest,) = json.load(tar.extractfile("manifest.json"))
        config = json.load(tar.extractfile(manifest["Config"]))
        layers = manifest["Layers"]
    unpacked = target.parent / "archive"
    unpacked.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(unpacked)], check=True)
    target.mkdir()
    for layer in layers:
        subprocess.run(["tar", "--numeric-owner", "-xpf", str(unpacked / layer), "-C", str(target)], check=True)
    shutil.rmtree(unpacked)
    for mountpoint in ("proc", "dev"):  # what a container runtime mounts; the image itself has neither
        (target / mountpoint).mkdir(exist_ok=True)
    return config


class Built:
    def __init__(self, root: Path, config: dict) -> None:
        self.root, self.config = root, config
        self.env = dict(e.split("=", 1) for e in config["config"]["Env"])

    def run(self, *argv: str, env: dict[str, str] | None = None, user: str = "65532:65532",
            timeout: float = 120) -> subprocess.CompletedProcess:
        """``argv`` inside the image's root filesystem as the image's user, with the image's environment, in mount and
        PID namespaces of its own holding a fresh /proc and the host's /dev (as a container runtime provides them)."""
        root = shlex.quote(str(self.root))
        inside = (f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev && "
                  f"exec {CHROOT} --userspec={user} {root} {shlex.join(argv)}")
        return subprocess.run([UNSHARE, "--mount", "--pid", "--fork", "--propagation", "private", "/bin/sh", "-c",
                               inside], env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout)

    def start_imports(self) -> list[str]:
        """``agent.run.imports`` in the image, in an environment like the DaemonSet's (image/runtime.py)."""
        scratch = self.root / "tmp" / "imports"
        scratch.mkdir(exist_ok=True)
        (scratch / "token").write_text("test-token\n")
        shutil.copy(self.root / "etc" / "ssl" / "certs" / "ca-certificates.crt", scratch / "ca.crt")
        env = {"NODE_NAME": "image-test", "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "443",
               "NRA_SERVICEACCOUNT_DIR": "/tmp/imports", "OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:4318",
               "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "NRA_OTLP_TOKEN_FILE": "/tmp/imports/token",
               "OTEL_EXPORTER_OTLP_CERTIFICATE": "/tmp/imports/ca.crt", "DEBUG_ADDRESS": "127.0.0.1:0"}
        done = self.run("python", "-c", "import os, agent.run.imports as i; i.main(os.environ)", env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Built:
    if os.geteuid() != 0:
        pytest.fail("the image tests need root (buildah's build, chroot into the image)")
    from components.image import agent_image

    root = tmp_path_factory.mktemp("agent-image") / "rootfs"
    return Built(root, extract(agent_image().archive, root))


def all_files(root: Path) -> list[str]:
    return sorted("/" + str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir() or p.is_symlink())


@pytest.mark.node
def test_image_runs_as_non_root_with_nothing_but_what_runs(built):
    config = built.config["config"]
    assert config["User"] == "65532:65532"  # the DaemonSet's runAsUser/runAsGroup
    assert config["Entrypoint"] == ["node-requests-agent"] and config["Cmd"] == ["run"]
    files = all_files(built.root)
    # No shell, no package manager or its databases, no documentation, manual pages or locales.
    for absent in ("/bin/sh", "/usr/bin/sh", "/bin/bash", "/usr/bin/dpkg", "/usr/bin/apt", "/usr/bin/apt-get",
                   "/usr/bin/perl", "/usr/bin/pip", "/opt/agent/bin/pip"):
        path = built.root / absent.lstrip("/")
        assert not path.exists() and not path.is_symlink(), absent
    for prefix in ("/var/lib/dpkg/", "/var/lib/apt/", "/var/cache/", "/usr/share/doc/", "/usr/share/man/",
                   "/usr/share/locale/", "/etc/apt/", "/usr/lib/python3.11/test/", "/usr/lib/python3.11/ensurepip/"):
        assert not [f for f in files if f.startswith(prefix)], prefix
    # The data files the agent reads at start: the page's templates (debug/template.py), the sample capture.
    missing = [f for f in DATA if "/opt/agent/lib/python3.11/site-packages/" + f not in files]
    assert not missing, missing
    # The uid has a name, and the agent's files are readable by it without owning them.
    assert "nonroot:x:65532:65532:" in (built.root / "etc" / "passwd").read_text()
    assert "hosts: files dns" in (built.root / "etc" / "nsswitch.conf").read_text().splitlines()  # as Debian's
    assert built.run("python", "-c", "import getpass, os; print(os.getuid(), getpass.getuser())").stdout.split() \
        == ["65532", "nonroot"]


@pytest.mark.node
def test_image_has_bytecode_for_exactly_the_start_up_imports(built):
    """Every module ``run`` imports at start has an unchecked-hash pyc; nothing else in the image has one."""
    from importlib.util import cache_from_source

    imported = built.start_imports()
    expected = {cache_from_source(f) for f in imported}
    shipped = {f for f in all_files(built.root) if f.endswith(".pyc")}
    assert shipped == expected
    # Both the standard library's and the venv's share: the start-up set reaches into both.
    assert any(f.startswith("/usr/lib/python3.11/") for f in imported)
    assert any("/site-packages/agent/" in f for f in imported)
    for pyc in expected:
        flags = int.from_bytes((built.root / pyc.lstrip("/")).read_bytes()[4:8], "little")
        assert flags == 0b01, pyc  # hash-based, source not checked: no timestamp to go stale, no write needed
    # What start-up never imports is shipped as source only: e.g. the kubernetes client's models.
    model = "/opt/agent/lib/python3.11/site-packages/kubernetes/client/models/v1_pod.py"
    assert (built.root / model.lstrip("/")).is_file() and cache_from_source(model) not in shipped


@pytest.mark.node
def test_image_loads_the_start_up_modules_from_bytecode(built, tmp_path):
    """With every start-up module's source replaced by a line that fails, the agent still builds: the bytecode is
    what loads, without reading (or checking) the source. A copy of the root filesystem is changed, not the image."""
    imported = built.start_imports()
    copy = tmp_path / "rootfs"
    subprocess.run(["cp", "-a", str(built.root), str(copy)], check=True)
    for source in imported:
        (copy / source.lstrip("/")).write_text("raise ImportError('the source was read')\n")
    changed = Built(copy, built.config)
    assert changed.start_imports() == imported
    # A module outside the set is read from its (untouched) source as usual.
    done = changed.run("python", "-c", "import kubernetes.client.models.v1_pod as m; print(m.__cached__)")
    assert done.returncode == 0, done.stderr


@pytest.mark.node
def test_agent_starts_from_the_image(built):
    """The entry point as the container runs it, as uid 65532: a replayed node exported once; and every compiled
    module the locked packages ship links what the image holds (gRPC's exporter, psutil, msgspec, TLS, ctypes)."""
    done = built.run("node-requests-agent", "run", "--replay", "sample", "--once", "--exporter", "table",
                     env={"NODE_NAME": "sample-node"})
    assert done.returncode == 0, done.stderr
    assert "pod_or_vm_cpu_requests" in done.stdout
    code = ("import ssl, ctypes, grpc, psutil, msgspec, yaml, zlib, pyexpat; "
            "ctypes.CDLL(None).mallopt; print(ssl.OPENSSL_VERSION)")
    linked = built.run("python", "-c", code)
    assert linked.returncode == 0 and "OpenSSL" in linked.stdout, linked.stderr
    version = built.run("node-requests-agent", "--version")
    assert version.returncode == 0 and "0.1.0" in version.stdout
