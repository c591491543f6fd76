"""The debug page as a person sees it: rendered by a real headless Chromium (Debian's package)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.factory import container, pod, vm_pod

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium package is required for the page test (.ci/run installs it)"
    return path


class Rows(HTMLParser):
    """Text of every table row, per table id, as the browser's DOM has it."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.status = ""
        self._in_status = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = attrs.get("id", "")
            self.tables[self._table] = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif attrs.get("id") == "status":
            self._in_status = True

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._table is not None and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "small":
            self._in_status = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_status:
            self.status += data


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.fixture
def page_agent(apiserver, make_agent):
    apiserver.create(pod("big-batch", namespace="batch", containers=[container("c", "3", "8Gi")]))
    apiserver.create(vm_pod("compute-a", "vm-a", "2", "4Gi", node="node-a"))
    apiserver.create(pod("small-web", containers=[container("c", "100m", "64Mi")]))
    broken = vm_pod("compute-broken", "vm-b", "1", "1Gi", node="node-a")
    broken["metadata"]["annotations"]["vm.neon.tech/usage"] = "{oops"
    apiserver.create(broken)
    agent = make_agent(debug_address="127.0.0.1:0")
    wait_until(lambda: len(agent.state) == 4)
    return agent


def test_page_renders_node_summary_top_pods_and_health(page_agent, tmp_path):
    url = f"http://127.0.0.1:{page_agent.debug.port}/"
    profile = tmp_path / "profile"
    dom = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=90)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rows = Rows()
    rows.feed(dom.stdout)
    assert rows.status.strip() == "healthy"
    assert rows.tables["node"][1][:2] == ["4", "1"]  # pods reported, valued by VM usage (the broken one is not)
    pods = rows.tables["pods"][1:]
    assert [r[1] for r in pods] == ["big-batch", "compute-a", "small-web", "compute-broken"]  # by CPU
    assert pods[0][3:5] == ["3", "8Gi"] and pods[1][2] == "vm_usage"
    assert "not JSON" in pods[3][5]
    health = dict(r for r in rows.tables["health"][1:])
    assert health["source:pods"] == health["source:nodes"] == health["pods synced"] == health["node read"] == "ok"

    shot = tmp_path / "page.png"
    result = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1100,800",
                             f"--screenshot={shot}", url], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    assert png_size(shot) == (1100, 800)
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
    print(f"screenshot: {shot}")  # in pytest's temporary directory, for a person to look at
