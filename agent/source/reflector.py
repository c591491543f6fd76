"""List-then-watch of one node's pods, modelled on client-go's reflector.

- The first LIST is served from the API server's watch cache
  (resourceVersion=0), filtered by the indexed field spec.nodeName.
- WATCH resumes from the newest resourceVersion seen (bookmarks included),
  with a server-side timeout randomised in [min, max] so thousands of agents
  do not reconnect in step, and a client read timeout so a half-open
  connection cannot hang the agent.
- 410 Gone (HTTP status or ERROR event) means the version was compacted:
  relist, and the handler reconciles (pods gone meanwhile are removed).
- Every other failure waits a jittered exponential backoff (0.8 s to 30 s),
  also a watch that ends at once with nothing received, and an answer that is
  not what the API server sends (an HTML page or garbage with status 200, a
  LIST without a resourceVersion, a watch of nothing but undecodable lines),
  so a failing API server or a broken proxy never sees a hot loop. A warning
  that repeats is logged once a minute with a count (``RateLimitedLog``).
- Errors are sorted by named predicates and handled in one place,
  :func:`decide`, as client-go's reflector does; no exception ends the loop.
  One undecodable event is skipped and counted and the watch goes on; an
  undecodable answer as a whole (or anything unexpected) relists after backoff.
- A watched resource with a ``limit`` (the cluster's PDBs, which any tenant
  can grow) keeps at most that many objects from a LIST and counts the rest;
  the count follows the watch's ADDED and DELETED events, and once it is back
  at the limit or under, a LIST cut short is repeated (the handler dropped
  what it could not keep).
- Time is injected (``clock`` and ``wait``), so tests run on virtual time.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeGuard

import msgspec
import urllib3

from agent.decode.reader import Skipped, loads
from agent.pipeline.events import ADDED, BOOKMARK, DELETED, MODIFIED, Bookmark, ObjectEvent
from agent.pipeline.interfaces import OTHER_NODE, UNDECODABLE, Emit, SourceMetrics, source_loop
from agent.source.backoff import Backoff
from agent.source.kube import TRANSPORT_ERRORS, ApiError, LineTooLong
from agent.source.listing import read_list
from agent.source.watched import NodeObject, PdbsOfCluster, PodsOfNode, Watched
from agent.telemetry.log_limit import RateLimitedLog

__all__ = ["Reflector", "ReflectorSettings", "ListWatchApi", "Watched", "PodsOfNode", "NodeObject", "PdbsOfCluster",
           "Retry", "decide", "is_expired", "is_too_many_requests", "is_unauthorized", "is_transport",
           "is_undecodable", "BACK_UNDER_LIMIT"]

#: Why a watch ended so that the LIST is repeated: a limited resource is back within its limit.
BACK_UNDER_LIMIT = "back_under_limit"

log = logging.getLogger(__name__)


class ListWatchApi(Protocol):
    def get_chunks(self, path: str, params: dict[str, str], read_timeout: float = ...) -> Iterator[bytes]: ...
    def stream_lines(self, path: str, params: dict[str, str], read_timeout: float): ...


class ReflectorSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The watch's timeouts; the configuration's (agent.config.SETTINGS) come in through the wiring."""

    # The server-side timeout of each watch is drawn from [min, max].
    min_watch_timeout: int
    max_watch_timeout: int
    # A silent stream past this is treated as dead and the watch resumes.
    read_timeout: float
    list_timeout: float = 60.0
    # A watch that ends sooner than this with no event counts as a failure.
    short_watch: float = 1.0


class ShortWatch(Exception):
    """A watch ended at once with nothing received: a failure, or a loop would be hot."""


class UndecodableEvent(ValueError):
    """One watch line that is not a usable event; it is skipped and the watch goes on."""


class NotAWatch(ValueError):
    """A watch answer of undecodable lines only (a proxy's HTML page, garbage): a failure, never progress."""


class NotAList(ValueError):
    """A LIST answer that is a JSON object but not a List (no metadata.resourceVersion, which the API server always
    sends)."""


