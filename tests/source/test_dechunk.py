"""The watch's own HTTP/1.1 de-chunker against the standard library's and a plain whole-buffer reading.

``dechunk`` reads whatever ``read1`` returns, so the socket may cut the body anywhere: inside a size line,
inside the CRLF after a chunk's data, between the last chunk and its trailers. Each such cut must give the
same bytes; a body that ends early or carries a bad size must fail as urllib3 fails (a ProtocolError).
"""

from __future__ import annotations

import http.client
import io

import pytest
import urllib3
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.source.kube import dechunk


class Broken(Exception):
    pass


def reference(body: bytes) -> bytes:
    """The whole body at once, the simplest way: what the data is, or Broken."""
    out, pos = [], 0
    while True:
        newline = body.find(b"\n", pos)
        if newline < 0:
            raise Broken
        try:
            size = int(body[pos:newline].split(b";", 1)[0], 16)
        except ValueError:
            raise Broken from None
        if size < 0:
            raise Broken
        pos = newline + 1
        if size == 0:
            return b"".join(out)
        if pos + size > len(body):
            raise Broken
        out.append(body[pos:pos + size])
        pos += size + 2


def stdlib(body: bytes) -> bytes:
    """http.client's reading of the same body (valid bodies only: it reads a negative size as 'the rest')."""

    class Socket:
        def makefile(self, mode):
            return io.BufferedReader(io.BytesIO(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body))

    response = http.client.HTTPResponse(Socket())  # type: ignore[arg-type]
    response.begin()
    return response.read()


def reader(body: bytes, cuts: list[int]):
    """A read1: at most ``size`` bytes, never past the next cut, then b"" at the end (as a closed socket)."""
    points = sorted({c for c in cuts if 0 < c < len(body)}) + [len(body)]
    state = {"pos": 0, "next": 0}

    def read(size: int) -> bytes:
        pos = state["pos"]
        while state["next"] < len(points) and points[state["next"]] <= pos:
            state["next"] += 1
        stop = points[state["next"]] if state["next"] < len(points) else len(body)
        data = body[pos:min(stop, pos + size)]
        state["pos"] = pos + len(data)
        return data

    return read


def dechunked(body: bytes, cuts: list[int], size: int) -> bytes:
    return b"".join(dechunk(reader(body, cuts), size))


hexdigits = st.sampled_from(["{:x}", "{:X}", "{:04x}", "{:08X}"])
extension = st.sampled_from([b"", b";a=b", b";name", b' ; q="x;y"', b";" + b"e" * 200])
trailers = st.sampled_from([b"", b"X-Trailer: 1\r\n", b"A: b\r\nC: d\r\n"])


@st.composite
def chunked(draw):
    payloads = draw(st.lists(st.binary(min_size=1, max_size=300), max_size=8))
    body = b""
    for p in payloads:
        body += draw(hexdigits).format(len(p)).encode() + draw(extension) + b"\r\n" + p + b"\r\n"
    body += b"0" + draw(extension) + b"\r\n" + draw(trailers) + b"\r\n"
    return b"".join(payloads), body


@settings(max_examples=400, deadline=None)
@given(chunked(), st.lists(st.integers(min_value=0, max_value=4000), max_size=30),
       st.sampled_from([1, 2, 3, 7, 64, 65536]))
def test_a_valid_body_cut_anywhere_and_read_in_any_size_gives_its_data(case, cuts, size):
    data, body = case
    assert stdlib(body) == data
    assert reference(body) == data
    assert dechunked(body, cuts, size) == data


@settings(max_examples=60, deadline=None)
@given(chunked())
def test_every_single_cut_and_every_early_end_of_a_valid_body(case):
    data, body = case
    for cut in range(len(body) + 1):
        assert dechunked(body, [cut], 65536) == data
    for end in range(len(body)):
        cut_short = body[:end]
        try:
            expected = reference(cut_short)
        except Broken:
            with pytest.raises(urllib3.exceptions.ProtocolError):
                dechunked(cut_short, [end // 2], 65536)
        else:
            assert dechunked(cut_short, [end // 2], 65536) == expected == data


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from([b"0", b"1", b"a", b"F", b"-", b"+", b"_", b" ", b"\t", b";", b"x", b"\r", b"\n",
                                 b"\r\n", b"zz", b"ffffffffffffffffffff", b"-1", b"3\r\nabc\r\n"]), max_size=40),
       st.lists(st.integers(min_value=0, max_value=200), max_size=10), st.sampled_from([1, 5, 65536]))
def test_any_bytes_are_read_as_the_plain_reading_reads_them_or_fail_as_urllib3_fails(parts, cuts, size):
    body = b"".join(parts)
    try:
        expected = reference(body)
    except Broken:
        with pytest.raises(urllib3.exceptions.ProtocolError):
            dechunked(body, cuts, size)
    else:
        assert dechunked(body, cuts, size) == expected


def test_a_size_line_that_never_ends_is_refused_not_buffered_without_bound():
    endless = iter([b"1" * 600] * 10_000)
    with pytest.raises(urllib3.exceptions.ProtocolError, match="size line"):
        for _ in dechunk(lambda size: next(endless, b"")):
            pass


def test_a_huge_size_is_a_body_that_ends_early_not_a_crash():
    body = b"f" * 900 + b"\r\nabc"
    with pytest.raises(urllib3.exceptions.ProtocolError):
        dechunked(body, [3, 950], 65536)


def _watch_server(write):
    """A loopback server whose every GET answers 200 application/json and then calls ``write(handler)``."""
    from tests.support.plain_http import QuietHandler, serve

    class Handler(QuietHandler):
        def do_GET(self):
            write(self)

    return serve(Handler)


def _api(tmp_path, server):
    from agent.source.kube import KubeApi, load_configuration
    from tests.support.plain_http import plain_http_kubeconfig

    return KubeApi(load_configuration(plain_http_kubeconfig(tmp_path / "kubeconfig", server.server_address[1])))


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
    """The de-chunker for what the API server sends; urllib3's own reading for the rest (compressed, sized)."""
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

    server = _watch_server(write)
    api = _api(tmp_path, server)
    try:
        assert list(api.stream_lines("/api/v1/pods", {"watch": "1"}, read_timeout=5.0)) == LINES
    finally:
        api.close()
        server.shutdown()


def test_a_silent_chunked_watch_is_urllib3s_read_timeout_and_interrupt_ends_a_blocked_read_at_once(tmp_path):
    """The reflector resumes on urllib3's ReadTimeoutError: the de-chunker's socket timeout must be that one.
    Shutdown's interrupt() must end a read that waits on the socket, long before its read timeout."""
    import threading
    import time

    release = threading.Event()

    def write(handler):
        _chunked_head(handler)
        handler.wfile.write(_chunk(LINES[0] + b"\n"))
        handler.wfile.flush()
        release.wait(30)

    server = _watch_server(write)
    api = _api(tmp_path, server)
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
        api.close()
        server.shutdown()
