"""Reading a watch body over TLS through urllib3's public readers, CPU time of the reading thread.

A server process writes ``N`` watch events of realistic pods (compact JSON, one HTTP chunk and so one TLS record
each, as the API server writes a watch) and the terminating chunk; this process reads the body through a urllib3
``PoolManager`` (what the kubernetes package's client is) and cuts it into lines with ``kube.split_lines``, once per
reader, the readers interleaved; the figure is the median of the reading thread's CPU time per event.

Run from the repository root: .venv/bin/python -m bench.watch_read [EVENTS] [REPEAT]
"""

from __future__ import annotations

import json
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, load, machine, required
from testkit.factory import realistic_pod


def _serve(cert: str, key: str, events: int) -> None:
    """The server process: every connection gets one chunked answer of ``events`` events, then the last chunk."""
    pods = [realistic_pod(i) for i in range(500)]
    chunks = []
    for i in range(events):
        p = pods[i % len(pods)]
        p["metadata"]["resourceVersion"] = str(1000 + i)
        line = json.dumps({"type": "MODIFIED", "object": p}, separators=(",", ":")).encode() + b"\n"
        chunks.append(f"{len(line):x}\r\n".encode() + line + b"\r\n")
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        print(listener.getsockname()[1], sum(map(len, chunks)) / events, flush=True)
        while True:
            conn, _ = listener.accept()
            with context.wrap_socket(conn, server_side=True) as tls:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += tls.recv(4096)
                tls.sendall(head)
                for chunk in chunks:
                    tls.sendall(chunk)
                tls.sendall(b"0\r\n\r\n")


def _readers():
    """Each way of getting the body's bytes from a urllib3 response, by name; the agent's first.

    Until 9a11f30 the agent de-chunked the body itself off urllib3's private socket reader; run this script at that
    commit for its figure beside these."""

    def read1(response):
        while data := response.read1(65536):
            yield data

    def read(response):
        while data := response.read(65536):
            yield data

    return {
        "the agent's: urllib3 `stream(64 KiB)` = `read_chunked`": lambda r: r.stream(65536, decode_content=True),
        "urllib3 `read1(64 KiB)`": read1,
        "urllib3 `read(64 KiB)` (waits for 64 KiB, so unfit for a watch)": read,
    }


def main() -> None:
    import urllib3

    from agent.source.kube import split_lines
    from testkit.cluster import make_pki

    events = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    pki = make_pki(Path(tempfile.mkdtemp(prefix="watch-read-pki-")))
    server = subprocess.Popen([sys.executable, "-m", "bench.watch_read", "serve", str(pki.crt("loopback-serving")),
                               str(pki.key("loopback-serving")), str(events)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        port, size = required(server.stdout, "the server's stdout pipe").readline().split()
        pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(pki.crt("ca")), retries=False)
        readers = _readers()
        cpu: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(repeat):
            for name, reader in readers.items():
                response = pool.request("GET", f"https://127.0.0.1:{port}/api/v1/pods?watch=true",
                                        preload_content=False)
                start = time.thread_time()
                lines = sum(1 for _ in split_lines(reader(response)))
                cpu[name].append(time.thread_time() - start)
                response.release_conn()
                if lines != events:
                    raise SystemExit(f"{name}: {lines} lines of {events}")
        print(f"\n### Reading a watch body over TLS ({events:,} events of {float(size) / 1024:.1f} KiB, "
              "one chunk each; "
              f"reading thread's CPU time, median of {repeat} interleaved)\n")
        print(f"machine: {machine()}; {load()}\n")
        print("| reader | µs/event | vs the agent's |")
        print("|---|---:|---:|")
        base = statistics.median(next(iter(cpu.values())))
        for name, times in cpu.items():
            t = statistics.median(times)
            print(f"| {name} | {t / events * 1e6:.1f} | {t / base:.2f}x |")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
