"""The real helm (built by components.gotools) for the chart tests, with folders of its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from components.gotools import tool_bin
from testkit.repo import REPO

__all__ = ["CHART", "Helm", "built_helm"]

CHART = REPO / "charts" / "node-requests-agent"


class Helm:
    """The built helm with its own cache, config and data folders (nothing of the user's is read or written)."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "HELM_"))}
        for name in ("CACHE", "CONFIG", "DATA"):
            self.env[f"HELM_{name}_HOME"] = str(home / name.lower())
        self.env["KUBECONFIG"] = str(home / "no-kubeconfig")  # helm template needs no cluster; install passes one

    def __call__(self, *args: str, kubeconfig: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        env = dict(self.env)
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        return subprocess.run([str(self.binary), *args], capture_output=True, text=True, env=env, timeout=timeout)

    def template(self, *args: str, release: str = "node-requests-agent",
                 namespace: str = "node-requests-agent") -> list[dict]:
        result = self("template", release, str(CHART), "--namespace", namespace, *args)
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d]


def built_helm(home: Path) -> Helm:
    """helm from components/ (built on first use); a missing component fails the tests that need it, never skips."""
    try:
        binary = tool_bin("helm") / "helm"
    except Exception as error:
        pytest.fail(f"helm could not be built by components.gotools: {error}", pytrace=False)
    return Helm(binary, home)
