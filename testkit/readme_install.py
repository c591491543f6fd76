"""The README's install as the tests run it (issue 39): its marked shell blocks, the variables they read, and bash
running them verbatim in a copy of the clone's shipped folders.

The README marks the blocks a test runs by the fenced block's info string: ```` ```sh install-variables ```` (the
operator's values), ```` ```sh install-collector ````, ```` ```sh install-helm ````, ```` ```sh install-kustomize ````.
A path is the Collector's block, then one agent block. The operator's own values are shell variables
(``VARIABLES``) the blocks read; the tests set them (the node test takes the issuer from the settings block's own
command). The script a test
runs is the path's blocks as they stand, after ``set -euo pipefail`` so that the first failing command fails it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from testkit.repo import REPO

__all__ = ["BLOCKS", "PATHS", "README", "SETTINGS", "SHIPPED", "VARIABLES", "install_blocks", "install_script",
           "run_install", "shipped_copy"]

README = REPO / "README.md"
PATHS = {"helm": ("install-collector", "install-helm"), "kustomize": ("install-collector", "install-kustomize")}
#: The block that sets the operator's values (``export VARIABLE=...``, with examples or a command that finds them).
SETTINGS = "install-variables"
BLOCKS = (SETTINGS, *dict.fromkeys(name for blocks in PATHS.values() for name in blocks))
#: What the operator sets before the install's blocks and they read.
VARIABLES = ("REGISTRY", "OIDC_ISSUER_URL", "PROMETHEUS_REMOTE_WRITE_URL")
#: The clone's folders the blocks read, relative to its root (where the README says to run them).
SHIPPED = ("otel-config", "daemonset", "charts")
_BLOCK = re.compile(r"^```sh (?P<name>[a-z-]+)\n(?P<body>.*?)^```$", re.M | re.S)


def install_blocks(text: str) -> dict[str, str]:
    """Each ```` ```sh NAME ```` block of ``text`` by NAME (the same NAME twice: ValueError)."""
    blocks: dict[str, str] = {}
    for match in _BLOCK.finditer(text):
        if match["name"] in blocks:
            raise ValueError(f"README block {match['name']!r} appears twice")
        blocks[match["name"]] = match["body"]
    return blocks


def install_script(blocks: dict[str, str], path: str) -> str:
    """The blocks of install path ``path`` (``helm`` or ``kustomize``) as one bash script, stopping at a failure."""
    return "set -euo pipefail\n" + "".join(blocks[name] for name in PATHS[path])


def shipped_copy(workdir: Path) -> Path:
    """The clone's folders the blocks read, copied into ``workdir`` (the blocks write beside them, not in the repo)."""
    workdir.mkdir(parents=True, exist_ok=True)
    for folder in SHIPPED:
        shutil.copytree(REPO / folder, workdir / folder, ignore=shutil.ignore_patterns("__pycache__", "otelcol-nra"))
    return workdir


def run_install(script: str, workdir: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``script`` run by bash in ``workdir`` with exactly ``env``; its output in ``workdir/install.log`` too."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "install.sh"
    path.write_text(script)
    result = subprocess.run(["bash", str(path)], cwd=workdir, env=env, capture_output=True, text=True,
                            timeout=timeout)
    (workdir / "install.log").write_text(result.stdout + result.stderr)
    return result
