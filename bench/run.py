"""Benchmarks for node-requests-agent. Run: python bench/run.py [throughput|stream|list|memory|churn|idle|versus|export|startup|all|cluster-scale]

Each prints a Markdown table row set; docs/benchmarks.md's figures come from this script.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

from common import (FakeApiServer, HttpReceiver, RunningAgent, load, machine, pods_exported,  # noqa: F401
                    realistic_pod)


def _events(n: int, resize_every_event: bool = False) -> list[bytes]:
    """ADDED for 500 pods, then MODIFIED events for them (status churn, the common case in a real watch).

    With ``resize_every_event`` each MODIFIED also changes a request, so no event can reuse the last value.
    """
    lines = []
    for i in range(n):
        p = realistic_pod(i % 500)
        p["metadata"]["resourceVersion"] = str(1000 + i)
        if resize_every_event and i >= 500:
            p["spec"]["containers"][0]["resources"].setdefault("requests", {})["cpu"] = f"{100 + i % 900}m"
        lines.append(json.dumps({"type": "MODIFIED" if i >= 500 else "ADDED", "object": p}).encode())
    return lines


def _best(fns, repeat: int = 7) -> list[float]:
    """Best CPU time of each function, runs interleaved so machine noise hits all alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            gc.collect()
            start = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - start)
    return best


class _OneWatch:
    """The API as the reflector sees it: an empty LIST, then one watch stream of ``chunks``; then ``stop``."""

    def __init__(self, chunks: list[bytes], stop) -> None:
        self._chunks, self._stop, self._served = chunks, stop, False

    def get_chunks(self, path, params, read_timeout=60.0):
        return iter([b'{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]}'])

    def stream_lines(self, path, params, read_timeout):
        from agent.source.kube import split_lines

        if self._served:
            self._stop.set()
            return
        self._served = True
        yield from split_lines(self._chunks)


def _chunks(lines: list[bytes], size: int = 65536) -> list[bytes]:
    """Watch lines as the socket delivers them: newline-delimited, cut at arbitrary points."""
    data = b"\n".join(lines) + b"\n"
    return [data[i:i + size] for i in range(0, len(data), size)]


def _whole_path(chunks: list[bytes]) -> int:
    """What the agent does with a watch stream: split, reflector, queue, stats, handler. Returns the pods held."""
    import threading

    from agent.pipeline.handler import Handler
    from agent.pipeline.queue import EventQueue
    from agent.pipeline.state import NodeState
    from agent.pipeline.stats import RuntimeStats
    from agent.source.reflector import PodsOfNode, Reflector

    stats = RuntimeStats()
    state = NodeState("bench-node")
    queue = EventQueue(metrics=stats)
    stop = threading.Event()
    Reflector(api=_OneWatch(chunks, stop), watched=PodsOfNode(node_name="bench-node"), emit=queue.put,
              metrics=stats).run(stop)
    Handler(state=state, metrics=stats).run(queue, stop, poll=0.0)
    return len(state.pods())


def throughput(n: int = 5000) -> None:
    """The whole watch-event path against plain json.loads of the same lines, on two streams."""
    from kubernetes.client import ApiClient

    from agent.decode.reader import POD

    def parse_only(lines):
        for line in lines:
            json.loads(line)

    streams = {"status churn": _events(n), "requests change every event": _events(n, resize_every_event=True)}
    size = statistics.mean(len(x) for x in streams["status churn"])
    client = ApiClient()

    def kube_client(lines):
        # What Watch.stream does per event (json.loads, json.dumps, deserialize into V1Pod), keeping its cache.
        cache = {}
        for line in lines:
            raw = json.loads(line)
            obj = client.deserialize(json.dumps(raw["object"]), "V1Pod", "application/json")
            cache[obj.metadata.uid] = obj
        return len(cache)

    print(f"\n### Event throughput ({n:,} watch events, mean {size / 1024:.1f} KiB each; CPU time, best of 7 interleaved)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| stream | path | us/event | events/s | vs json.loads |")
    print("|---|---|---:|---:|---:|")
    for name, lines in streams.items():
        chunks = _chunks(lines)
        assert _whole_path(chunks) == 500
        t_json, t_agent, t_tolerant = _best([
            lambda: parse_only(lines),
            lambda: _whole_path(chunks),
            lambda: [POD.tolerant(json.loads(line)["object"]) for line in lines],
        ])
        rows = [("`json.loads` only (baseline)", t_json),
                ("agent, whole path: split lines + reflector + queue + stats + handler", t_agent),
                ("(for scale) `json.loads` + the tolerant decoder alone, no pipeline", t_tolerant)]
        if name == "status churn":
            t_kube, = _best([lambda: kube_client(lines)], 2)
            rows.append(("kubernetes client: Watch.stream's decoding into `V1Pod`, kept in a cache", t_kube))
        for path, t in rows:
            print(f"| {name} | {path} | {t / n * 1e6:.1f} | {n / t:,.0f} | {t_json / t:.2f}x |")


