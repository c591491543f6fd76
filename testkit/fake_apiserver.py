"""A protocol-faithful stand-in for kube-apiserver's pod (and node, and PodDisruptionBudget) endpoints.

The unit tests need answers in milliseconds and faults a real API server does not make on demand
(``fail_next``, ``inject_raw``, ``hang_watches``; the cluster tests run the real kube-apiserver, see
testkit/cluster.py), so this serves the documented API semantics over real HTTP on loopback
(https://kubernetes.io/docs/reference/using-api/api-concepts/),
or over TLS as a real API server does (``tls=True``: a fresh CA and a serving certificate for 127.0.0.1 from
the cluster tests' ``make_pki``; the kubeconfig trusts that CA):

- LIST returns a List whose metadata.resourceVersion is the store's current
  version; ``resourceVersion=0`` is served from the "watch cache" (any
  version is fine, here the newest); ``fieldSelector`` filters on
  ``spec.nodeName`` / ``metadata.name`` / ``metadata.namespace``, and an
  unsupported field is 400 BadRequest.
- WATCH (``watch=true``) streams newline-delimited JSON events with chunked
  transfer encoding, starting after the given resourceVersion; a version
  older than the compacted history yields an ERROR event with a 410 Expired
  Status (what the watch cache does); ``allowWatchBookmarks`` adds BOOKMARK
  events; ``timeoutSeconds`` ends the stream cleanly.
- Every object change bumps one global resourceVersion; deletion is a
  DELETED event carrying the last state with a new version.
- Bearer-token authentication (401 Unauthorized Status otherwise).
- ``/version`` answers like kube-apiserver's version.Info; the version is
  settable (``set_version``), as an upgrade of the control plane would change it.

Fault knobs for the tests: failing the next N requests with a status (and
Retry-After), dropping every open watch, hanging new watches (a half-open
peer: headers sent, then silence), compaction, stop/start (an outage),
ignoring field selectors (a broken proxy), and raw bytes injected into
watch streams or LIST answers (poison input).
"""

from __future__ import annotations

import bisect
import copy
import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from testkit.plain_http import QuietHandler, QuietHTTPServer, answer
from testkit.tcp_proxy import shut_down

__all__ = ["FakeApiServer"]


@dataclass
class _Change:
    rv: int
    type: str
    obj: dict[str, Any]


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def _after(history: list[_Change], rv: int) -> list[_Change]:
    """Changes newer than ``rv`` (history is sorted by version)."""
    return history[bisect.bisect_right(history, rv, key=lambda c: c.rv):]


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur if isinstance(cur, str) else ""


_SELECTABLE = {
    "pods": ("spec.nodeName", "metadata.name", "metadata.namespace", "status.phase"),
    "nodes": ("metadata.name",),
    "poddisruptionbudgets": ("metadata.name", "metadata.namespace"),
    **dict.fromkeys(("replicationcontrollers", "jobs", "replicasets", "statefulsets", "daemonsets"),
                    ("metadata.name", "metadata.namespace")),
}
#: Each kind's path, and the kind and apiVersion its List and bookmarks carry.
_PATHS = {"/api/v1/pods": "pods", "/api/v1/nodes": "nodes",
          "/apis/policy/v1/poddisruptionbudgets": "poddisruptionbudgets"}
_KINDS = {"pods": ("Pod", "v1"), "nodes": ("Node", "v1"), "poddisruptionbudgets": ("PodDisruptionBudget", "policy/v1")}
#: The controller kinds, served only by a server made with ``controllers=True`` (else 404, as an API server that
#: refuses them looks to ``explain --live``).
_CONTROLLER_PATHS = {"/api/v1/replicationcontrollers": "replicationcontrollers", "/apis/batch/v1/jobs": "jobs",
                     "/apis/apps/v1/replicasets": "replicasets", "/apis/apps/v1/statefulsets": "statefulsets",
                     "/apis/apps/v1/daemonsets": "daemonsets"}
_KINDS.update({"replicationcontrollers": ("ReplicationController", "v1"), "jobs": ("Job", "batch/v1"),
               "replicasets": ("ReplicaSet", "apps/v1"), "statefulsets": ("StatefulSet", "apps/v1"),
               "daemonsets": ("DaemonSet", "apps/v1")})


