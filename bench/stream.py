"""The event path end to end, black box: the installed agent reading a watch over HTTPS against the floor client
(bench/baselines/stream_floor.py) reading the same bytes (``bench/run.py stream``)."""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import psutil

from bench.common import FakeApiServer, HttpReceiver, RunningAgent, baseline_command, load, machine, required
from bench.measure import cpu_when_quiet
from testkit.factory import realistic_pod
from testkit.processes import stop_process

STREAMS = {"status churn": False, "requests change every event": True}  # name -> every event changes a request


def main(n: int = 5000, pods: int = 500, repeat: int = 7) -> None:
    """The whole event path black box: the installed agent reading a watch over HTTPS, against the floor client."""
    print(f"\n### Event path end to end: {n:,} MODIFIED events per burst over HTTPS (production install, {pods} pods; "
          f"CPU time of each process, median of {repeat} interleaved bursts)\n")
    print(f"machine: {machine()}; {load()}\n")
    with ExitStack() as stack:
        apis = _apis_with_pods(stack, pods)
        agent, floor = _start_agent(stack, apis["agent"]), _start_floor(stack, apis["floor"], n)
        bursts = {"agent": partial(_agent_burst, agent),
                  "floor": partial(_floor_burst, floor, psutil.Process(floor.pid))}
        templates = [json.loads(json.dumps(realistic_pod(i))) for i in range(pods)]
        cpu: dict[tuple[str, str], list[float]] = {(s, w): [] for s in STREAMS for w in bursts}
        size = 0.0
        for _ in range(repeat):  # interleaved: machine noise hits both alike
            for name, resize in STREAMS.items():
                for who, burst in bursts.items():
                    lines = _watch_lines(templates, n, apis[who].resource_version + 1, resize)
                    size = sum(map(len, lines)) / n
                    cpu[(name, who)].append(burst(apis[who], lines))
        _report(cpu, n, size)


def _apis_with_pods(stack: ExitStack, pods: int) -> dict[str, FakeApiServer]:
    """One fake API server over TLS for each side, both holding the same ``pods``."""
    apis = {"agent": FakeApiServer(tls=True).start(), "floor": FakeApiServer(tls=True).start()}
    for api in apis.values():
        stack.callback(api.stop)
    for api in apis.values():
        for i in range(pods):
            api.create(realistic_pod(i))
    return apis


def _start_agent(stack: ExitStack, api: FakeApiServer) -> RunningAgent:
    """The agent as deployed but with no export during a burst (its cost is the export section's)."""
    receiver = HttpReceiver().start()
    stack.callback(receiver.stop)
    agent = RunningAgent(api, receiver, interval=3600.0)
    stack.callback(agent.stop)
    agent.wait_ready()
    return agent


def _start_floor(stack: ExitStack, api: FakeApiServer, n: int) -> subprocess.Popen:
    """The floor client watching ``api``'s pods; it prints "burst" after every ``n`` lines."""
    query = f"watch=true&resourceVersion={api.resource_version}&fieldSelector=spec.nodeName%3Dbench-node"
    ca_file = required(api.ca_file, "the CA of a TLS fake API server (tls=True)")
    floor = subprocess.Popen(baseline_command("stream_floor.py", f"{api.url}/api/v1/pods?{query}", ca_file,
                                              api.token, str(n)),
                             cwd=Path(ca_file).parent, stdout=subprocess.PIPE, text=True)
    stack.callback(stop_process, floor, 10)
    if required(floor.stdout, "the floor client's stdout pipe").readline().strip() != "ready":
        raise SystemExit("the floor client did not start")
    return floor


def _agent_burst(agent: RunningAgent, api: FakeApiServer, lines: list[bytes]) -> float:
    """CPU seconds the agent spent on ``lines``: until it went quiet, having taken every event."""
    added = agent.runtime()["events_added"].get("MODIFIED", 0)
    gc.collect()
    before = sum(agent.ps.cpu_times()[:2])
    api.inject_raw(*lines)
    after = cpu_when_quiet(agent.ps)
    got = agent.runtime()["events_added"].get("MODIFIED", 0) - added
    if got != len(lines):
        raise SystemExit(f"the agent took {got} of {len(lines)} events")
    return after - before


def _floor_burst(floor: subprocess.Popen, ps: psutil.Process, api: FakeApiServer, lines: list[bytes]) -> float:
    """CPU seconds the floor client spent on ``lines``: until it said it read them all."""
    gc.collect()
    before = sum(ps.cpu_times()[:2])
    api.inject_raw(*lines)
    if required(floor.stdout, "the floor client's stdout pipe").readline().strip() != "burst":
        raise SystemExit("the floor client stopped")
    return sum(ps.cpu_times()[:2]) - before


def _watch_lines(pods: list[dict], n: int, first_rv: int, resize_every_event: bool) -> list[bytes]:
    """``n`` MODIFIED events for ``pods`` in turn, compact as the API server writes them, versions from ``first_rv``."""
    lines = []
    for i in range(n):
        p = pods[i % len(pods)]
        p["metadata"]["resourceVersion"] = str(first_rv + i)
        if resize_every_event:
            p["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = f"{100 + i % 900}m"
        lines.append(json.dumps({"type": "MODIFIED", "object": p}, separators=(",", ":")).encode())
    return lines


def _report(cpu: dict[tuple[str, str], list[float]], n: int, size: float) -> None:
    print(f"Mean event {size / 1024:.1f} KiB of compact JSON, one HTTP chunk (one TLS record) each, as an API server "
          "writes a watch. Floor: `bench/baselines/stream_floor.py` reads the same bytes over the same kind of "
          "connection (http.client `read1`, split at newlines, `json.loads` per line).\n")
    print("| stream | agent us/event | floor us/event | agent speed vs floor |")
    print("|---|---:|---:|---:|")
    for name in STREAMS:
        a, f = (statistics.median(cpu[(name, w)]) / n * 1e6 for w in ("agent", "floor"))
        print(f"| {name} | {a:.1f} | {f:.1f} | **{f / a:.2f}x** |")