def _cpu_when_quiet(ps, settle: float = 0.3, poll: float = 0.05, timeout: float = 300.0) -> float:
    """The process's CPU seconds once it has stopped working: unchanged for ``settle`` seconds (ticks are 10 ms)."""
    def cpu() -> float:
        t = ps.cpu_times()
        return t.user + t.system

    last, since, deadline = cpu(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(poll)
        now = cpu()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= settle:
            return now
    raise SystemExit("the process never went quiet")


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


def stream(n: int = 5000, pods: int = 500, repeat: int = 7) -> None:
    """The whole event path black box: the installed agent reading a watch over HTTPS, against the floor client."""
    import subprocess
    from pathlib import Path

    import psutil

    from common import ROOT, production_venv

    print(f"\n### Event path end to end: {n:,} MODIFIED events per burst over HTTPS (production install, {pods} pods; "
          f"CPU time of each process, median of {repeat} interleaved bursts)\n")
    print(f"machine: {machine()}; {load()}\n")
    apis = {"agent": FakeApiServer(tls=True).start(), "floor": FakeApiServer(tls=True).start()}
    receiver = HttpReceiver().start()
    agent = floor = None
    try:
        for api in apis.values():
            for i in range(pods):
                api.create(realistic_pod(i))
        # No export during a burst (its cost is the export section's); everything else as deployed.
        agent = RunningAgent(apis["agent"], receiver, interval=3600.0)
        agent.wait_ready()
        api = apis["floor"]
        query = f"watch=true&resourceVersion={api.resource_version}&fieldSelector=spec.nodeName%3Dbench-node"
        floor = subprocess.Popen([str(production_venv() / "bin" / "python"), str(ROOT / "bench" / "stream_floor.py"),
                                  f"{api.url}/api/v1/pods?{query}", api.ca_file, api.token, str(n)],
                                 cwd=Path(api.ca_file).parent, stdout=subprocess.PIPE, text=True)
        if floor.stdout.readline().strip() != "ready":
            raise SystemExit("the floor client did not start")
        procs = {"agent": agent.ps, "floor": psutil.Process(floor.pid)}
        templates = [json.loads(json.dumps(realistic_pod(i))) for i in range(pods)]
        streams = {"status churn": False, "requests change every event": True}
        cpu: dict[tuple[str, str], list[float]] = {(s, w): [] for s in streams for w in procs}
        size = 0
        for _ in range(repeat):  # interleaved: machine noise hits both alike
            for name, resize in streams.items():
                for who, ps in procs.items():
                    api = apis[who]
                    lines = _watch_lines(templates, n, api.resource_version + 1, resize)
                    size = sum(map(len, lines)) / n
                    added = agent.runtime()["events_added"].get("MODIFIED", 0) if who == "agent" else 0
                    gc.collect()
                    before = sum(ps.cpu_times()[:2])
                    api.inject_raw(*lines)
                    if who == "floor":
                        if floor.stdout.readline().strip() != "burst":
                            raise SystemExit("the floor client stopped")
                        after = sum(ps.cpu_times()[:2])
                    else:
                        after = _cpu_when_quiet(ps)
                        got = agent.runtime()["events_added"].get("MODIFIED", 0) - added
                        if got != n:
                            raise SystemExit(f"the agent took {got} of {n} events")
                    cpu[(name, who)].append(after - before)
        print(f"Mean event {size / 1024:.1f} KiB of compact JSON, one HTTP chunk (one TLS record) each, as an API server "
              "writes a watch. Floor: `bench/stream_floor.py` reads the same bytes over the same kind of connection "
              "(http.client `read1`, split at newlines, `json.loads` per line).\n")
        print("| stream | agent us/event | floor us/event | agent speed vs floor |")
        print("|---|---:|---:|---:|")
        for name in streams:
            a, f = (statistics.median(cpu[(name, w)]) / n * 1e6 for w in ("agent", "floor"))
            print(f"| {name} | {a:.1f} | {f:.1f} | **{f / a:.2f}x** |")
    finally:
        if floor is not None:
            floor.terminate()
            floor.wait(10)
        if agent is not None:
            agent.stop()
        for api in apis.values():
            api.stop()
        receiver.stop()


def list_decode(pods: int = 2000, repeat: int = 5) -> None:
    """Decoding one LIST answer: main's way (whole body as text, json module per item) against the streamed typed one."""
    from agent.decode.reader import POD
    from agent.source.listing import iter_list, read_list

    # As the API server writes a LIST: compact, items without their kind and apiVersion.
    items = [{k: v for k, v in realistic_pod(i).items() if k not in ("kind", "apiVersion")} for i in range(pods)]
    body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, "items": items},
                      separators=(",", ":")).encode()
    chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]

    def text_then_json():  # main before this change: bytes -> str, then json per item
        fields, items = iter_list(body.decode("utf-8"))
        return [POD.tolerant(item) for item in items]

    def streamed_typed():  # as the reflector reads a LIST
        fields, items = read_list(iter(chunks), POD.list_item)
        return [POD.record(item) for item in items]

    assert text_then_json() == streamed_typed()
    t_old, t_new = _best([text_then_json, streamed_typed], repeat)
    print(f"\n### LIST decode ({pods:,} pods, body {len(body) / 2**20:.1f} MiB; CPU time, best of {repeat} interleaved)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| path | ms | per pod us | vs text + json |")
    print("|---|---:|---:|---:|")
    print(f"| body as text, json module per item, tolerant decode (before) | {t_old * 1000:.0f} | {t_old / pods * 1e6:.0f} | 1.00x |")
    print(f"| streamed 64 KiB chunks, each item parsed once by msgspec into the typed records (now) | {t_new * 1000:.0f} | {t_new / pods * 1e6:.0f} | "
          f"{t_old / t_new:.1f}x less CPU |")


