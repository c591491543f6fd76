"""A real VictoriaMetrics for end-to-end tests, from Debian trixie's package.

Bookworm's victoria-metrics (1.79) predates OTLP ingestion, so the trixie
package is downloaded with apt-get through a temporary sources list that
reuses the Debian mirror this machine is already configured with (no
registry host is written anywhere in this repository) and unpacked with
``dpkg -x`` into a cache folder. Nothing is installed system-wide.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = ["victoria_metrics_binary", "debian_binary", "VictoriaMetrics"]

CACHE = Path(os.environ.get("NRA_CACHE_DIR", Path(__file__).resolve().parent.parent / ".cache"))
SUITE = "trixie"
PACKAGE = "victoria-metrics"


def _configured_debian_mirror() -> str:
    """The first Debian archive URI in this machine's apt configuration."""
    candidates: list[str] = []
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for block in path.read_text().split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", block, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", block, re.M)
            if uris and suites and "security" not in suites.group(1):
                candidates.append(uris.group(1))
    sources_list = Path("/etc/apt/sources.list")
    if sources_list.exists():
        for line in sources_list.read_text().splitlines():
            m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m and "security" not in m.group(2):
                candidates.append(m.group(1))
    if not candidates:
        raise RuntimeError("no Debian mirror found in /etc/apt/sources.list{,.d}")
    return candidates[0]


def debian_binary(package: str, path: str, suite: str = SUITE) -> Path:
    """``path`` inside Debian ``suite``'s ``package``, downloaded and unpacked once into the cache."""
    target = CACHE / f"{package}-{suite}"
    binary = target / path
    if binary.exists():
        return binary
    work = Path(tempfile.mkdtemp(prefix=f"{package}-fetch-"))
    try:
        (work / "parts").mkdir()
        (work / "lists" / "partial").mkdir(parents=True)
        (work / "parts" / f"{suite}.sources").write_text(
            f"Types: deb\nURIs: {_configured_debian_mirror()}\nSuites: {suite}\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
        apt = ["-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={work / 'parts'}",
               "-o", f"Dir::State::Lists={work / 'lists'}", "-o", "APT::Sandbox::User=root", "-q"]
        subprocess.run(["apt-get", *apt, "update"], check=True, capture_output=True, timeout=300)
        subprocess.run(["apt-get", *apt, "download", package], check=True, capture_output=True, timeout=300, cwd=work)
        deb = next(work.glob(f"{package}_*.deb"))
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        subprocess.run(["dpkg", "-x", str(deb), str(target)], check=True, timeout=120)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return binary


def victoria_metrics_binary() -> Path:
    found = shutil.which("victoria-metrics")
    if found and _supports_otlp(Path(found)):
        return Path(found)
    return debian_binary(PACKAGE, "usr/bin/victoria-metrics")


def _supports_otlp(binary: Path) -> bool:
    out = subprocess.run([str(binary), "-help"], capture_output=True, text=True).stderr
    return "opentelemetry" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VictoriaMetrics:
    def __init__(self, data_dir: Path, extra_flags: tuple[str, ...] = ()) -> None:
        self.port = _free_port()
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
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
