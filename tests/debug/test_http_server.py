"""The selectors HTTP server, driven directly over real sockets: answers, half-closes, deadlines, limits, leaks."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time

import psutil
import pytest

from agent.debug.http_server import BadRequest, HttpServer, RequestHead, Response, listen_socket
from testkit.waiting import wait_until

BIG = b"x" * (20 << 20)  # far more than the socket buffers hold: a client that does not read blocks the answer
MID = b"m" * (2 << 20)


def held(port: int) -> int:
    """This process's open sockets of connections to or from ``port``, both ends: what the server holds and
    what the test holds, and nothing another test's threads open or close meanwhile."""
    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.status != psutil.CONN_LISTEN and port in ((c.laddr.port if c.laddr else None),
                                                              (c.raddr.port if c.raddr else None)))


def server_cpu(prefix: str = "test-http") -> float:
    """CPU seconds the server's threads (loop and pool, named ``prefix``...) have used: no other test's threads."""
    ours = {t.native_id for t in threading.enumerate() if t.name.startswith(prefix)}
    return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id in ours)


def cpu_during(seconds: float) -> float:
    before = server_cpu()
    time.sleep(seconds)
    return server_cpu() - before


class Views:
    """The route: echoes the path and the thread that rendered it; a few paths misbehave on purpose."""

    def __init__(self) -> None:
        self.gate = threading.Event()  # /gated waits on it
        self.gated_started = threading.Event()
        self.calls: list[str] = []  # every path asked, in the order rendering began

    def __call__(self, path: str) -> Response:
        self.calls.append(path)
        if path in ("/raise", "/raise-inline"):
            raise RuntimeError("a bug in a view")
        if path == "/str-body":
            self.gate.wait(5)
            return Response(200, "text/plain", "a str, not bytes")  # type: ignore[arg-type]
        if path == "/big":
            return Response(200, "application/octet-stream", BIG)
        if path in ("/mid", "/mid-inline"):
            return Response(200, "application/octet-stream", MID)
        if path == "/gated":
            self.gated_started.set()
            self.gate.wait(5)
        if path == "/after-gate":
            self.gate.wait(5)
            time.sleep(0.05)  # lands in the queue just behind /str-body
        if path == "/hold-loop":  # inline: keeps the loop busy while views finish, so they queue up together
            self.gate.set()
            time.sleep(0.3)
        return Response(200, "text/plain", f"{path} by {threading.current_thread().name}".encode(),
                        (("X-Path", path),))