def _settle(agent: RunningAgent, receiver: HttpReceiver, expected: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pods_exported(receiver) == expected:
            return
        time.sleep(0.2)
    raise SystemExit(f"agent did not export {expected} pods (last export had {pods_exported(receiver)})")


class _Floor:
    """bench/floor.py (the mandated packages holding ``points``) from the production venv, exporting to its own receiver."""

    def __init__(self, api: FakeApiServer, points: list, interval: float = 1.0, connect: bool = True) -> None:
        import os
        import subprocess
        import tempfile
        from pathlib import Path

        import psutil

        from common import ROOT, production_venv

        work = Path(tempfile.mkdtemp(prefix="bench-floor-"))
        (work / "points.json").write_text(json.dumps(points))
        self.receiver = HttpReceiver().start()
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": self.receiver.endpoint,
               "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": self.receiver.endpoint + "/v1/metrics",
               "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}
        self.proc = subprocess.Popen([str(production_venv() / "bin" / "python"), str(ROOT / "bench" / "floor.py"),
                                      api.kubeconfig(work / "kubeconfig"), str(work / "points.json"), str(interval),
                                      *(["connect"] if connect else [])],
                                     cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            self.stop()
            raise SystemExit("the floor program did not start")
        self.ps = psutil.Process(self.proc.pid)

    def wait_exports(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.receiver.requests) < count:
            if time.monotonic() > deadline:
                self.stop()
                raise SystemExit("the floor program did not export")
            time.sleep(0.2)

    def cpu_seconds(self) -> float:
        return sum(self.ps.cpu_times()[:2])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.receiver.stop()


def _floor_rss(api: FakeApiServer, points: list, interval: float = 1.0, connect: bool = True) -> float:
    """Steady RSS of the floor program: the largest of five samples, after its second export and 5 s more."""
    floor = _Floor(api, points, interval, connect)
    try:
        floor.wait_exports(2)
        time.sleep(5)
        samples = []
        for _ in range(5):
            samples.append(floor.ps.memory_info().rss / 2**20)
            time.sleep(1)
        return max(samples)
    finally:
        floor.stop()


def memory() -> None:
    from tests.support.otlp_receiver import points_of

    print("\n### RSS against pods on the node (production install, API over HTTPS, steady state, OTLP/HTTP export "
          "every 1 s)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| pods | steady RSS MiB | peak RSS MiB (VmHWM) | peak / steady | start-up to first full export s |")
    print("|---:|---:|---:|---:|---:|")
    floors = {}
    for n in (0, 110, 500, 2000):
        api, receiver = FakeApiServer(tls=True).start(), HttpReceiver().start()
        try:
            for i in range(n):
                api.create(realistic_pod(i))
            agent = RunningAgent(api, receiver, interval=1.0)
            try:
                if n:
                    _settle(agent, receiver, n)
                    ready = f"{time.monotonic() - agent.started:.2f}"
                else:
                    ready = "n/a"  # nothing to export: no OTLP request is sent
                time.sleep(5)
                samples = []
                for _ in range(5):
                    samples.append(agent.rss_mib())
                    time.sleep(1)
                steady, peak = max(samples), agent.peak_mib()
                print(f"| {n:,} | {steady:.1f} | {peak:.1f} | {peak / steady:.2f}x | {ready} |")
                if n in (110, 2000):
                    with receiver.cond:
                        last = receiver.requests[-1][1]
                    points = [(p.metric, {k: str(v) for k, v in p.attributes.items()}, p.value) for p in points_of(last)]
                    floors[n] = (steady, len(points), _floor_rss(api, points, connect=False), _floor_rss(api, points))
            finally:
                agent.stop()
        finally:
            api.stop()
            receiver.stop()
    print("\nFloor (bench/floor.py: interpreter + kubernetes config and ApiClient from the same kubeconfig + psutil + "
          "opentelemetry-sdk with its OTLP/HTTP exporter, exporting the same points every 1 s), same run; without "
          "and with one request to the API server over TLS, its connection kept:\n")
    print("| pods | points | floor MiB | agent / floor | floor + TLS connection MiB | agent / floor + TLS | agent MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n, (steady, count, bare, connected) in floors.items():
        print(f"| {n:,} | {count:,} | {bare:.1f} | {steady / bare:.3f}x | {connected:.1f} | **{steady / connected:.3f}x** | "
              f"{steady:.1f} |")


def churn(total: int = 20000, live: int = 110) -> None:
    print(f"\n### Churn: {total:,} pods created and deleted, at most {live} live (production install, export every 1 s)\n")
    print(f"machine: {machine()}; {load()}\n")
    api, receiver = FakeApiServer().start(), HttpReceiver().start()
    agent = RunningAgent(api, receiver, interval=1.0)
    try:
        names: list[tuple[str, str]] = []
        rss: list[tuple[int, float]] = []
        for i in range(total):
            p = realistic_pod(i % 1000)
            p["metadata"]["name"] = f"churn-{i}"
            p["metadata"]["uid"] = f"uid-{i}"
            api.create(p)
            names.append((p["metadata"]["namespace"], p["metadata"]["name"]))
            if len(names) > live:
                api.delete(*names.pop(0))
            if i % 2000 == 1999:
                time.sleep(1.5)
                rss.append((i + 1, agent.rss_mib()))
                api.compact(keep_last=2000)  # as etcd compaction does; keeps the bench's own memory flat
        _settle(agent, receiver, live)
        rss.append((total, agent.rss_mib()))
        xs, ys = [x for x, _ in rss[1:]], [y for _, y in rss[1:]]
        slope = statistics.linear_regression(xs, ys).slope * 1000 if len(xs) > 1 else 0.0
        print("| pods so far | RSS MiB |")
        print("|---:|---:|")
        for x, y in rss:
            print(f"| {x:,} | {y:.1f} |")
        print(f"\nslope after warm-up: {slope:+.3f} MiB per 1,000 pods; last export carried exactly {pods_exported(receiver)} pods")
    finally:
        agent.stop()
        api.stop()
        receiver.stop()


def idle(seconds: float = 120.0, pods: int = 110) -> None:
    """The agent left alone as deployed (API over HTTPS, bookmarks every minute, the kubelet's probes), and the floor."""
    from tests.support.otlp_receiver import points_of

    print(f"\n### Idle CPU with {pods} pods at the default 15 s export interval ({seconds:.0f} s window, production "
          "install, API over HTTPS)\n")
    print(f"machine: {machine()}; {load()}\n")
    api, receiver = FakeApiServer(bookmark_interval=60, tls=True).start(), HttpReceiver().start()
    try:
        for i in range(pods):
            api.create(realistic_pod(i))
        agent = RunningAgent(api, receiver, interval=15.0)
        try:
            _settle(agent, receiver, pods, timeout=40)
            with receiver.cond:
                last = receiver.requests[-1][1]
            points = [(p.metric, {k: str(v) for k, v in p.attributes.items()}, p.value) for p in points_of(last)]
            floor = _Floor(api, points, interval=15.0)
            try:
                floor.wait_exports(1, timeout=40)
                start_cpu, floor_cpu, start = agent.cpu_seconds(), floor.cpu_seconds(), time.monotonic()
                requests_before = len(api.requests)
                probes = 0
                while time.monotonic() - start < seconds:  # the DaemonSet's probes: readiness every 10 s, liveness 20 s
                    agent.get("/readyz")
                    if probes % 2 == 0:
                        agent.get("/healthz")
                    probes += 1
                    time.sleep(max(0.0, start + probes * 10 - time.monotonic()))
                used, floor_used = agent.cpu_seconds() - start_cpu, floor.cpu_seconds() - floor_cpu
                elapsed = time.monotonic() - start
            finally:
                floor.stop()
            per_hour = (len(api.requests) - requests_before) / elapsed * 3600
            print("Floor: bench/floor.py, the same run and window: the mandated packages with one API connection, "
                  f"exporting the agent's {len(points)} points every 15 s through the SDK.\n")
            print("| agent CPU % of one core | floor CPU % | API requests per hour (steady) | agent RSS MiB |")
            print("|---:|---:|---:|---:|")
            print(f"| **{used / elapsed * 100:.3f}** | {floor_used / elapsed * 100:.3f} | {per_hour:.0f} | "
                  f"{agent.rss_mib():.1f} |")
        finally:
            agent.stop()
    finally:
        api.stop()
        receiver.stop()


def versus(pods_counts=(110, 500), events: int = 2000) -> None:
    """Side by side on one fake API server: RSS after sync and CPU for the same watch stream."""
    import subprocess
    import tempfile
    from pathlib import Path

    import psutil

    from common import ROOT, agent_command, deployed_env, production_venv

    print(f"\n### Side by side with the kubernetes client's Watch + V1Pod cache ({events:,} MODIFIED events; production install)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| pods | agent RSS MiB | client Watch RSS MiB | RSS ratio | agent CPU s | client Watch CPU s | CPU ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in pods_counts:
        api = FakeApiServer().start()
        try:
            for i in range(n):
                api.create(realistic_pod(i))
            kubeconfig = api.kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig")
            work = Path(kubeconfig).parent
            agent = subprocess.Popen(agent_command("run"), cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=deployed_env("bench-node", kubeconfig, OTEL_METRICS_EXPORTER="none",
                                                      DEBUG_ADDRESS="off", HOST_PROC="off", LOG_LEVEL="ERROR"))
            other = subprocess.Popen([str(production_venv() / "bin" / "python"), str(ROOT / "bench" / "alternative.py"),
                                      kubeconfig, "bench-node"], cwd=work,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            try:
                other.stdout.readline()
                deadline = time.monotonic() + 60
                while api.count(watch=True) < 2 and time.monotonic() < deadline:
                    time.sleep(0.1)
                time.sleep(3)
                procs = [psutil.Process(agent.pid), psutil.Process(other.pid)]
                rss = [p.memory_info().rss / 2**20 for p in procs]
                cpu0 = [sum(p.cpu_times()[:2]) for p in procs]
                objects = api.objects()
                for i in range(events):
                    obj = objects[i % n]
                    obj["status"]["conditions"][0]["lastProbeTime"] = f"2026-11-30T07:{i // 60 % 60:02d}:{i % 60:02d}Z"
                    api.update(obj)
                # Until both have drained the stream: CPU time stops moving.
                last = None
                while True:
                    time.sleep(1.0)
                    now = [sum(p.cpu_times()[:2]) for p in procs]
                    if last is not None and all(b - a < 0.02 for a, b in zip(last, now)):
                        break
                    last = now
                cpu = [b - a for a, b in zip(cpu0, now)]
                print(f"| {n} | {rss[0]:.1f} | {rss[1]:.1f} | {rss[1] / rss[0]:.2f}x | {cpu[0]:.2f} | {cpu[1]:.2f} | "
                      f"{cpu[1] / max(cpu[0], 1e-9):.1f}x |")
            finally:
                for p in (agent, other):
                    p.terminate()
                    p.wait(10)
        finally:
            api.stop()


def _floor_export(points: list[tuple[str, dict[str, str], float]], conn, resource: dict[str, str]) -> int:
    """The floor: the same points built directly as OTLP protobuf, serialised, gzipped and POSTed. Returns HTTP status."""
    import gzip

    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    for key, value in resource.items():
        kv = rm.resource.attributes.add()
        kv.key, kv.value.string_value = key, value
    scope = rm.scope_metrics.add()
    scope.scope.name = "floor"
    metrics = {}
    now = time.time_ns()
    for name, attributes, value in points:
        metric = metrics.get(name)
        if metric is None:
            metric = metrics[name] = scope.metrics.add()
            metric.name = name
        dp = metric.gauge.data_points.add()
        dp.time_unix_nano, dp.as_double = now, value
        for key, text in attributes.items():
            kv = dp.attributes.add()
            kv.key, kv.value.string_value = key, text
    body = gzip.compress(request.SerializeToString(), compresslevel=6)
    conn.request("POST", "/v1/metrics", body=body, headers={"Content-Type": "application/x-protobuf",
                                                             "Content-Encoding": "gzip"})
    response = conn.getresponse()
    response.read()
    return response.status


def export_cycle(pods_counts=(0, 110, 500, 2000), repeat: int = 15) -> None:
    """The agent's export cycle (SDK reader collect, encode, state points, OTLP/HTTP gzip) against the floor, same run."""
    import http.client
    import os
    import urllib.parse

    from agent.run.agent import Agent
    from agent.config import Config
    from agent.decode.reader import POD
    from agent.pipeline.events import PodsListed
    from tests.support.otlp_receiver import points_of

    print("\n### Export cycle: the agent against the direct-encoding floor (OTLP/HTTP gzip to a local receiver)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("The floor builds the very points the agent's export carried (its own instruments' too) as OTLP gauges "
          "straight from plain tuples, serialises, gzips and POSTs them on a kept-alive connection. CPU time of the "
          f"exporting thread (the receiver runs in another), median of {repeat} interleaved runs.\n")
    print("| pods | points | agent CPU ms | floor CPU ms | agent / floor | agent wall ms | floor wall ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    receiver = HttpReceiver().start()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    os.environ["OTEL_EXPORTER_OTLP_COMPRESSION"] = "gzip"
    url = urllib.parse.urlsplit(receiver.endpoint)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        for n in pods_counts:
            agent = Agent(Config(node_name="bench-node", replay="sample", exporter="otlp", export_interval=3600))
            agent.handler.handle(PodsListed(pods=tuple(POD.record(realistic_pod(i)) for i in range(n))))
            agent.telemetry.flush()
            with receiver.cond:
                sent = points_of(receiver.requests[-1][1])
            points = [(p.metric, {k: str(v) for k, v in p.attributes.items()}, p.value) for p in sent]
            resource = {k: str(v) for k, v in sent[0].resource.items()} if sent else {}
            cpu, wall = {"agent": [], "floor": []}, {"agent": [], "floor": []}
            runs = {"agent": agent.telemetry.flush, "floor": lambda: _floor_export(points, conn, resource)}
            for _ in range(repeat):  # interleaved, so machine noise hits both alike
                for name, fn in runs.items():
                    gc.collect()
                    c0, w0 = time.thread_time(), time.perf_counter()
                    fn()
                    cpu[name].append((time.thread_time() - c0) * 1000)
                    wall[name].append((time.perf_counter() - w0) * 1000)
            agent.telemetry.shutdown(final_export=False)
            a, f = statistics.median(cpu["agent"]), statistics.median(cpu["floor"])
            print(f"| {n:,} | {len(points):,} | {a:.1f} | {f:.1f} | {a / f:.2f}x | {statistics.median(wall['agent']):.1f} | "
                  f"{statistics.median(wall['floor']):.1f} |")
    finally:
        conn.close()
        receiver.stop()


def startup(pods: int = 110) -> None:
    """From process start to /readyz answering 200 (initial LIST handled, Node read)."""
    import subprocess
    import tempfile
    import urllib.request
    from pathlib import Path

    from common import agent_command, deployed_env
    from tests.support.cluster import free_ports

    api = FakeApiServer().start()
    try:
        for i in range(pods):
            api.create(realistic_pod(i))
        kubeconfig = api.kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig")
        results = []
        for _ in range(3):
            (port,) = free_ports(1)  # a fixed one may be held by anything
            start = time.monotonic()
            proc = subprocess.Popen(agent_command("run"), cwd=Path(kubeconfig).parent, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL,
                                    env=deployed_env("bench-node", kubeconfig, OTEL_METRICS_EXPORTER="none",
                                                     DEBUG_ADDRESS=f"127.0.0.1:{port}", LOG_LEVEL="ERROR"))
            try:
                while True:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                            if r.status == 200:
                                break
                    except OSError:
                        time.sleep(0.02)
                results.append(time.monotonic() - start)
            finally:
                proc.terminate()
                proc.wait(10)
        print(f"\n### Start-up to ready ({pods} pods, production install): {min(results):.2f} s best, "
              f"{max(results):.2f} s worst of 3\n\nmachine: {machine()}; {load()}\n")
    finally:
        api.stop()


def cluster_scale() -> None:
    """1,000 KWOK nodes x 30 pods in a real API server, 50 agents, one Collector (bench/cluster_scale.py)."""
    import cluster_scale as bench

    bench.main()


BENCHMARKS = {"throughput": throughput, "stream": stream, "list": list_decode, "memory": memory, "churn": churn, "idle": idle,
              "versus": versus, "export": export_cycle, "startup": startup}
#: Not part of "all": it builds and runs a control plane and takes about an hour (NRA_SCALE_QUICK=1: minutes).
SEPARATE = {"cluster-scale": cluster_scale}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", nargs="*", default=["all"], choices=[*BENCHMARKS, *SEPARATE, "all"])
    args = parser.parse_args()
    print(f"machine: {machine()}")
    for name, bench in BENCHMARKS.items():
        if name in args.which or "all" in args.which:
            bench()
    for name, bench in SEPARATE.items():
        if name in args.which:
            bench()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