class FakeApiServer:
    def __init__(self, token: str = "test-token", bookmark_interval: float = 60.0, version: str = "v1.37.2",
                 tls: bool = False) -> None:
        self.token = token
        self.serve_controllers = False  # True: the five controller kinds are served too (else 404)
        self.tls = tls
        self._pki = None
        self.version = version
        self.bookmark_interval = bookmark_interval
        self._lock = threading.Condition()
        self._rv = 100
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {kind: {} for kind in _KINDS}
        self._history: dict[str, list[_Change]] = {kind: [] for kind in _KINDS}
        self._compacted = 0
        self._fail: dict[str, list[tuple[int, float | None]]] = {}
        self._hang_watches = False
        self.ignore_field_selector = False
        self.raw_list_items: list[str] = []  # JSON text spliced into every LIST's items, as sent
        self._generation = 0  # bumped by drop_watches()
        self.requests: list[tuple[float, str, dict[str, list[str]]]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._open: set[socket.socket] = set()

    # -- lifecycle -----------------------------------------------------------
    def start(self, port: int = 0) -> "FakeApiServer":
        fake = self

        class Handler(_Handler):
            server_ref = fake

        self._server = QuietHTTPServer(("127.0.0.1", port or self.port), Handler)
        if self.tls:
            # The handshake runs on the connection's own thread at its first read, not in the accept loop.
            self._server.socket = self._tls_context().wrap_socket(self._server.socket, server_side=True,
                                                                  do_handshake_on_connect=False)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection (an API server outage)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server = None
        self.drop_watches()
        with self._lock:
            for s in list(self._open):
                shut_down(s)

    def _pki_of_server(self):
        import shutil
        import tempfile
        import weakref
        from pathlib import Path

        from testkit.cluster import make_pki

        if self._pki is None:
            folder = tempfile.mkdtemp(prefix="fake-apiserver-pki-")
            # Kept across stop() and start() (an outage keeps the CA its clients trust); gone with the server.
            weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
            self._pki = make_pki(Path(folder))
        return self._pki

    def _tls_context(self):
        import ssl

        pki = self._pki_of_server()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.crt("loopback-serving"), pki.key("loopback-serving"))
        return context

    @property
    def ca_file(self) -> str | None:
        """The CA that signed the serving certificate (TLS only)."""
        return str(self._pki_of_server().crt("ca")) if self.tls else None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def kubeconfig(self, path) -> str:
        import yaml

        cluster = {"server": self.url, **({"certificate-authority": self.ca_file} if self.tls else {})}
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "agent", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "agent"}}],
        }))
        return str(path)

    # -- store ---------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def _record(self, kind: str, type_: str, obj: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        key = (_field(obj, "metadata.namespace"), _field(obj, "metadata.name"))
        if type_ == "DELETED":
            self._objects[kind].pop(key, None)
        else:
            self._objects[kind][key] = obj
        self._history[kind].append(_Change(self._rv, type_, obj))
        self._lock.notify_all()
        return obj

    def create(self, obj: dict[str, Any], kind: str = "pods") -> dict[str, Any]:
        with self._lock:
            return self._record(kind, "ADDED", obj)

    def update(self, obj: dict[str, Any], kind: str = "pods") -> dict[str, Any]:
        with self._lock:
            return self._record(kind, "MODIFIED", obj)

    def delete(self, namespace: str, name: str, kind: str = "pods") -> None:
        with self._lock:
            obj = self._objects[kind].get((namespace, name))
            if obj is not None:
                self._record(kind, "DELETED", obj)

    def inject_raw(self, *payloads: bytes, kind: str = "pods") -> None:
        """Send each payload verbatim as one watch line to every watcher (after the changes before it).

        Several at once are queued under one lock, so a watcher writes them back to back, one chunk each.
        """
        with self._lock:
            for payload in payloads:
                self._rv += 1
                self._history[kind].append(_Change(self._rv, "RAW", payload))  # type: ignore[arg-type]
            self._lock.notify_all()

    def objects(self, kind: str = "pods") -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for o in self._objects[kind].values()]

    def compact(self, keep_last: int = 0) -> None:
        """Forget history but the last ``keep_last`` changes: watches from older versions get 410."""
        with self._lock:
            for kind in self._history:
                kept = self._history[kind][-keep_last:] if keep_last else []
                self._history[kind] = kept
            oldest_kept = min((h[0].rv for h in self._history.values() if h), default=self._rv + 1)
            self._compacted = oldest_kept - 1
            self._lock.notify_all()

    def set_version(self, git_version: str) -> None:
        """What /version reports from now on (an upgraded or downgraded control plane)."""
        with self._lock:
            self.version = git_version

    def version_info(self) -> dict[str, Any]:
        with self._lock:
            git_version = self.version
        major, _, rest = git_version.lstrip("v").partition(".")
        minor = rest.split(".")[0].split("-")[0]
        return {"major": major, "minor": minor, "gitVersion": git_version, "gitCommit": "0" * 40,
                "gitTreeState": "clean", "buildDate": "2026-11-01T00:00:00Z", "goVersion": "go1.26.0",
                "compiler": "gc", "platform": "linux/amd64"}

    # -- faults --------------------------------------------------------------
    def fail_next(self, count: int, status: int = 500, retry_after: float | None = None, path: str = "/api/v1/pods") -> None:
        with self._lock:
            self._fail.setdefault(path, []).extend([(status, retry_after)] * count)

    def clear_failures(self) -> None:
        with self._lock:
            self._fail.clear()

    def requests_to(self, path: str = "/api/v1/pods", since: float = 0.0) -> list[tuple[float, dict[str, list[str]]]]:
        with self._lock:
            return [(t, q) for t, p, q in self.requests if p == path and t >= since]

    def drop_watches(self) -> None:
        """End every open watch stream abruptly (no final chunk)."""
        with self._lock:
            self._generation += 1
            self._lock.notify_all()

    def hang_watches(self, hang: bool = True) -> None:
        with self._lock:
            self._hang_watches = hang
            self._lock.notify_all()

    def count(self, watch: bool | None = None, since: float = 0.0, path: str = "/api/v1/pods") -> int:
        with self._lock:
            return sum(1 for t, p, q in self.requests
                       if t >= since and p == path and (watch is None or (q.get("watch") == ["true"]) == watch))


