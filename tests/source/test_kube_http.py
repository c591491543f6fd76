"""The API server's HTTP answers over a real loopback connection: watch bodies, read through urllib3's public
``stream``, and the Retry-After of a refusal.

Every body form the API server (or a proxy) may send reads back the same lines; a silent watch is urllib3's
ReadTimeoutError and a body that stops before its last chunk, or carries a size that is not hex, a transport error
(the reflector resumes on both); shutdown's interrupt ends a blocked read at once.
"""

from __future__ import annotations

import contextlib

import pytest
import urllib3


@contextlib.contextmanager
def _serving(tmp_path, write, **kwargs):
    """A KubeApi (``kwargs`` its own) on a loopback server whose every GET calls ``write(handler)``; both closed
    after."""
    from agent.config import ClusterAccess
    from agent.source.kube import KubeApi, load_configuration
    from testkit.plain_http import QuietHandler, plain_http_kubeconfig, serve

    class Handler(QuietHandler):
        def do_GET(self):
            write(self)

    server = serve(Handler)
    kubeconfig = plain_http_kubeconfig(tmp_path / "kubeconfig", server.server_address[1])
    api = KubeApi(load_configuration(ClusterAccess(kubeconfig=kubeconfig)),
                  **kwargs)
    try:
        yield api
    finally:
        api.close()
        server.shutdown()


def _lines(api) -> list[bytes]:
    return list(api.stream_lines("/api/v1/pods", {"watch": "1"}, read_timeout=5.0))


LINES = [b'{"type":"ADDED","n":%d}' % i for i in range(50)]


def _chunked_head(handler, extra: dict[str, str] = {}) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    for k, v in extra.items():
        handler.send_header(k, v)
    handler.end_headers()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.mark.parametrize("form", ["chunked", "gzip", "length"])
def test_every_watch_body_form_reads_back_the_same_lines(tmp_path, form):
    """Chunked as the API server sends it, compressed, or sized: one reading, the same lines."""
    import gzip

    body = b"\n".join(LINES) + b"\n"

    def write(handler):
        if form == "length":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        data = gzip.compress(body) if form == "gzip" else body
        _chunked_head(handler, {"Content-Encoding": "gzip"} if form == "gzip" else {})
        for i in range(0, len(data), 37):
            handler.wfile.write(_chunk(data[i:i + 37]))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")

    with _serving(tmp_path, write) as api:
        assert _lines(api) == LINES


def _written_in_pieces(body: bytes, seed: int):
    """A ``write`` that sends ``body`` after the head in random pieces, so reads end inside size lines and CRLFs."""
    import random
    import time

    def write(handler):
        _chunked_head(handler)
        handler.wfile.flush()
        rng, pos = random.Random(seed), 0
        while pos < len(body):
            step = rng.choice([1, 2, 3, 7, 64, 5000])
            handler.wfile.write(body[pos:pos + step])
            handler.wfile.flush()
            pos += step
            if rng.random() < 0.05:
                time.sleep(0.001)  # let the reader catch up, so a read ends where this piece did
        handler.close_connection = True

    return write


def test_a_chunked_body_cut_anywhere_reads_back_whole_and_a_broken_one_is_a_transport_error(tmp_path):
    """Sizes in any case and width, extensions and trailers read back whole; a body that stops before its last
    chunk, or a size that is not hex, is urllib3's ProtocolError, which the reflector takes as a transport error."""
    from agent.source.reflector import decide

    sizes = ["%x", "%X", "%04x", "%08X"]
    body = b"".join((sizes[i % 4] % (len(line) + 1)).encode() + (b";ext=1" if i % 3 == 0 else b"") + b"\r\n"
                    + line + b"\n\r\n" for i, line in enumerate(LINES)) + b"0\r\nX-Trailer: 1\r\n\r\n"
    for seed in range(3):
        with _serving(tmp_path, _written_in_pieces(body, seed)) as api:
            assert _lines(api) == LINES
    for broken in (body[:len(body) // 2], b"zz\r\nabc\r\n0\r\n\r\n", b"5;ext=1\r\nab"):
        with _serving(tmp_path, _written_in_pieces(broken, 0)) as api, \
                pytest.raises(urllib3.exceptions.ProtocolError) as failed:
            _lines(api)
        assert decide(failed.value).reason == "transport"


def test_a_silent_chunked_watch_is_urllib3s_read_timeout_and_interrupt_ends_a_blocked_read_at_once(tmp_path):
    """The reflector resumes on urllib3's ReadTimeoutError: a silent watch must raise that one, after the lines sent.
    Shutdown's interrupt() must end a read that waits on the socket, long before its read timeout."""
    import threading
    import time

    release = threading.Event()

    def write(handler):
        _chunked_head(handler)
        handler.wfile.write(_chunk(LINES[0] + b"\n"))
        handler.wfile.flush()
        release.wait(30)

    with _serving(tmp_path, write) as api:
        try:
            lines = api.stream_lines("/api/v1/pods", {"watch": "1"}, read_timeout=0.5)
            assert next(lines) == LINES[0]
            with pytest.raises(urllib3.exceptions.ReadTimeoutError):
                next(lines)

            lines = api.stream_lines("/api/v1/pods", {"watch": "1"}, read_timeout=30.0)
            assert next(lines) == LINES[0]
            threading.Timer(0.3, api.interrupt).start()
            started = time.monotonic()
            with pytest.raises(urllib3.exceptions.ProtocolError):
                next(lines)
            assert time.monotonic() - started < 5.0
        finally:
            release.set()


@pytest.mark.parametrize("header, seconds", [("7", 7.0), ("Wed, 02 Dec 2026 09:38:00 GMT", 120.0), ("later", None)])
def test_a_refusal_carries_its_retry_after_in_either_form(tmp_path, header, seconds):
    """429 with delay-seconds or an HTTP-date (measured from the injected wall time): the reflector waits that long."""
    import datetime as dt

    from agent.source.kube import ApiError

    def write(handler):
        body = b'{"kind":"Status","code":429,"reason":"TooManyRequests","message":"slow down"}'
        handler.send_response(429)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Retry-After", header)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    now = dt.datetime(2026, 12, 2, 9, 36, tzinfo=dt.timezone.utc).timestamp()
    with _serving(tmp_path, write, wall=lambda: now) as api, pytest.raises(ApiError) as refused:
        list(api.get_chunks("/api/v1/pods", {}))
    assert (refused.value.status, refused.value.retry_after) == (429, seconds)
