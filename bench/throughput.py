"""Event throughput in process: the agent's whole watch-event path against plain ``json.loads`` of the same lines
(``bench/run.py throughput``)."""

from __future__ import annotations

import json
import statistics
import threading

from bench.common import load, machine
from bench.measure import best_cpu
from testkit.factory import realistic_pod


def main(n: int = 5000) -> None:
    """The whole watch-event path against plain json.loads of the same lines, on two streams."""
    streams = {"status churn": _events(n), "requests change every event": _events(n, resize_every_event=True)}
    size = statistics.mean(len(x) for x in streams["status churn"])
    print(f"\n### Event throughput ({n:,} watch events, mean {size / 1024:.1f} KiB each; "
          "CPU time, best of 7 interleaved)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| stream | path | us/event | events/s | vs json.loads |")
    print("|---|---|---:|---:|---:|")
    for name, lines in streams.items():
        rows = _measure(lines, with_kube_client=name == "status churn")
        t_json = rows[0][1]
        for path, t in rows:
            print(f"| {name} | {path} | {t / n * 1e6:.1f} | {n / t:,.0f} | {t_json / t:.2f}x |")


def _measure(lines: list[bytes], with_kube_client: bool) -> list[tuple[str, float]]:
    """(path, best CPU seconds) for one stream: the json.loads baseline first."""
    from agent.decode.reader import POD

    chunks = _chunks(lines)
    assert _whole_path(chunks) == 500
    t_json, t_agent, t_tolerant = best_cpu([
        lambda: _parse_only(lines),
        lambda: _whole_path(chunks),
        lambda: [POD.tolerant(json.loads(line)["object"]) for line in lines],
    ])
    rows = [("`json.loads` only (baseline)", t_json),
            ("agent, whole path: split lines + reflector + queue + stats + handler", t_agent),
            ("(for scale) `json.loads` + the tolerant decoder alone, no pipeline", t_tolerant)]
    if with_kube_client:
        t_kube, = best_cpu([_kube_client(lines)], 2)
        rows.append(("kubernetes client: Watch.stream's decoding into `V1Pod`, kept in a cache", t_kube))
    return rows


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


def _chunks(lines: list[bytes], size: int = 65536) -> list[bytes]:
    """Watch lines as the socket delivers them: newline-delimited, cut at arbitrary points."""
    data = b"\n".join(lines) + b"\n"
    return [data[i:i + size] for i in range(0, len(data), size)]


def _parse_only(lines: list[bytes]) -> None:
    for line in lines:
        json.loads(line)


def _kube_client(lines: list[bytes]):
    """What Watch.stream does per event (json.loads, json.dumps, deserialize into V1Pod), keeping its cache."""
    from kubernetes.client import ApiClient

    client = ApiClient()

    def decode() -> int:
        cache = {}
        for line in lines:
            raw = json.loads(line)
            obj = client.deserialize(json.dumps(raw["object"]), "V1Pod", "application/json")
            cache[obj.metadata.uid] = obj
        return len(cache)

    return decode


class _OneWatch:
    """The API as the reflector sees it: an empty LIST, then one watch stream of ``chunks``; then ``stop``."""

    def __init__(self, chunks: list[bytes], stop: threading.Event) -> None:
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


def _whole_path(chunks: list[bytes]) -> int:
    """What the agent does with a watch stream: split, reflector, queue, stats, handler. Returns the pods held."""
    from agent.config import Config
    from agent.pipeline.handler import Handler
    from agent.pipeline.queue import EventQueue
    from agent.pipeline.state import NodeState
    from agent.source.reflector import PodsOfNode, Reflector, ReflectorSettings
    from agent.telemetry.stats import RuntimeStats

    defaults = Config(node_name="bench-node", exporter="none")  # the configuration's watch timeouts
    settings = ReflectorSettings(read_timeout=defaults.read_timeout, min_watch_timeout=defaults.watch_timeout[0],
                                 max_watch_timeout=defaults.watch_timeout[1])
    stats = RuntimeStats()
    state = NodeState("bench-node")
    queue = EventQueue(metrics=stats)
    stop = threading.Event()
    Reflector(api=_OneWatch(chunks, stop), watched=PodsOfNode(node_name="bench-node"), emit=queue.put,
              metrics=stats, settings=settings).run(stop)
    Handler(state=state, metrics=stats).run(queue, stop, poll=0.0)
    return len(state.pods())
