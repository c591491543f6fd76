"""Process control for the real components the tests run as children (control plane, Collector, Prometheus,
VictoriaMetrics, the agent, Chromium): one way to stop them, one way to read the end of their logs."""

from __future__ import annotations

import subprocess
from pathlib import Path


def stop_process(proc: subprocess.Popen | None, timeout: float = 15.0, graceful: bool = True) -> int | None:
    """SIGTERM (SIGKILL at once when not ``graceful``: a crash), SIGKILL if it has not gone after ``timeout``;
    the child is reaped. The exit code, or None when there was no process."""
    if proc is None:
        return None
    if proc.poll() is None:
        if graceful:
            proc.terminate()
        else:
            proc.kill()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


def log_tail(path: Path, lines: int = 30) -> str:
    """The end of a log file, for failure messages."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"
