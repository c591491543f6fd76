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
  also a watch that ends at once with nothing received, so a failing API
  server never sees a hot loop.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import urllib3

from agent.pipeline.events import ADDED, BOOKMARK, DELETED, MODIFIED, RELIST, Event
from agent.model.node import decode_node
from agent.model.pod import PodDecodeError, decode_pod
from agent.pipeline.queue import EventQueue
from agent.pipeline.stats import RuntimeStats
from agent.source.backoff import Backoff
from agent.source.kube import TRANSPORT_ERRORS, ApiError
from agent.source.listing import iter_list

__all__ = ["Reflector", "ReflectorSettings", "ListWatchApi", "Resource", "pods_of_node", "node_object"]

log = logging.getLogger(__name__)


class ListWatchApi(Protocol):
    def get_text(self, path: str, params: dict[str, str], read_timeout: float = ...) -> str: ...
    def stream_lines(self, path: str, params: dict[str, str], read_timeout: float): ...


@dataclass(frozen=True)
class Resource:
    """What one reflector lists and watches, and how its objects become events."""

    name: str  # "pods" or "nodes": the bounded ``resource`` attribute of watch metrics
    kind: str  # Event.kind: "pod" or "node"
    path: str
    field_selector: str
    decode: Callable[[Any], Any]  # raises PodDecodeError for an unidentifiable object
    event: Callable[[str, Any], Event]
    relist: Callable[[tuple], Event]


def pods_of_node(node_name: str) -> Resource:
    """The pods bound to ``node_name`` (spec.nodeName is indexed in the watch cache)."""
    return Resource("pods", "pod", "/api/v1/pods", f"spec.nodeName={node_name}", decode_pod,
                    lambda kind, pod: Event(kind, pod=pod, resource_version=pod.resource_version),
                    lambda pods: Event(RELIST, pods=pods))


def node_object(node_name: str) -> Resource:
    """The agent's own Node object."""
    return Resource("nodes", "node", "/api/v1/nodes", f"metadata.name={node_name}", decode_node,
                    lambda kind, node: Event(kind, kind="node", node=node, resource_version=node.resource_version),
                    lambda nodes: Event(RELIST, kind="node", node=nodes[0] if nodes else None))


@dataclass(frozen=True)
class ReflectorSettings:
    min_watch_timeout: int = 300
    max_watch_timeout: int = 600
    # Longer than the API server's ~1 min bookmark period; a silent stream
    # past this is treated as dead and the watch resumes.
    read_timeout: float = 120.0
    list_timeout: float = 60.0
    # A watch that ends sooner than this with no event counts as a failure.
    short_watch: float = 1.0


class _WatchEnded(Exception):
    """The stream ended; ``reason`` says how, for the watch-starts counter."""


