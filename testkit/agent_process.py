"""The real agent as a subprocess: the command users run, against the fake API server.

End-to-end tests compare what arrives downstream with what the agent itself
says it exports (its /debug/pods and /debug/node views) and read its own
counters from its /metrics, never its internals. The debug endpoint binds port
0; the port is read from the agent's log line. stderr is drained by a thread
that a test can pause, so a blocked log pipe (a stalled handler) can be made
on purpose.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from testkit.http import http_get
from testkit.processes import stop_process
from testkit.waiting import wait_until
from testkit.fake_apiserver import FakeApiServer
from testkit.repo import REPO

__all__ = ["AgentProcess", "otlp_env"]

_PORT_LINE = re.compile(rb"debug endpoint on port (\d+)")


def otlp_env(endpoint: str, protocol: str = "http/protobuf") -> dict[str, str]:
    """The OTEL_* variables the DaemonSet sets, pointing at ``endpoint`` (gzip, as shipped)."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}


class AgentProcess:
    """``node-requests-agent run`` for one node, exporting OTLP every ``interval`` seconds."""

    def __init__(self, api: FakeApiServer, workdir: Path, node: str, env: Mapping[str, str],
                 interval: float = 1.0, args: Sequence[str] = ()) -> None:
        self.node = node
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = api.kubeconfig(self.workdir / "kubeconfig")
        self.argv = [sys.executable, "-m", "agent", "run", "--node-name", node, "--kubeconfig", kubeconfig,
                     "--exporter", "otlp", "--export-interval", str(interval), "--debug-address", "127.0.0.1:0",
                     "--procfs", "/proc", *args]
        self.env = {**os.environ, **env}
        self.log: list[bytes] = []
        self.port = 0
        self._draining = threading.Event()
        self._draining.set()
        self._proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> AgentProcess:
        """Launch, and wait until /readyz says the initial LIST and the Node have been handled."""
        self._proc = subprocess.Popen(self.argv, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        threading.Thread(target=self._drain, name=f"agent-log-{self.node}", daemon=True).start()
        wait_until(lambda: self.port or self._exited(), timeout=timeout, message="agent logs its debug port")
        wait_until(lambda: self._ready() or self._exited(), timeout=timeout, message="agent /readyz")
        return self

    def _drain(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self.log.append(line)
            if not self.port and (m := _PORT_LINE.search(line)):
                self.port = int(m.group(1))
            self._draining.wait()

    def _exited(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise AssertionError(f"agent exited with {self._proc.returncode}:\n{self.log_text()[-3000:]}")
        return False

    def _ready(self) -> bool:
        try:
            return http_get(f"{self.url}/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    def hold_log(self, pipe_bytes: int = 4096) -> None:
        """Stop reading the agent's stderr and shrink the pipe: once it is full, every log call blocks."""
        assert self._proc is not None and self._proc.stderr is not None
        fcntl.fcntl(self._proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, pipe_bytes)
        self._draining.clear()

    def release_log(self) -> None:
        self._draining.set()

    def log_text(self) -> str:
        return b"".join(self.log).decode(errors="replace")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def debug(self, path: str) -> dict:
        """A JSON view of the debug endpoint (``pods``, ``node``, ``runtime``)."""
        status, body = http_get(f"{self.url}/debug/{path}", timeout=5)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def pods(self) -> dict[str, dict]:
        """The reported pods by uid, as the agent exports them."""
        return {p["uid"]: p for p in self.debug("pods")["pods"] if p["reported"]}

    def samples(self) -> dict[tuple[str, frozenset], float]:
        """Every sample of the agent's own /metrics: (name, labels) -> value."""
        status, body = http_get(f"{self.url}/metrics", timeout=5)
        assert status == 200, (status, body[:300])
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(body.decode()) for s in family.samples}

    def exports(self, result: str) -> float:
        """``node_requests_agent_exports_total{result}``: the agent's count of OTLP exports."""
        return sum(v for (name, labels), v in self.samples().items()
                   if name == "node_requests_agent_exports_total" and ("result", result) in labels)

    def rss_mib(self) -> float:
        assert self._proc is not None
        return psutil.Process(self._proc.pid).memory_info().rss / 2**20

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (the agent exports once more and exits), SIGKILL if it does not; the exit code."""
        if self._proc is None:
            return None
        self.release_log()
        return stop_process(self._proc, timeout)

    def __enter__(self) -> AgentProcess:
        return self.start() if self._proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
