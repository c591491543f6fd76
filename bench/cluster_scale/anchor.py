"""The client-go anchor: bench/reflector_anchor's informers for the measured nodes, with the agents' tokens."""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import threading
import time
from pathlib import Path

from bench.cluster_scale.sizes import ANCHOR_DIR
from bench.common import required
from components.cache import cached
from components.go import build_flags, go
from testkit.kubelet import AgentContainer
from testkit.processes import stop_process
from testkit.trust import TrustCluster


def anchor_bin() -> Path:
    """bench/reflector_anchor built into the component cache, keyed by its sources (never committed as a binary)."""
    sources = sorted(p for p in ANCHOR_DIR.iterdir() if p.suffix in (".go", ".mod", ".sum"))
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sources)).hexdigest()[:16]

    def build(out: Path) -> None:
        (out / "bin").mkdir()
        go(["build", *build_flags(), "-o", out / "bin" / "reflector-anchor", "."], cwd=ANCHOR_DIR)

    return cached("reflector-anchor", digest, build) / "bin" / "reflector-anchor"


class Anchor:
    """The anchor process: client-go informers for ``nodes`` with the agents' tokens; its JSON lines collected."""

    def __init__(self, cluster: TrustCluster, agents: list[AgentContainer], workdir: Path) -> None:
        targets = [{"node": a.node, "token_file": str(a.serviceaccount.token_path)} for a in agents]
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "targets.json").write_text(json.dumps(targets))
        self.events: list[dict] = []
        ca = required(cluster.pki, "the cluster's PKI").crt("ca")
        with open(workdir / "anchor.log", "ab") as log:  # the child holds its own copy of the descriptor
            self.proc = subprocess.Popen([str(anchor_bin()), "-server", cluster.server, "-ca", str(ca),
                                          "-targets", str(workdir / "targets.json")],
                                         stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in required(self.proc.stdout, "the anchor's stdout pipe"):
            with contextlib.suppress(ValueError):  # a line that is not one JSON event
                self.events.append(json.loads(line))

    def nodes_with(self, event: str, since: float = 0.0, detail: str | None = None) -> dict[str, float]:
        """First time per node of ``event`` after ``since``."""
        out: dict[str, float] = {}
        for e in list(self.events):
            if e["event"] == event and e["t"] >= since and (detail is None or e.get("detail") == detail):
                out.setdefault(e["node"], e["t"])
        return out

    def wait_synced(self, count: int, timeout: float = 600) -> float:
        """Until ``count`` nodes' informers synced; the wall clock of the last one."""
        deadline = time.monotonic() + timeout
        while len(self.nodes_with("synced")) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"anchor: {len(self.nodes_with('synced'))} of {count} synced")
            time.sleep(0.5)
        return max(self.nodes_with("synced").values())

    def saw(self, markers: dict[str, str], timeout: float = 600) -> dict[str, float]:
        """Per node, when its informer first saw its pod of ``markers`` (node -> namespace/name); at most
        ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            seen: dict[str, float] = {}
            for e in list(self.events):
                if e["event"] == "marker" and e.get("detail") == markers.get(e["node"]):
                    seen.setdefault(e["node"], e["t"])
            if len(seen) == len(markers) or time.monotonic() > deadline:
                return seen
            time.sleep(0.2)

    def first_pod_lists(self, since: float) -> dict[str, float]:
        """Per node, its first successful pod LIST or streaming list after ``since``."""
        first: dict[str, float] = {}
        for e in self.events:
            if e["t"] >= since and e["event"] in ("list", "watchlist") and e["resource"] == "pods":
                first.setdefault(e["node"], e["t"])
        return first

    def stop(self) -> None:
        stop_process(self.proc, 10)
