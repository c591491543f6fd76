"""Assemble what the agent's image ships, in the Dockerfile's build stage: only what runs.

The final stage is ``FROM scratch`` and copies two folders this script prepares:

* ``ROOTFS``: the interpreter (the venv's ``python`` and its chain of links), every shared library it and the
  compiled modules link (``ldd``: libc, libssl, libffi, zlib, expat...), the standard library without what nothing
  imports (tests, IDLE, tkinter, ensurepip...), the default CA bundle, a ``/etc/passwd`` naming the non-root uid,
  an ``nsswitch.conf`` and an empty ``/tmp``. No shell, no package manager, no documentation: whatever else the
  base image (``PYTHON_IMAGE``) holds stays behind.
* ``VENV`` (``/opt/agent``), in place.

Bytecode: every ``__pycache__`` of both is dropped, then exactly the modules ``node-requests-agent run`` imports
once built (``agent.run.imports``, run here with the DaemonSet's kind of environment) are compiled with
``unchecked-hash`` pycs: Python loads them without looking at the source's timestamp or contents, so copying
between stages (which may change timestamps) cannot make them stale, and the read-only root never needs a write.
Modules imported later (``explain``, the kubeconfig loader, gRPC) load from source, as any Python does with
``PYTHONDONTWRITEBYTECODE``.

    python image/runtime.py VENV ROOTFS    # prints what it kept, by part, in bytes
"""

from __future__ import annotations

import os
import py_compile
import re
import shutil
import ssl
import subprocess
import sys
import sysconfig
import tempfile
from importlib.util import cache_from_source
from pathlib import Path

#: Standard-library packages the agent never imports (neither ``run`` nor ``explain``), and none of its
#: dependencies: left out of the image.
STDLIB_UNUSED = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "distutils",
                 "venv", "config-3.11-x86_64-linux-gnu", "site-packages", "dist-packages", "__phello__")
#: What prints the start-up import set (agent/run/imports.py) in a fresh interpreter, as the console script starts.
IMPORTS = "import os, agent.run.imports as i; i.main(os.environ)"
#: The non-root user the image runs as (Dockerfile USER, the DaemonSet's securityContext).
USER_ID = 65532


def keep(path: str, rootfs: Path) -> None:
    """Copy ``path`` into ``rootfs`` as it appears here: a link of the file or of a folder above it stays a link,
    and what it points to is kept too."""
    parts = Path(os.path.normpath(path)).parts
    current = Path("/")
    for i, part in enumerate(parts[1:], 1):
        current = current / part
        dest = rootfs / current.relative_to("/")
        if current.is_symlink():
            target = os.readlink(current)
            if not dest.is_symlink():
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.symlink_to(target)
            keep(os.path.join(os.path.normpath(current.parent / target), *parts[i + 1:]), rootfs)
            return
        if i == len(parts) - 1 and not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(current, dest)


