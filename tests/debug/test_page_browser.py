"""The debug page as a person sees it: rendered by a real headless Chromium (Debian's package)."""

from __future__ import annotations

import re
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from testkit.browser import CHROMIUM_FLAGS, Browser, chromium
from testkit.waiting import wait_until
from testkit.factory import container, node, pod, vm_pod


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
    apiserver.create(node("node-a", "8", "16Gi"), kind="nodes")
    apiserver.create(pod("big-batch", namespace="batch", containers=[container("c", "3", "8Gi")]))
    apiserver.create(vm_pod("compute-a", "vm-a", "2", "4Gi", node="node-a"))
    apiserver.create(pod("small-web", containers=[container("c", "100m", "64Mi")]))
    broken = vm_pod("compute-broken", "vm-b", "1", "1Gi", node="node-a")
    broken["metadata"]["annotations"]["vm.neon.tech/usage"] = "{oops"
    apiserver.create(broken)
    agent = make_agent(debug_address="127.0.0.1:0")
    wait_until(lambda: len(agent.state) == 4 and agent.state.node is not None)
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
    # pod_or_vm 3 + 2 + 100m = 5.1 of 8 cores, 8Gi + 4Gi + 64Mi of 16Gi
    comparison = {r[0]: r[1:] for r in rows.tables["comparison"][1:]}
    assert comparison["allocatable"] == ["8", "100%", "16Gi", "100%"]
    assert comparison["pod_or_vm"] == ["5.1", "64%", "12.1Gi", "75%"]
    assert comparison["vm_usage"] == ["2", "25%", "4Gi", "25%"]
    pods = rows.tables["pods"][1:]
    assert [r[1] for r in pods] == ["big-batch", "compute-a", "small-web", "compute-broken"]  # by CPU
    assert pods[0][2:5] == ["3", "8Gi", "pod_requests"] and pods[1][4] == "vm_usage"
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


def test_page_refreshes_pauses_sorts_and_keeps_names_on_one_line(page_agent, apiserver, tmp_path):
    long_name = "ingest-pipeline-worker-with-a-very-long-generated-name-7d4b9c5f8-x2k4p"
    apiserver.create(pod(long_name, containers=[container("c", "500m", "2Gi")]))
    wait_until(lambda: len(page_agent.state) == 5)
    browser = Browser(tmp_path / "profile", width=900, height=900)
    try:
        browser.open(f"http://127.0.0.1:{page_agent.debug.port}/?refresh=1")

        def rendered() -> float:
            return browser.wait_for("document.getElementById('updated') && document.getElementById('updated').dataset.time")

        def names() -> list[str]:
            return browser.wait_for("document.getElementById('pods') && "
                                    "Array.from(document.querySelectorAll('#pods tbody tr td:nth-child(2)'), c => c.textContent)")

        first = rendered()
        assert browser.evaluate("document.getElementById('refresh-state').textContent") == "refreshes every 1 s"
        wait_until(lambda: rendered() != first, timeout=10, message="the page never refreshed itself")

        # Pause: visible, and the page stays as it is.
        browser.evaluate("document.getElementById('pause').click()")
        assert browser.evaluate("document.getElementById('pause').textContent") == "Resume auto-refresh"
        assert browser.evaluate("document.getElementById('refresh-state').textContent") == "auto-refresh paused"
        paused_at = rendered()

        def age() -> tuple[int, float]:
            """The age the page shows and the data's true age in seconds, read in one turn of its event loop."""
            shown, true = browser.wait_for("(a => a && [a.textContent, Date.now() / 1000 - "
                                           "parseFloat(document.getElementById('updated').dataset.time)])"
                                           "(document.getElementById('age'))")
            m = re.fullmatch(r"\((\d+) s ago\)", shown)
            assert m, shown
            return int(m.group(1)), true

        # It counts up while the page stays, whenever the browser's timer fires: reloads every second would
        # restart it long before 4 s (the data was at most a refresh old when paused).
        wait_until(lambda: age()[0] >= 4, timeout=15, interval=0.2, message="the paused page's age counts up")
        assert rendered() == paused_at
        shown, true = age()
        assert shown <= true + 0.5, (shown, true)  # the data's age, rounded, as of the last tick: never ahead

        # Sort by a column: memory descending, then ascending; by name.
        assert names() == ["big-batch", "compute-a", long_name, "small-web", "compute-broken"]  # by CPU
        browser.evaluate("document.querySelectorAll('#pods th')[3].click()")
        assert names() == ["big-batch", "compute-a", long_name, "small-web", "compute-broken"]  # 8Gi, 4Gi, 2Gi, 64Mi, 0
        browser.evaluate("document.querySelectorAll('#pods th')[3].click()")
        assert names() == ["compute-broken", "small-web", long_name, "compute-a", "big-batch"]
        browser.evaluate("document.querySelectorAll('#pods th')[1].click()")
        assert names() == ["big-batch", "compute-a", "compute-broken", long_name, "small-web"]
        assert browser.evaluate("document.querySelectorAll('#pods th')[1].getAttribute('aria-sort')") == "ascending"

        # Resume: it refreshes again, and the chosen order survives the reload.
        browser.evaluate("document.getElementById('pause').click()")
        wait_until(lambda: rendered() != paused_at, timeout=10)
        assert names() == ["big-batch", "compute-a", "compute-broken", long_name, "small-web"]

        # Long pod names stay on one line: one line box per name, also in a 900 px window.
        lines = browser.evaluate("Array.from(document.querySelectorAll('#pods tbody td:nth-child(2)'), "
                                 "c => { const r = document.createRange(); r.selectNodeContents(c); "
                                 "return r.getClientRects().length; })")
        assert lines == [1, 1, 1, 1, 1]
        browser.evaluate("document.getElementById('pause').click()")  # hold still for the picture
        shot = browser.screenshot(tmp_path / "page-narrow.png")
        assert png_size(shot) == (900, 900) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        browser.close()


