"""The API server's own version, read from /version, handed to the handler as an event.

kube-scheduler and the cluster-autoscaler run at the cluster's release, so the
agent counts requests with that release's rules. The version is read at
start-up and again after every relist of the pod watch (a relist follows a
compaction or an outage, the moments an upgraded API server shows up); the
handler decides what a reading means. /version is readable by every
authenticated client (the system:public-info-viewer role), so no RBAC rule
is needed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from agent.model.rules import KubernetesVersion, VersionError, parse_version_info
from agent.pipeline.events import VersionRead
from agent.pipeline.interfaces import Emit, SourceMetrics
from agent.source.backoff import Backoff
from agent.source.reflector import decide
from agent.telemetry.log_limit import RateLimitedLog

__all__ = ["ServerVersionSource", "VERSION_RESOURCE", "read_server_version"]

log = logging.getLogger(__name__)

# The bounded ``resource`` attribute of api_errors_total for this request.
VERSION_RESOURCE = "version"


class VersionApi(Protocol):
    def get_json(self, path: str, params: dict[str, str], read_timeout: float = ...) -> Any: ...


def read_server_version(api: VersionApi, read_timeout: float = 10.0) -> KubernetesVersion:
    """GET /version, parsed; VersionError for an answer that names no version."""
    return parse_version_info(api.get_json("/version", {}, read_timeout=read_timeout))


class ServerVersionSource:
    """Reads /version when due: at start, after each :meth:`relisted`, and again after a failure (with backoff)."""

    def __init__(self, *, api: VersionApi, emit: Emit, metrics: SourceMetrics, backoff: Backoff | None = None,
                 read_timeout: float = 10.0, poll: float = 60.0,
                 wait: Callable[[threading.Event, float], object] = threading.Event.wait) -> None:
        self._api = api
        self._emit = emit
        self._stats = metrics
        self._backoff = backoff or Backoff()
        self._read_timeout = read_timeout
        self._poll = poll
        self._wait = wait
        self._due = threading.Event()
        self._due.set()
        self._unparsable: str | None = None
        self._warn = RateLimitedLog(log)

    def relisted(self) -> None:
        """The pod watch relisted: read the version again (the API server may have been replaced)."""
        self._due.set()

    def interrupt(self) -> None:
        """End the wait for the next reading now (shutdown): the loop then sees its stop event.

        So an idle source sleeps until it is due or told, rather than waking five times a second to look.
        """
        self._due.set()

    def read(self) -> KubernetesVersion:
        return read_server_version(self._api, self._read_timeout)

    def read_once(self, stop: threading.Event) -> None:
        """One due reading: an event on success; on failure a count, a log line and a retry after backoff."""
        self._due.clear()
        try:
            version = self.read()
        except VersionError as exc:
            # The server answered; asking again returns the same text. The rules stay as they are.
            if str(exc) != self._unparsable:
                log.warning("cannot read the API server's version (%s); keeping the current request rules", exc)
                self._unparsable = str(exc)
            self._stats.request_failed("unparsable_version", VERSION_RESOURCE)
            return
        except Exception as exc:  # noqa: BLE001 - sorted by the reflector's decide(), never the end of the loop
            retry = decide(exc)
            self._stats.request_failed(retry.reason, VERSION_RESOURCE)
            self._warn.warning(retry.reason, "GET /version failed (%s: %s); keeping the current request rules and "
                               "retrying", retry.reason, str(exc)[:200] or type(exc).__name__)
            self._due.set()
            self._wait(stop, self._backoff.next_delay(retry.retry_after))
            return
        self._backoff.reset()
        self._unparsable = None
        self._emit(VersionRead(version=version))

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if self._due.wait(self._poll) and not stop.is_set():
                self.read_once(stop)