def linked_libraries(files: list[Path]) -> set[str]:
    """The shared libraries (and the ELF interpreter) ``ldd`` names for ``files``; a library not found fails."""
    found: set[str] = set()
    for file in files:
        out = subprocess.run(["ldd", str(file)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
        if "not a dynamic executable" in out or "statically linked" in out:
            continue
        for line in out.splitlines():
            if "not found" in line:
                raise SystemExit(f"image/runtime.py: {file}: {line.strip()}")
            match = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
            if match:
                found.add(match.group(1))
    return found


def start_imports(venv: Path) -> list[str]:
    """``python -m agent.run.imports`` in a fresh interpreter of the venv, in an environment like the DaemonSet's
    (daemonset/daemonset.yaml): in-cluster service account, OTLP over https with a token file and a CA file, the
    debug endpoint (on a free loopback port). Nothing connects: the agent is built, not started."""
    import certifi  # a CA bundle every install has (requests' and kubernetes' dependency), as a stand-in CA file

    with tempfile.TemporaryDirectory(prefix="nra-imports-") as tmp:
        (Path(tmp) / "token").write_text("build-time-token\n")
        shutil.copy(certifi.where(), Path(tmp) / "ca.crt")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NODE_NAME": "image-build",
               "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "443",
               "NRA_SERVICEACCOUNT_DIR": tmp, "NRA_AUTOSCALER_ARGS": "", "NRA_AUTOSCALER_RELEASE": "",
               "OTEL_EXPORTER_OTLP_ENDPOINT": "https://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "NRA_OTLP_TOKEN_FILE": f"{tmp}/token",
               "OTEL_EXPORTER_OTLP_CERTIFICATE": f"{tmp}/ca.crt", "DEBUG_ADDRESS": "127.0.0.1:0",
               "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([str(venv / "bin" / "python"), "-c", IMPORTS], env=env, cwd=tmp,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"image/runtime.py: agent.run.imports failed:\n{done.stderr[-3000:]}")
    return done.stdout.split()


def drop_bytecode(folder: Path) -> None:
    for cache in sorted(folder.rglob("__pycache__")):
        shutil.rmtree(cache)


def compile_to(source: Path, cfile: Path, shown: str) -> None:
    """One module's bytecode, named as Python looks for it, recording ``shown`` as its source path."""
    cfile.parent.mkdir(parents=True, exist_ok=True)
    py_compile.compile(str(source), cfile=str(cfile), dfile=shown, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)


def size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def main(argv: list[str]) -> int:
    venv, rootfs = Path(argv[0]), Path(argv[1])
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    imports = start_imports(venv)
    rootfs.mkdir(parents=True, exist_ok=True)

    # The interpreter as the venv finds it (bin/python -> the base's python -> ...), and the standard library.
    keep(os.path.join(venv, "bin", os.readlink(venv / "bin" / "python")), rootfs)
    interpreter = Path(os.path.realpath(venv / "bin" / "python"))
    shutil.copytree(stdlib, rootfs / stdlib.relative_to("/"), symlinks=True, dirs_exist_ok=True,
                    ignore=lambda folder, names: [n for n in names if n == "__pycache__" or (
                        Path(folder) == stdlib and n in STDLIB_UNUSED)])
    for link in [p for p in stdlib.rglob("*") if p.is_symlink() and (rootfs / p.relative_to("/")).is_symlink()]:
        keep(str(link), rootfs)  # and what it points to (Debian: sitecustomize.py -> /etc/python3.11/)

    # Bytecode for exactly the modules imported at start; none for the rest (the venv's, and the copied stdlib's).
    drop_bytecode(venv)
    compiled = 0
    for name in imports:
        path = Path(name)
        if path.is_relative_to(venv):
            compile_to(path, Path(cache_from_source(str(path))), str(path))
        elif path.is_relative_to(stdlib):
            in_rootfs = rootfs / path.relative_to("/")
            compile_to(in_rootfs, rootfs / Path(cache_from_source(str(path))).relative_to("/"), str(path))
        else:
            raise SystemExit(f"image/runtime.py: imported from neither the venv nor the standard library: {path}")
        compiled += 1

    # Every shared library the interpreter, the stdlib's and the venv's compiled modules link.
    elves = [interpreter, *(rootfs / stdlib.relative_to("/")).rglob("*.so"), *venv.rglob("*.so"), *venv.rglob("*.so.*")]
    for library in sorted(linked_libraries(elves)):
        keep(library, rootfs)
    # The default CAs (an https OTLP endpoint without OTEL_EXPORTER_OTLP_CERTIFICATE), as the base had them.
    cafile = ssl.get_default_verify_paths().openssl_cafile
    if os.path.exists(cafile):
        keep(cafile, rootfs)

    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(f"root:x:0:0:root:/root:/sbin/nologin\n"
                                f"nonroot:x:{USER_ID}:{USER_ID}:nonroot:/home/nonroot:/sbin/nologin\n")
    (etc / "group").write_text(f"root:x:0:\nnonroot:x:{USER_ID}:\n")
    # As Debian's: /etc/hosts before DNS (glibc without the file would ask DNS first, even for localhost).
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files dns\n")
    (rootfs / "tmp").mkdir(exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    print(f"image/runtime.py: {compiled} modules compiled; root filesystem {size(rootfs)} bytes, "
          f"{venv} {size(venv)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