class Reflector:
    def __init__(
        self,
        api: ListWatchApi,
        resource: Resource,
        queue: EventQueue,
        stats: RuntimeStats,
        settings: ReflectorSettings = ReflectorSettings(),
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._resource = resource
        self._selector = resource.field_selector
        self._queue = queue
        self._stats = stats
        self._settings = settings
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self._clock = clock
        self.resource_version = ""

    def run(self, stop: threading.Event) -> None:
        need_list = True
        reason = "initial"
        expired_in_row = 0
        while not stop.is_set():
            self._stats.heartbeat(f"source:{self._resource.name}")
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._stats.watch_started(reason, self._resource.name)
                reason = self._watch(stop)
                expired_in_row = 0
            except ApiError as exc:
                if exc.expired:
                    log.info("resourceVersion %s expired (410); relisting", self.resource_version)
                    need_list, reason = True, "expired"
                    self._stats.request_failed(reason, self._resource.name)
                    expired_in_row += 1
                    # client-go relists at once after a 410; a server that
                    # keeps answering 410 still gets backoff.
                    if expired_in_row > 1:
                        self._wait(stop)
                else:
                    reason = f"http_{exc.status}" if exc.status in (429, 500, 503, 504) else "http_error"
                    self._stats.request_failed(reason, self._resource.name)
                    log.warning("API request failed: %s", exc)
                    self._wait(stop, exc.retry_after)
            except TRANSPORT_ERRORS as exc:
                if stop.is_set():
                    return  # the stream was interrupted for shutdown
                reason = "transport"
                self._stats.request_failed(reason, self._resource.name)
                log.warning("API connection failed: %s", exc.__class__.__name__ if not str(exc) else exc)
                self._wait(stop)
            except _WatchEnded as exc:
                reason = str(exc)
                self._stats.request_failed(reason, self._resource.name)
                self._wait(stop)
            except ValueError as exc:  # a corrupt line or body
                reason = "decode"
                self._stats.request_failed(reason, self._resource.name)
                log.warning("undecodable API answer: %s", exc)
                self._wait(stop)

    def _wait(self, stop: threading.Event, retry_after: float | None = None) -> None:
        delay = self._backoff.next_delay()
        if retry_after is not None:
            delay = max(delay, min(retry_after, self._backoff.maximum))
        stop.wait(delay)

    def _list(self) -> None:
        started = self._clock()
        body = self._api.get_text(
            self._resource.path,
            {"fieldSelector": self._selector, "resourceVersion": "0"},
            read_timeout=self._settings.list_timeout,
        )
        fields, items = iter_list(body)
        del body  # the items iterator holds the text; nothing else needs it
        records = []
        for item in items:
            try:
                records.append(self._resource.decode(item))
            except PodDecodeError as exc:
                self._stats.handler_error("undecodable_object")
                log.warning("skipping unidentifiable object in LIST: %s", exc)
        # Read after the items: fields that follow them are only known now.
        meta = fields.get("metadata") if isinstance(fields.get("metadata"), dict) else {}
        self.resource_version = str(meta.get("resourceVersion") or "")
        self._queue.put(self._resource.relist(tuple(records)))
        self._stats.relisted(self.resource_version, self._clock() - started, self._resource.name)
        log.info("listed %d %s at resourceVersion %s in %.3f s", len(records), self._resource.name,
                 self.resource_version, self._clock() - started)

    def _watch(self, stop: threading.Event) -> str:
        """Watch until the stream ends; return why, as the next start's reason."""
        s = self._settings
        params = {
            "fieldSelector": self._selector,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(self._rng.randint(s.min_watch_timeout, s.max_watch_timeout)),
        }
        started = self._clock()
        received = 0
        try:
            for line in self._api.stream_lines(self._resource.path, params, read_timeout=s.read_timeout):
                self._stats.heartbeat(f"source:{self._resource.name}")
                self._dispatch(json.loads(line))
                received += 1
                if stop.is_set():
                    return "stopped"
        except urllib3.exceptions.ReadTimeoutError:
            # Silent for read_timeout seconds: a dead or half-open stream.
            # The wait already happened, so resume without backoff.
            return "read_timeout"
        if received == 0 and self._clock() - started < s.short_watch:
            raise _WatchEnded("short_watch")
        self._backoff.reset()
        return "stream_end"

    def _dispatch(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            raise ValueError("watch event is not an object")
        kind = raw.get("type")
        obj = raw.get("object")
        if kind == "ERROR":
            raise ApiError.from_status(obj if isinstance(obj, dict) else {}, 500)
        if kind not in (ADDED, MODIFIED, DELETED, BOOKMARK) or not isinstance(obj, dict):
            raise ValueError(f"unexpected watch event type {kind!r}")
        if kind == BOOKMARK:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            rv = str(meta.get("resourceVersion") or "")
            event = Event(BOOKMARK, resource_version=rv, kind=self._resource.kind)
        else:
            try:
                record = self._resource.decode(obj)
            except PodDecodeError as exc:
                self._stats.handler_error("undecodable_object")
                log.warning("skipping unidentifiable object in %s event: %s", kind, exc)
                return
            event = self._resource.event(kind, record)
            rv = event.resource_version
        self._queue.put(event)
        if rv:
            self.resource_version = rv
        self._stats.progressed(rv, self._resource.name)