@pytest.fixture
def serve():
    servers: list[HttpServer] = []

    def make(views=None, **kw) -> HttpServer:
        settings = dict(inline_paths=frozenset({"/healthz", "/raise-inline", "/hold-loop", "/mid-inline"}), head_deadline=1.0,
                        write_deadline=1.0, max_clients=64, name="test-http")
        settings.update(kw)
        server = HttpServer(listen_socket("127.0.0.1", 0), views or Views(), **settings).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def connect(port: int, timeout: float = 3.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_all(s: socket.socket) -> bytes:
    chunks = []
    while True:
        data = s.recv(1 << 20)
        if not data:
            return b"".join(chunks)
        chunks.append(data)


def exchange(port: int, request: bytes, half_close: bool = False) -> bytes:
    with connect(port) as s:
        s.sendall(request)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        return read_all(s)


def parse(answer: bytes, head: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of exactly one answer (its length checked against Content-Length)."""
    head_part, sep, body = answer.partition(b"\r\n\r\n")
    assert sep, answer[:200]
    status_line, *lines = head_part.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    if not head:
        assert len(body) == int(headers["Content-Length"]), (len(body), headers)
    return int(status_line.split(" ")[1]), headers, body


def get(port: int, path: str, method: str = "GET", **kw) -> tuple[int, dict[str, str], bytes]:
    return parse(exchange(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), **kw), head=method == "HEAD")


def test_probes_are_answered_on_the_loop_and_views_on_the_pool_for_get_and_head(serve):
    port = serve().port
    status, headers, body = get(port, "/healthz?verbose=1")
    assert status == 200 and body == b"/healthz by test-http" and headers["Connection"] == "close"
    status, headers, body = get(port, "/view")
    assert status == 200 and body.startswith(b"/view by test-http-view") and headers["X-Path"] == "/view"
    for path in ("/healthz", "/view"):
        get_headers = get(port, path)[1]
        status, headers, body = get(port, path, method="HEAD")
        assert status == 200 and body == b"" and headers["Content-Length"] == get_headers["Content-Length"]
    status, headers, _ = get(port, "/view", method="POST")
    assert status == 405 and headers["Allow"] == "GET, HEAD"


@pytest.mark.parametrize("path", ["/raise", "/raise-inline"])
def test_a_view_that_raises_is_a_500(serve, path):
    server = serve()
    status, _, body = get(server.port, path)
    assert status == 500 and b"internal error" in body
    status, headers, body = get(server.port, path, method="HEAD")
    assert status == 500 and body == b"" and int(headers["Content-Length"]) > 0
    assert get(server.port, "/healthz")[0] == 200  # the loop lives on


def test_a_view_answer_that_cannot_be_encoded_is_a_500_and_strands_no_answer_queued_behind_it(serve):
    """Was: the encoding failed on the loop, the client got a bare close and /after-gate, queued behind it, hung."""
    views = Views()
    port = serve(views).port
    answers: dict[str, bytes] = {}

    def fetch(path):
        try:
            answers[path] = exchange(port, f"GET {path} HTTP/1.1\r\n\r\n".encode())
        except OSError as exc:
            answers[path] = repr(exc).encode()

    threads = [threading.Thread(target=fetch, args=(p,)) for p in ("/str-body", "/after-gate")]
    for t in threads:
        t.start()
        time.sleep(0.05)  # both on the pool, waiting for the gate
    fetch("/hold-loop")  # opens the gate and holds the loop until both answers are queued
    for t in threads:
        t.join(5)
    assert parse(answers["/hold-loop"])[0] == 200
    assert parse(answers["/str-body"])[0] == 500, answers["/str-body"]
    assert parse(answers["/after-gate"])[2].startswith(b"/after-gate by"), answers["/after-gate"]


@pytest.mark.parametrize("path", ["/healthz", "/gated"])
@pytest.mark.parametrize("extra", [b"", b"GET /second HTTP/1.1\r\n\r\n" + b"z" * 200_000])
def test_a_client_that_half_closes_after_its_request_still_gets_one_whole_answer(serve, path, extra):
    views = Views()
    port = serve(views).port
    with connect(port) as s:
        sender = threading.Thread(target=lambda: (s.sendall(f"GET {path} HTTP/1.1\r\n\r\n".encode() + extra),
                                                  s.shutdown(socket.SHUT_WR)))
        sender.start()
        if path == "/gated":
            assert views.gated_started.wait(3)
            sender.join(3)
            # The server holds a socket at EOF while the view renders: it must sleep, not poll it.
            assert cpu_during(0.3) < 0.1
            views.gate.set()
        answer = read_all(s)
        sender.join(3)
        # Answered, and the client's side is at EOF: the server closes at once (not polling it until the linger ends).
        assert cpu_during(0.3) < 0.1
        # The server has closed its end: with our FIN sent and its FIN received, neither side holds a live socket
        # (ours is in TIME_WAIT, which no descriptor of ours shows).
        assert held(port) == 0
    status, _, body = parse(answer)
    assert status == 200 and body.startswith(path.encode() + b" by ")
    assert answer.count(b"HTTP/1.1 ") == 1  # the pipelined second request is discarded, not answered


@pytest.mark.parametrize("path", ["/mid-inline", "/mid"])
def test_a_client_that_sent_more_than_its_head_and_reads_slowly_gets_the_whole_answer_not_a_reset(serve, path):
    """The lingering close. Closing a socket with unread input sends a RST, and the RST drops whatever of the
    answer is still queued: a slow reader that sent bytes past its head would lose the end of its answer."""
    port = serve().port
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # most of the answer waits on the server's side
        s.settimeout(3)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\n\r\n".encode() + b"j" * 100_000)
        chunks = []
        while data := s.recv(32768):
            chunks.append(data)
            time.sleep(0.001)
    status, _, body = parse(b"".join(chunks))
    assert status == 200 and body == MID


def test_a_client_that_never_reads_a_large_answer_is_cut_by_the_write_deadline(serve):
    server = serve(write_deadline=0.3)
    with connect(server.port, timeout=5) as s:
        s.sendall(b"GET /big HTTP/1.1\r\n\r\n")
        time.sleep(0.1)
        assert held(server.port) == 2  # ours and the server's, stuck on a full send buffer
        assert cpu_during(0.3) < 0.1  # waiting to write is not polling
        wait_until(lambda: held(server.port) == 1, timeout=2)  # the server gave up on it
        received = 0
        try:
            while data := s.recv(1 << 20):
                received += len(data)
        except ConnectionResetError:
            pass
        assert received < len(BIG)
    assert get(server.port, "/healthz")[0] == 200


def test_a_connection_closed_while_its_view_renders_leaks_nothing_and_its_descriptor_serves_the_next_one(serve):
    views = Views()
    server = serve(views)
    gone = connect(server.port)
    gone.sendall(b"GET /gated HTTP/1.1\r\n\r\n")
    assert views.gated_started.wait(3)
    gone.close()  # the client gives up while its view renders
    for i in range(5):  # meanwhile the probes are answered on the loop
        assert get(server.port, f"/healthz?{i}")[0] == 200
    views.gate.set()
    wait_until(lambda: held(server.port) == 0, timeout=3)  # its late answer failed or lingered, then closed
    # The descriptor is free again: whoever gets it next gets its own answer, never the late one.
    for i in range(20):
        status, headers, body = get(server.port, f"/view-{i}")
        assert status == 200 and headers["X-Path"] == f"/view-{i}" and body.startswith(f"/view-{i} by".encode())
    wait_until(lambda: held(server.port) == 0, timeout=3)


def test_stop_with_views_in_flight_returns_at_once_and_closes_everything(serve):
    views = Views()
    server = HttpServer(listen_socket("127.0.0.1", 0), views, workers=1, name="stopping-http").start()
    clients = [connect(server.port) for _ in range(3)]
    for s in clients:  # one renders, two wait for the single worker
        s.sendall(b"GET /gated HTTP/1.1\r\n\r\n")
    assert views.gated_started.wait(3)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 1.0
    for s in clients:  # closed (a reset: their requests were never read), not left hanging
        try:
            assert read_all(s) == b""
        except ConnectionResetError:
            pass
        s.close()
    views.gate.set()  # the render finishes after the server is gone: nothing to deliver, nothing raised
    wait_until(lambda: not any(t.name.startswith("stopping-http") for t in threading.enumerate()), timeout=3)
    assert held(server.port) == 0
    with pytest.raises(ConnectionRefusedError):  # the listening socket is closed too
        connect(server.port)


def test_max_clients_is_exact_a_full_pool_closes_its_oldest_idle_connection_and_503_says_when_to_retry(serve):
    """Issue 29: was, the fifth connection got a 503 before its path was read, so idle clients starved the probes.
    Now a connection beyond the slots closes the one idle the longest (no whole request head yet); only when every
    slot holds a whole request is a view refused (503, Retry-After), and a probe is answered even then."""
    views = Views()
    server = serve(views, max_clients=4, head_deadline=5.0, workers=4)
    port = server.port
    idle = [connect(port) for _ in range(3)]
    wait_until(lambda: held(port) == 6)  # each accepted
    assert get(port, "/healthz")[0] == 200  # 3 idle + this one = 4: within the limit
    idle.append(connect(port))
    wait_until(lambda: held(port) == 8)
    assert get(port, "/view")[0] == 200  # the fifth: served, and the oldest idle one closed for it
    oldest = idle.pop(0)
    assert oldest.recv(1) == b""  # closed without an answer
    oldest.close()
    assert all(s.fileno() >= 0 for s in idle)
    wait_until(lambda: held(port) == 6)  # the three younger ones are still held
    for s in idle:
        s.close()
    wait_until(lambda: held(port) == 0)
    # Every slot holds a whole request (views rendering): nothing idle to close.
    busy = [connect(port) for _ in range(4)]
    for s in busy:
        s.sendall(b"GET /gated HTTP/1.1\r\n\r\n")
    wait_until(lambda: views.calls.count("/gated") == 4)
    status, headers, _ = get(port, "/view")
    assert status == 503 and headers["Retry-After"] == "1"
    assert get(port, "/healthz")[0] == 200  # probes ahead of views
    # Idle connections beyond the slots do not push each other (or a probe) out below the hard limit, twice the slots.
    beyond = [connect(port) for _ in range(3)]
    wait_until(lambda: held(port) == 2 * (4 + 3))
    assert get(port, "/healthz")[0] == 200
    assert all(held_open(s) for s in beyond)
    for s in beyond:
        s.close()
    views.gate.set()
    for s in busy:
        assert parse(read_all(s))[0] == 200
        s.close()
    wait_until(lambda: held(port) == 0)
    # Clients that read their answer but keep the socket open linger without holding a slot.
    idle = [connect(port) for _ in range(3)]
    wait_until(lambda: held(port) == 6)
    lingering = []
    for _ in range(4):
        s = connect(port)
        s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        assert parse(read_all(s))[0] == 200
        lingering.append(s)
    assert held(port) == 6 + 8  # still lingering on the server's side
    assert get(port, "/healthz")[0] == 200
    assert all(held_open(s) for s in idle)  # no idle one was closed: the lingering ones held no slot
    for s in idle + lingering:
        s.close()
    wait_until(lambda: held(port) == 0)


def held_open(s: socket.socket) -> bool:
    """Whether the server still holds our connection ``s`` open (nothing to read, no EOF)."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    finally:
        s.setblocking(True)


def test_one_peer_holds_at_most_max_per_peer_connections_its_oldest_idle_one_closed_first(serve):
    server = serve(max_clients=64, max_per_peer=3, head_deadline=5.0)
    port = server.port
    mine = [connect(port) for _ in range(3)]
    wait_until(lambda: held(port) == 6)
    mine.append(connect(port))  # a fourth from the same address: its oldest idle one goes
    assert mine.pop(0).recv(1) == b""
    assert all(held_open(s) for s in mine)
    # Another peer (another loopback address) is not touched, and its probes are answered.
    with socket.create_connection(("127.0.0.1", port), timeout=3, source_address=("127.0.0.2", 0)) as other:
        other.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        assert parse(read_all(other))[0] == 200
    assert all(held_open(s) for s in mine)
    for s in mine:
        s.close()


def test_a_thousand_idle_connections_neither_slow_the_probes_nor_burn_cpu(serve):
    count = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2 * count + 256:
        if hard != resource.RLIM_INFINITY and hard < 2 * count + 256:
            pytest.skip(f"needs {2 * count + 256} descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2 * count + 256, hard))
    server = serve(max_clients=2 * count, max_per_peer=2 * count, head_deadline=10.0)
    idle = [connect(server.port) for _ in range(count)]
    try:
        wait_until(lambda: held(server.port) == 2 * count)
        assert cpu_during(0.5) < 0.1
        worst = 0.0
        for i in range(20):
            started = time.monotonic()
            assert get(server.port, "/healthz" if i % 2 else "/view")[0] == 200
            worst = max(worst, time.monotonic() - started)
        assert worst < 0.25, worst
    finally:
        for s in idle:
            s.close()
        if soft < 2 * count + 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    wait_until(lambda: held(server.port) == 0)


def test_running_out_of_descriptors_pauses_accepting_instead_of_spinning_and_recovers(serve):
    """Was: accept() failed with EMFILE, the listener stayed readable, and the loop spun a whole core."""
    server = serve()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fillers: list[socket.socket] = []
    client = None
    before = server_cpu()  # read with a descriptor to spare: /proc cannot be opened while none is left
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(int(fd) for fd in os.listdir("/proc/self/fd")) + 16, hard))
    try:
        try:
            while True:
                fillers.append(socket.socket())
        except OSError:
            pass  # every descriptor below the limit is taken
        fillers.pop().close()  # one for the client, none left for the server to accept it with
        client = socket.socket()
        client.settimeout(3)
        client.connect(("127.0.0.1", server.port))
        client.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        time.sleep(0.5)
    finally:
        for s in fillers:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    spent = server_cpu() - before
    try:
        assert spent < 0.15, f"{spent:.2f} s of CPU in 0.5 s"
        status, _, body = parse(read_all(client))  # the pending connection is served once descriptors free
        assert status == 200 and body.startswith(b"/healthz")
    finally:
        client.close()
    assert get(server.port, "/view")[0] == 200


def test_malformed_oversized_and_stalled_heads_get_4xx(serve):
    port = serve(head_deadline=0.3).port
    assert get(port, "/" + "a" * 9000)[0] == 414
    too_many = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n"
    assert parse(exchange(port, too_many))[0] == 431
    assert parse(exchange(port, b"GET / HTTP/1.1\r\nX: " + b"a" * 40000 + b"\r\n\r\n"))[0] == 431
    assert parse(exchange(port, b"GET /\r\n\r\n"))[0] == 400
    started = time.monotonic()
    assert parse(exchange(port, b"GET /healthz HTTP/1.1\r\nX-Never: done"))[0] == 408
    assert time.monotonic() - started < 1.0


def trickle(port: int, head: bytes, pause: float) -> tuple[float, bytes]:
    """Send ``head`` one byte per segment (Nagle off), ``pause`` seconds apart; the server's CPU seconds meanwhile and
    its answer."""
    with connect(port, timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        before = server_cpu()
        for i in range(len(head)):
            s.send(head[i:i + 1])
            time.sleep(pause)
        answer = read_all(s)
        return server_cpu() - before, answer


def padded_head(lines: int, size: int) -> bytes:
    """A GET /healthz head of ``size`` bytes in ``lines`` header lines (the Host first)."""
    start, end = b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"\r\n"
    width = (size - len(start) - len(end)) // (lines - 1)
    pad = [b"X-Pad-%03d: " % i + b"a" * (width - 13) + b"\r\n" for i in range(lines - 1)]
    pad[-1] = b"a" * (size - len(start) - len(end) - sum(map(len, pad))) + pad[-1]
    return start + b"".join(pad) + end


def test_a_head_trickled_a_byte_at_a_time_costs_its_length_not_its_lines_times_its_length(serve):
    """Issue 38: the whole partial head was parsed again on every chunk, so a head of ~100 lines trickled a byte at a
    time cost each received byte a pass over every line before it. The same bytes as one long header line are the
    control: with each byte looked at once both cost the same, while probes on other connections answer at once."""
    port = serve(head_deadline=60.0).port
    many = padded_head(99, 30_000)
    one = padded_head(2, 30_000)
    assert len(many) == len(one) <= 32_768 and many.count(b"\n") == 101
    probes: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            began = time.monotonic()
            assert get(port, "/healthz")[0] == 200
            probes.append(time.monotonic() - began)
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        cost_one, answer_one = trickle(port, one, 0.00005)
        cost_many, answer_many = trickle(port, many, 0.00005)
    finally:
        done.set()
        prober.join()
    assert parse(answer_one)[0] == parse(answer_many)[0] == 200
    assert cost_many < 1.5 * cost_one + 0.2, (cost_many, cost_one)
    assert probes and max(probes) < 1.0, max(probes)


@pytest.mark.parametrize("head, expected", [
    (b"GET /a?b HTTP/1.1\r\nHost: h:1\r\nX: y\r\n\r\nbody", ("GET", "/a?b", "h:1")),
    (b"HEAD / HTTP/1.0\n\n", ("HEAD", "/", None)),
])
def test_a_request_head_reads_the_same_whole_or_a_byte_at_a_time(head, expected):
    whole = RequestHead().feed(head)
    reader, got = RequestHead(), None
    for i in range(len(head)):
        got = got or reader.feed(head[i:i + 1])
    assert whole == got == expected


@pytest.mark.parametrize("head, status", [
    (b"GET /" + b"a" * 9000, 414),  # refused before the line ends
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 33000, 431),
    (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101, 431),
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n", 400),
    (b"BREW\r\n", 400),
])
def test_a_request_head_that_can_never_be_valid_is_refused_as_it_arrives(head, status):
    reader = RequestHead()
    with pytest.raises(BadRequest) as refused:
        for i in range(0, len(head), 7):
            reader.feed(head[i:i + 7])
    assert refused.value.status == status