# -- named predicates (client-go: isExpiredError, isTooManyRequestsError, ...) ---------
def is_expired(exc: BaseException) -> bool:
    """410 Gone: the resourceVersion was compacted; only a relist helps."""
    return isinstance(exc, ApiError) and exc.status == 410


def is_too_many_requests(exc: BaseException) -> TypeGuard[ApiError]:
    return isinstance(exc, ApiError) and exc.status == 429


def is_unauthorized(exc: BaseException) -> bool:
    """401/403: a token expired or was rotated; retrying with backoff lets the refreshed one in."""
    return isinstance(exc, ApiError) and exc.status in (401, 403)


def is_transport(exc: BaseException) -> bool:
    return isinstance(exc, TRANSPORT_ERRORS)


def is_undecodable(exc: BaseException) -> bool:
    """A body or line that is not the JSON the API server sends (bad bytes, nesting too deep, wrong shape)."""
    return isinstance(exc, (ValueError, RecursionError, LineTooLong)) and not isinstance(exc, ApiError)


class Retry(msgspec.Struct, frozen=True):
    """What to do after a failure: a bounded reason, whether to relist, whether to back off first."""

    reason: str
    relist: bool
    backoff: bool = True
    retry_after: float | None = None


def decide(exc: BaseException, expired_in_row: int = 1) -> Retry:
    """The one place that turns an error into the next step."""
    if is_expired(exc):
        # client-go relists at once after a 410; a server that keeps answering 410 still gets backoff.
        return Retry("expired", relist=True, backoff=expired_in_row > 1)
    if isinstance(exc, ShortWatch):
        return Retry("short_watch", relist=False)
    if is_too_many_requests(exc):
        return Retry("http_429", relist=False, retry_after=exc.retry_after)
    if is_unauthorized(exc):
        return Retry("unauthorized", relist=False)
    if isinstance(exc, ApiError):
        status = exc.status
        return Retry(f"http_{status}" if status in (500, 503, 504) else "http_error", relist=False,
                     retry_after=exc.retry_after)
    if is_transport(exc):
        return Retry("transport", relist=False)
    if isinstance(exc, LineTooLong):
        return Retry("line_too_long", relist=True)
    if is_undecodable(exc):
        return Retry("undecodable", relist=True)
    # A bug or a failure nobody foresaw: the same path as the known ones, never the end of the loop.
    return Retry("unexpected", relist=True)