def test_the_autoscalers_verdict_is_on_the_first_screen(page_agent, apiserver, tmp_path):
    """State and why, utilization against the threshold, every blocker with its reason and detail, PDBs known:
    all inside an ordinary 1100 x 800 window before any scrolling, the node comparison below it."""
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "uid": "rs-uid", "controller": True}]
    apiserver.create(pod("replicated", containers=[container("c", "100m", "64Mi")], owner_references=owner))
    wait_until(lambda: len(page_agent.state) == 5)
    browser = Browser(tmp_path / "profile", width=1100, height=800)
    try:
        browser.open(f"http://127.0.0.1:{page_agent.debug.port}/?refresh=3600")
        state = browser.wait_for("(e => e && e.textContent)(document.getElementById('verdict-state'))")
        # Release 1.36 (the default) reads no VM usage, so the runner pods count by their own requests (none):
        # 3 + 0.1 + 0.1 = 3.2 of 8 cores (40 %); 8Gi + 64Mi + 64Mi of 16Gi (50.8 %): memory decides, against the
        # default threshold 50 %.
        assert state == "not underutilized: memory 51% > threshold 50%; 4 pods would also block its removal"
        rows = browser.evaluate("Array.from(document.querySelectorAll('#autoscaler-utilization tr'), "
                                "r => Array.from(r.cells, c => c.textContent))")
        assert rows == [["resource", "utilization", "threshold"], ["cpu", "40%", ""], ["memory", "51%", "50%"]]
        blockers = browser.evaluate("Array.from(document.querySelectorAll('#autoscaler-blockers tr'), "
                                    "r => Array.from(r.cells, c => c.textContent))")
        # Every pod without a trusted controller blocks, the ReplicaSet's does not; the VMs' controller is one the
        # autoscaler does not trust by default.
        assert {(r[0], r[1]) for r in blockers[1:]} == {
            ("batch/big-batch", "not_replicated"), ("default/small-web", "not_replicated"),
            ("neon/compute-a", "not_replicated"), ("neon/compute-broken", "not_replicated")}
        assert all(r[2] for r in blockers[1:])  # a detail for each
        assert browser.evaluate("document.getElementById('autoscaler-pdbs').dataset.known") == "true"
        bottoms = browser.evaluate("['verdict-state', 'autoscaler-utilization', 'autoscaler-blockers', "
                                   "'autoscaler-notes'].map(id => document.getElementById(id)"
                                   ".getBoundingClientRect().bottom)")
        assert max(bottoms) <= browser.evaluate("window.innerHeight"), bottoms
        comparison = browser.evaluate("document.getElementById('comparison').getBoundingClientRect().top")
        assert comparison > max(bottoms)
        shot = browser.screenshot(tmp_path / "page-verdict.png")
        assert png_size(shot) == (1100, 800)
        print(f"screenshot: {shot}")
    finally:
        browser.close()