class _Handler(QuietHandler):
    server_ref: FakeApiServer

    def _send_json(self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        # compact, as the API server writes
        answer(self, code, "application/json", json.dumps(body, separators=(",", ":")).encode(), headers)

    def do_GET(self) -> None:  # noqa: N802
        fake = self.server_ref
        url = urlparse(self.path)
        query = parse_qs(url.query)
        with fake._lock:
            fake.requests.append((time.monotonic(), url.path, query))
            # A watch belongs to the generation it was asked in: drop_watches() right after a request
            # was counted ends that watch too, however late its handler starts.
            self.generation = fake._generation
            fake._open.add(self.connection)
            pending = fake._fail.get(url.path)
            failure = pending.pop(0) if pending else None
        try:
            scheme, _, credentials = (self.headers.get("Authorization") or "").partition(" ")
            # The scheme is case-insensitive (RFC 9110 11.1; the kubernetes package's in-cluster loader sends
            # "bearer"), as the real API server takes it.
            if scheme.lower() != "bearer" or credentials != fake.token:
                return self._send_json(401, _status(401, "Unauthorized", "Unauthorized"))
            if failure is not None:
                code, retry_after = failure
                reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 410: "Expired"}.get(code, "InternalError")
                headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else None
                return self._send_json(code, _status(code, reason, "injected failure"), headers)
            if url.path == "/version":
                return self._send_json(200, fake.version_info())
            kind = _PATHS.get(url.path) or (_CONTROLLER_PATHS.get(url.path) if fake.serve_controllers else None)
            if kind is None:
                return self._send_json(404, _status(404, "NotFound", f"the server could not find the requested resource {url.path}"))
            selector: list[tuple[str, str]] = []
            for term in filter(None, (query.get("fieldSelector", [""])[0]).split(",")):
                field, _, value = term.partition("=")
                field = field.rstrip("=")
                if field not in _SELECTABLE[kind]:
                    return self._send_json(400, _status(400, "BadRequest", f'field label not supported: {field}'))
                selector.append((field, value.lstrip("=")))

            if fake.ignore_field_selector:
                selector = []

            def matches(obj: dict[str, Any]) -> bool:
                return all(_field(obj, f) == v for f, v in selector)

            if query.get("watch", [""])[0] in ("true", "1"):
                return self._watch(fake, kind, query, matches)
            with fake._lock:
                # As the API server lists: items without their kind and apiVersion (the List has them).
                items = [{k: copy.deepcopy(v) for k, v in o.items() if k not in ("kind", "apiVersion")}
                         for o in fake._objects[kind].values() if matches(o)]
                rv = fake._rv
            items.sort(key=lambda o: (_field(o, "metadata.namespace"), _field(o, "metadata.name")))
            body = {"kind": f"{_KINDS[kind][0]}List", "apiVersion": _KINDS[kind][1],
                    "metadata": {"resourceVersion": str(rv)}, "items": items}
            if kind == "pods" and fake.raw_list_items:
                text = json.dumps(body)
                cut = text.rindex("]")
                raw = ", ".join(fake.raw_list_items)
                data = (text[:cut] + (", " if items else "") + raw + text[cut:]).encode("utf-8", "surrogateescape")
                return answer(self, 200, "application/json", data)
            self._send_json(200, body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with fake._lock:
                fake._open.discard(self.connection)

    def _chunk(self, payload: bytes) -> None:
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _expired(self, cursor: int, compacted: int) -> None:
        self._chunk(json.dumps({"type": "ERROR", "object": _status(
            410, "Expired", f"too old resource version: {cursor} ({compacted})")}).encode() + b"\n")
        self._chunk(b"")

    def _watch(self, fake: FakeApiServer, kind: str, query: dict[str, list[str]], matches) -> None:
        """A watch as the API server's watch cache serves it: history after the version, then live changes."""
        deadline = time.monotonic() + float(query.get("timeoutSeconds", ["1800"])[0])
        bookmarks = query.get("allowWatchBookmarks", [""])[0] == "true"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        start = self._watch_start(fake, kind, query.get("resourceVersion", [""])[0])
        if start is None:
            return
        generation, pending, cursor = start
        last_bookmark = time.monotonic()
        while True:
            for change in pending:
                if change.type == "RAW":
                    self._chunk(change.obj + b"\n")  # type: ignore[operator]
                elif matches(change.obj):
                    self._chunk(json.dumps({"type": change.type, "object": change.obj}).encode() + b"\n")
            with fake._lock:
                why = self._wait_for_news(fake, kind, generation, cursor, deadline,
                                          last_bookmark + fake.bookmark_interval if bookmarks else None)
                if why == "dropped":
                    return self._drop()
                if why == "compacted":
                    # Compacted past this watcher before it caught up: like a
                    # watch cache closing a watcher that fell too far behind.
                    return self._expired(cursor, fake._compacted)
                pending = _after(fake._history[kind], cursor)
                cursor = pending[-1].rv if pending else cursor
                rv_now = fake._rv
            if why == "deadline" and not pending:
                self._chunk(b"")  # clean end of stream
                return
            if why == "bookmark" and not pending:
                last_bookmark = time.monotonic()
                self._chunk(json.dumps({"type": "BOOKMARK", "object": {
                    "kind": _KINDS[kind][0], "apiVersion": _KINDS[kind][1],
                    "metadata": {"resourceVersion": str(rv_now)}}}).encode() + b"\n")

    def _watch_start(self, fake: FakeApiServer, kind: str, rv_text: str):
        """(generation, changes to send first, cursor), or None when the watch already ended (hang, 410)."""
        with fake._lock:
            generation = self.generation
            if fake._hang_watches:
                # A half-open peer: the client sees headers, then nothing ever.
                while fake._hang_watches and generation == fake._generation and fake._server is not None:
                    fake._lock.wait(0.1)
                self.close_connection = True
                return None
            if rv_text in ("", "0"):
                # "Start at most recent": synthetic ADDED for the current state.
                current = [_Change(fake._rv, "ADDED", copy.deepcopy(o)) for o in fake._objects[kind].values()]
                return generation, current, fake._rv
            cursor = int(rv_text)
            if cursor < fake._compacted:
                self._expired(cursor, fake._compacted)
                return None
            pending = _after(fake._history[kind], cursor)
            return generation, pending, max([cursor] + [c.rv for c in pending[-1:]])

    @staticmethod
    def _wait_for_news(fake: FakeApiServer, kind: str, generation: int, cursor: int, deadline: float,
                       bookmark_due: float | None) -> str:
        """Block (holding fake._lock) until there is something to tell the watcher; say what, in one word."""
        while True:
            if generation != fake._generation or fake._server is None:
                return "dropped"
            if cursor < fake._compacted:
                return "compacted"
            if fake._history[kind] and fake._history[kind][-1].rv > cursor:
                return "change"
            now = time.monotonic()
            if now >= deadline:
                return "deadline"
            if bookmark_due is not None and now >= bookmark_due:
                return "bookmark"
            fake._lock.wait(min(0.05, deadline - now))

    def _drop(self) -> None:
        """Close without the terminating chunk, as a dropped connection does."""
        self.close_connection = True
        shut_down(self.connection)
