"""A real VictoriaMetrics for end-to-end tests, from Debian trixie's package.

Bookworm's victoria-metrics (1.79) predates OTLP ingestion, so trixie's package
is fetched by components.debian (apt-get download through this machine's own
Debian mirror, dpkg -x into the component cache outside the clone). Nothing is
installed system-wide. A victoria-metrics on PATH that ingests OTLP is used as is.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from components.debian import debian_binary
from testkit.cluster import free_ports
from testkit.processes import stop_process

__all__ = ["victoria_metrics_binary", "VictoriaMetrics", "victoriametrics"]

SUITE = "trixie"
PACKAGE = "victoria-metrics"


def victoria_metrics_binary() -> Path:
    found = shutil.which("victoria-metrics")
    if found and _supports_otlp(Path(found)):
        return Path(found)
    return debian_binary(PACKAGE, "usr/bin/victoria-metrics", SUITE)


def _supports_otlp(binary: Path) -> bool:
    out = subprocess.run([str(binary), "-help"], capture_output=True, text=True).stderr
    return "opentelemetry" in out


class VictoriaMetrics:
    def __init__(self, data_dir: Path, extra_flags: tuple[str, ...] = ()) -> None:
        (self.port,) = free_ports(1)
        self._proc = subprocess.Popen(
            [str(victoria_metrics_binary()), f"-httpListenAddr=127.0.0.1:{self.port}", f"-storageDataPath={data_dir}",
             "-retentionPeriod=1d", "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=ERROR",
             *extra_flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                    if r.read().strip() == b"OK":
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("VictoriaMetrics did not become healthy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def otlp_endpoint(self) -> str:
        return f"{self.url}/opentelemetry/v1/metrics"

    def _get(self, path: str, params: dict[str, str] | list[tuple[str, str]]) -> bytes:
        with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(params)}", timeout=10) as r:
            return r.read()

    def query(self, promql: str) -> list[dict]:
        body = json.loads(self._get("/api/v1/query", {"query": promql}))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def samples(self, selector: str) -> list[dict]:
        """Raw samples of every series matching ``selector`` (VictoriaMetrics' /api/v1/export)."""
        text = self._get("/api/v1/export", [("match[]", selector)]).decode()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def stop(self) -> None:
        stop_process(self._proc, 10.0)


@pytest.fixture(scope="session")
def victoriametrics(tmp_path_factory):
    vm = VictoriaMetrics(tmp_path_factory.mktemp("vmdata"))
    yield vm
    vm.stop()