class Reflector:
    def __init__(
        self,
        *,
        api: ListWatchApi,
        watched: Watched,
        emit: Emit,
        metrics: SourceMetrics,
        settings: ReflectorSettings,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Event, float], object] = threading.Event.wait,
        on_list: Callable[[], object] | None = None,
    ) -> None:
        self._on_list = on_list  # called after every successful LIST (the version source reads /version again)
        self._api = api
        self._watched = watched
        self._kind = watched.kind
        self._resource = watched.kind.resource
        self._emit = emit
        self._stats = metrics
        self._settings = settings
        self._backoff = backoff or Backoff(clock=clock)
        self._rng = rng or random.Random()
        self._clock = clock
        self._wait = wait
        self._loop = source_loop(self._resource)
        self._warned_other_node = False
        self._warn = RateLimitedLog(log, clock=clock)
        self.resource_version = ""
        self._limit = watched.limit
        # With a limit: how many objects exist (the last LIST, then its ADDED/DELETED events), and whether they
        # were ever more than the limit since that LIST (then what the handler holds is incomplete).
        self._count = 0
        self._over = False

    # -- resourceVersion accessors (client-go: relistResourceVersion, LastSyncResourceVersion) ------------
    @staticmethod
    def list_resource_version() -> str:
        """Every LIST reads the watch cache ("0"): cheap for the API server, at most slightly stale."""
        return "0"

    def watch_resource_version(self) -> str:
        """The newest version seen (LIST, event or bookmark): the watch resumes exactly after it."""
        return self.resource_version

    def run(self, stop: threading.Event) -> None:
        need_list, reason, expired_in_row = True, "initial", 0
        while not stop.is_set():
            self._stats.heartbeat(self._loop)
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._stats.watch_started(reason, self._resource)
                reason = self._watch(stop)
                need_list = reason == BACK_UNDER_LIMIT
                expired_in_row = 0
            except Exception as exc:  # noqa: BLE001 - every error goes through decide()
                if stop.is_set():
                    return  # the stream was interrupted for shutdown
                expired_in_row = expired_in_row + 1 if is_expired(exc) else 0
                retry = decide(exc, expired_in_row)
                self._report(retry, exc)
                reason = retry.reason
                need_list = need_list or retry.relist
                if retry.backoff:
                    self._pause(stop, retry.retry_after)

    def _report(self, retry: Retry, exc: BaseException) -> None:
        self._stats.request_failed(retry.reason, self._resource)
        what = self._resource
        if retry.reason == "expired":
            log.info("%s resourceVersion %s expired (410); relisting", what, self.resource_version)
        elif retry.reason == "unexpected":
            self._warn.log(logging.ERROR, retry.reason, "%s source: unexpected %s; relisting after backoff", what,
                           type(exc).__name__, exc_info=exc)
        elif retry.reason != "short_watch":
            self._warn.warning(retry.reason, "%s source: %s (%s)%s", what, retry.reason,
                               str(exc)[:200] or type(exc).__name__, "; relisting" if retry.relist else "")

    def _pause(self, stop: threading.Event, retry_after: float | None = None) -> None:
        self._wait(stop, self._backoff.next_delay(retry_after))

    def _list(self) -> None:
        started = self._clock()
        chunks = self._api.get_chunks(
            self._watched.path,
            {"fieldSelector": self._watched.field_selector, "resourceVersion": self.list_resource_version()},
            read_timeout=self._settings.list_timeout,
        )
        fields, items = read_list(chunks, self._kind.list_item)
        more = 0
        if self._limit is None:
            records = [r for r in map(self._decode, items) if r is not None]
        else:
            # Counted past the limit, not kept: a LIST of 100,000 PDBs costs the agent what 10,000 do.
            records = []
            for record in map(self._decode, items):
                if record is not None:
                    if len(records) < self._limit:
                        records.append(record)
                    else:
                        more += 1
        # Read after the items: fields that follow them are only known now.
        meta = fields.get("metadata")
        if not isinstance(meta, dict) or not meta.get("resourceVersion"):
            raise NotAList(f"the {self._resource} LIST answer has no metadata.resourceVersion: not a List")
        self.resource_version = str(meta["resourceVersion"])
        self._count, self._over = len(records) + more, more > 0
        if more:
            self._warn.warning("over limit", "the cluster holds %d %s, more than the %d the agent keeps: they are "
                               "reported as unknown until there are %d or fewer", len(records) + more,
                               self._resource, self._limit, self._limit)
        self._emit(self._watched.listed(tuple(records), self.resource_version, more))
        self._stats.relisted(self._clock() - started, self._resource)
        log.info("listed %d %s at resourceVersion %s in %.3f s", len(records), self._resource,
                 self.resource_version, self._clock() - started)
        if self._on_list is not None:
            self._on_list()

    def _decode(self, obj: Any) -> Any:
        """The record for one object, or None (counted) when it cannot be identified or is not ours."""
        record = self._kind.decode(obj)
        if record.__class__ is Skipped:
            self._stats.skipped(UNDECODABLE, self._resource)
            self._warn.warning("undecodable object", "skipping undecodable %s object: %s", self._resource,
                               record.reason)
            return None
        if not self._watched.accept(record):
            # The field selector is the server's promise, not ours to trust: a proxy or an
            # API server that ignores it must not make other nodes' pods count here.
            self._stats.skipped(OTHER_NODE, self._resource)
            if not self._warned_other_node:
                log.warning("the API server sent a %s object outside %s; dropping such objects (counted)",
                            self._resource, self._watched.field_selector)
                self._warned_other_node = True
            return None
        partial = self._watched.over_bound(record)
        if partial:
            self._stats.skipped(partial, self._resource)
        return record

    def _watch(self, stop: threading.Event) -> str:
        """Watch until the stream ends; return why, as the next start's reason."""
        s = self._settings
        params = {
            "fieldSelector": self._watched.field_selector,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.watch_resource_version(),
            "timeoutSeconds": str(self._rng.randint(s.min_watch_timeout, s.max_watch_timeout)),
        }
        started = self._clock()
        received = undecodable = 0
        try:
            for line in self._api.stream_lines(self._watched.path, params, read_timeout=s.read_timeout):
                if stop.is_set():
                    # Shutting down: the read was interrupted, and what it returned last may be an event cut short.
                    return "stopped"
                self._stats.heartbeat(self._loop)
                received += 1
                try:
                    typed = self._kind.watch_line(line)
                    if typed is None:
                        self._dispatch(_parse_event(line))
                    else:
                        self._deliver(*typed)
                    if self._over and self._limit is not None and self._count <= self._limit:
                        log.info("%d %s now, within the limit of %d: listing them again", self._count,
                                 self._resource, self._limit)
                        return BACK_UNDER_LIMIT
                except UndecodableEvent as exc:
                    # Skipped, counted, and the watch goes on: resuming from the
                    # same version would read the same poison line forever.
                    undecodable += 1
                    self._stats.skipped(UNDECODABLE, self._resource)
                    self._warn.warning("undecodable event", "skipping undecodable %s watch event: %s",
                                       self._resource, exc)
        except urllib3.exceptions.ReadTimeoutError:
            # Silent for read_timeout seconds: a dead or half-open stream.
            # The wait already happened, so resume without backoff.
            if received and undecodable == received:
                raise NotAWatch(f"{undecodable} undecodable line(s) and no event before the read timeout") from None
            return "read_timeout"
        if received and undecodable == received:
            # Resuming at once would ask again for the same page: client-go ends such a watch with an error.
            raise NotAWatch(f"the watch answer held {undecodable} undecodable line(s) and no event")
        if received == 0 and self._clock() - started < s.short_watch:
            raise ShortWatch("watch ended at once with nothing received")
        self._backoff.reset()
        self._stats.progressed(self._resource)
        return "stream_end"

    def _dispatch(self, raw: dict[str, Any]) -> None:
        kind, obj = raw.get("type"), raw.get("object")
        if kind == "ERROR":
            raise ApiError.from_status(obj if isinstance(obj, dict) else {}, 500)
        if kind not in (ADDED, MODIFIED, DELETED, BOOKMARK) or not isinstance(obj, dict):
            raise UndecodableEvent(f"unexpected watch event type {str(kind)[:40]!r}")
        if kind == BOOKMARK:
            meta = obj.get("metadata")
            version = meta.get("resourceVersion") if isinstance(meta, dict) else None
            self._put(Bookmark(resource=self._resource, resource_version=str(version or "")))
        else:
            self._deliver(kind, obj)

    def _deliver(self, kind: str, obj: Any) -> None:
        """One ADDED, MODIFIED or DELETED object (typed or parsed) as an event, unless it is dropped (counted)."""
        record = self._decode(obj)
        if record is not None:
            if self._limit is not None and kind != MODIFIED:
                self._count += 1 if kind == ADDED else -1
                self._over = self._over or self._count > self._limit
            self._put(self._watched.changed(kind, record))

    def _put(self, event: ObjectEvent) -> None:
        self._emit(event)
        if event.resource_version:
            self.resource_version = event.resource_version
        self._stats.progressed(self._resource)


def _parse_event(line: bytes) -> dict[str, Any]:
    """One watch line as a JSON object; anything else is an UndecodableEvent."""
    try:
        raw = loads(line)
    except (ValueError, RecursionError) as exc:  # not JSON, nested past the parser's limit
        raise UndecodableEvent(f"{type(exc).__name__}: {str(exc)[:120]}") from None
    if not isinstance(raw, dict):
        raise UndecodableEvent(f"watch line is a JSON {type(raw).__name__}, not an object")
    return raw
