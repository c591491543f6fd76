"""The command line as a user runs it: the installed entry point in a subprocess, and the kubectl plugin script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AGENT = [sys.executable, "-m", "agent"]
# pip install -e . installs this console script next to the interpreter; kubectl runs it as `kubectl node-requests`.
PLUGIN = Path(sys.executable).parent / "kubectl-node_requests"


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NODE_NAME", "KUBE", "DEBUG_ADDRESS"))}
    # Never the default debug port: something else on the machine may hold it.
    full_env.update({"DEBUG_ADDRESS": "127.0.0.1:0", **(env or {})})
    return subprocess.run([*AGENT, *args], input=input, capture_output=True, text=True, env=full_env, timeout=timeout)
