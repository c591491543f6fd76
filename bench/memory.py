"""RSS against pods on the node, and the floor program holding the same points (``bench/run.py memory``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.common import FakeApiServer, HttpReceiver, RunningAgent, load, machine
from bench.floor_program import FloorProgram
from bench.measure import Point, last_export_points, wait_exported
from testkit.factory import realistic_pod

POD_COUNTS = (0, 110, 500, 2000)
FLOOR_AT = (110, 2000)  # the pod counts the floor program is measured at


@dataclass(frozen=True, kw_only=True)
class FloorComparison:
    """The agent's steady RSS at one pod count and the floor program's with the same points (MiB)."""

    agent: float
    points: int
    floor: float  # no API connection
    floor_connected: float  # one request to the API server over TLS, its connection kept
    floor_lean: float  # issue 30's: one TLS connection through urllib3, OTel SDK + OTLP/HTTP exporter + psutil
    floor_imported: float  # the same, as the issue words it: those packages imported, nothing exported


def main() -> None:
    print("\n### RSS against pods on the node (production install, in-cluster as in its pod: service account token "
          "and CA, API over HTTPS; steady state, OTLP/HTTP export every 1 s)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| pods | steady RSS MiB | peak RSS MiB (VmHWM) | peak / steady | start-up to first full export s |")
    print("|---:|---:|---:|---:|---:|")
    floors: dict[int, FloorComparison] = {}
    steady: dict[int, float] = {}
    for n in POD_COUNTS:
        comparison = _measure(n, steady)
        if comparison is not None:
            floors[n] = comparison
    _report_floors(floors)
    if 110 in steady and 2000 in steady:
        print(f"\nMemory per extra pod (110 to 2,000 pods): **{(steady[2000] - steady[110]) * 1024 / 1890:.1f} KiB**")


def _measure(n: int, steady_of: dict[int, float]) -> FloorComparison | None:
    """The agent's row for ``n`` pods, printed (its steady RSS into ``steady_of``); at FLOOR_AT also the floor
    programs', returned."""
    api, receiver = FakeApiServer(tls=True).start(), HttpReceiver().start()
    try:
        for i in range(n):
            api.create(realistic_pod(i))
        agent = RunningAgent(api, receiver, interval=1.0, in_cluster=True)
        try:
            if n:
                wait_exported(receiver, n)
                ready = f"{time.monotonic() - agent.started:.2f}"
            else:
                ready = "n/a"  # nothing to export: no OTLP request is sent
            steady = steady_of[n] = _steady_rss(agent.rss_mib)
            peak = agent.peak_mib()
            print(f"| {n:,} | {steady:.1f} | {peak:.1f} | {peak / steady:.2f}x | {ready} |")
            if n not in FLOOR_AT:
                return None
            points = last_export_points(receiver)
            return FloorComparison(agent=steady, points=len(points), floor=_floor_rss(api, points, connect=False),
                                   floor_connected=_floor_rss(api, points),
                                   floor_lean=_floor_rss(api, points, lean=True),
                                   floor_imported=_floor_rss(api, points, interval=0, lean=True))
        finally:
            agent.stop()
    finally:
        api.stop()
        receiver.stop()


def _steady_rss(rss_mib) -> float:
    """The largest of five samples a second apart, 5 s from now."""
    time.sleep(5)
    samples = []
    for _ in range(5):
        samples.append(rss_mib())
        time.sleep(1)
    return max(samples)


def _floor_rss(api: FakeApiServer, points: list[Point], interval: float = 1.0, connect: bool = True,
               lean: bool = False) -> float:
    """Steady RSS of the floor program: the largest of five samples, after its second export and 5 s more."""
    floor = FloorProgram(api, points, interval, connect, lean)
    try:
        if interval:
            floor.wait_exports(2)
        return _steady_rss(lambda: floor.ps.memory_info().rss / 2**20)
    finally:
        floor.stop()


def _report_floors(floors: dict[int, FloorComparison]) -> None:
    print("\nFloor (bench/baselines/floor.py: interpreter + kubernetes config and ApiClient from the same kubeconfig + "
          "psutil + opentelemetry-sdk with its OTLP/HTTP exporter, exporting the same points every 1 s), same run; "
          "without and with one request to the API server over TLS, its connection kept:\n")
    print("| pods | points | floor MiB | agent / floor | floor + TLS connection MiB | agent / floor + TLS | "
          "agent MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, f in floors.items():
        print(f"| {n:,} | {f.points:,} | {f.floor:.1f} | {f.agent / f.floor:.3f}x | {f.floor_connected:.1f} | "
              f"**{f.agent / f.floor_connected:.3f}x** | {f.agent:.1f} |")
    print("\nIssue 30's floor (bench/baselines/lean_floor.py: interpreter + one TLS connection to the API server "
          "through urllib3 + psutil + opentelemetry-sdk with its OTLP/HTTP exporter, exporting the same points every "
          "1 s; no kubernetes package), same run; target at 110 pods: agent / floor <= 1.15x:\n")
    print("The same floor as the issue words it, \"imported\": the packages loaded and the connection held, nothing "
          "exported (lean_floor.py with interval 0); the stricter line, since it pays nothing for the points:\n")
    print("| pods | points | lean floor MiB | agent / lean floor | imported-only floor MiB | agent / imported-only "
          "| agent MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, f in floors.items():
        print(f"| {n:,} | {f.points:,} | {f.floor_lean:.1f} | **{f.agent / f.floor_lean:.3f}x** | "
              f"{f.floor_imported:.1f} | **{f.agent / f.floor_imported:.3f}x** | {f.agent:.1f} |")
