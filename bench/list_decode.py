"""Decoding one LIST answer: the whole body as text and the json module per item, against the streamed typed
decode the reflector uses (``bench/run.py list``)."""

from __future__ import annotations

import json

from bench.common import load, machine
from bench.measure import best_cpu
from testkit.factory import realistic_pod


def main(pods: int = 2000, repeat: int = 5) -> None:
    """Decoding one LIST answer: main's way (whole body as text, json module per item) against the streamed typed
    one."""
    from agent.decode.reader import POD
    from agent.source.listing import iter_list, read_list

    body = _list_body(pods)
    chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)]

    def text_then_json():  # main before this change: bytes -> str, then json per item
        fields, items = iter_list(body.decode("utf-8"))
        return [POD.tolerant(item) for item in items]

    def streamed_typed():  # as the reflector reads a LIST
        fields, items = read_list(iter(chunks), POD.list_item)
        return [POD.record(item) for item in items]

    assert text_then_json() == streamed_typed()
    t_old, t_new = best_cpu([text_then_json, streamed_typed], repeat)
    print(f"\n### LIST decode ({pods:,} pods, body {len(body) / 2**20:.1f} MiB; "
          f"CPU time, best of {repeat} interleaved)\n")
    print(f"machine: {machine()}; {load()}\n")
    print("| path | ms | per pod us | vs text + json |")
    print("|---|---:|---:|---:|")
    print(f"| body as text, json module per item, tolerant decode (before) | {t_old * 1000:.0f} | "
          f"{t_old / pods * 1e6:.0f} | 1.00x |")
    print(f"| streamed 64 KiB chunks, each item parsed once by msgspec into the typed records (now) | "
          f"{t_new * 1000:.0f} | {t_new / pods * 1e6:.0f} | {t_old / t_new:.1f}x less CPU |")


def _list_body(pods: int) -> bytes:
    """A LIST answer as the API server writes it: compact, items without their kind and apiVersion."""
    items = [{k: v for k, v in realistic_pod(i).items() if k not in ("kind", "apiVersion")} for i in range(pods)]
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, "items": items},
                      separators=(",", ":")).encode()
