"""The reflector's decisions on virtual time: what each failure leads to, and how long it waits.

The API is scripted (each LIST and WATCH answers the next step of a script),
the clock is virtual, and the real Reflector, queue and stats run unchanged.
A minute of backoff takes microseconds, and every delay is asserted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.pipeline.events import BOOKMARK, MODIFIED, RELIST
from agent.pipeline.queue import EventQueue
from agent.telemetry.stats import RuntimeStats
from agent.source.backoff import Backoff
from agent.source.kube import ApiError, LineTooLong, TransportError
from agent.source.reflector import PodsOfNode, Reflector, ReflectorSettings, decide
from testkit.factory import pod
from testkit.virtual_time import VirtualClock


def pod_list(rv: str, *names: str) -> str:
    return json.dumps({"kind": "PodList", "metadata": {"resourceVersion": rv},
                       "items": [pod(n, resource_version=rv) for n in names]})


def event(kind: str, name: str, rv: str) -> bytes:
    return json.dumps({"type": kind, "object": pod(name, resource_version=rv)}).encode()


class ScriptedApi:
    """LIST answers and WATCH streams in order; a step that is an exception is raised."""

    def __init__(self, lists: list, watches: list) -> None:
        self.lists = list(lists)
        self.watches = list(watches)
        self.calls: list[tuple[str, dict[str, str]]] = []

    def get_chunks(self, path: str, params: dict[str, str], read_timeout: float = 60.0) -> Iterator[bytes]:
        """The LIST body in small chunks, so items and keys straddle chunk boundaries as on a real socket."""
        self.calls.append(("list", dict(params)))
        step = self.lists.pop(0) if self.lists else ApiError(500, "InternalError", "script ended")
        if isinstance(step, BaseException):
            raise step
        data = step.encode("utf-8", "surrogateescape")
        return iter([data[i:i + 1000] for i in range(0, len(data), 1000)])

    def stream_lines(self, path: str, params: dict[str, str], read_timeout: float) -> Iterator[bytes]:
        self.calls.append(("watch", dict(params)))
        step = self.watches.pop(0) if self.watches else []
        for item in step:
            if isinstance(item, BaseException):
                raise item
            yield item


def run(api: ScriptedApi, horizon: float = 120.0, backoff_jitter: float = 0.0, stop: threading.Event | None = None):
    """Run the pod reflector until virtual time passes ``horizon`` (or ``stop`` is set); return (events, stats,
    clock, reflector)."""
    clock = VirtualClock(horizon)
    stats = RuntimeStats(clock=clock)
    queue = EventQueue(metrics=stats)
    reflector = Reflector(api=api, watched=PodsOfNode(node_name="node-a"), emit=queue.put, metrics=stats,
                          settings=ReflectorSettings(min_watch_timeout=300, max_watch_timeout=300, read_timeout=120.0),
                          backoff=Backoff(jitter=backoff_jitter, clock=clock), clock=clock, wait=clock.wait)
    reflector.run(threading.Event() if stop is None else stop)
    events = []
    while (item := queue.get(timeout=0)) is not None:
        events.append(item.event)
    return events, stats.snapshot(), clock, reflector


def test_list_then_watch_from_the_listed_version_then_resume_from_the_newest():
    api = ScriptedApi([pod_list("10", "a")], [[event("MODIFIED", "a", "11")], []])
    events, stats, clock, _ = run(api, horizon=1.0)
    assert [e.type for e in events] == [RELIST, MODIFIED]
    (_, listed), (_, first), (_, second) = api.calls[:3]
    assert listed["resourceVersion"] == "0" and first["resourceVersion"] == "10" and second["resourceVersion"] == "11"


def test_a_500_storm_backs_off_exponentially():
    api = ScriptedApi([ApiError(500, "InternalError", "down")] * 100, [])
    _, stats, clock, _ = run(api, horizon=60.0)
    assert clock.waits[:6] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6]
    assert len(api.calls) == 7  # one minute of a failing API server: seven requests, not thousands
    assert stats.requests_failed[("pods", "http_500")] == 7


def test_410_relists_at_once_and_a_second_410_in_a_row_backs_off():
    gone = ApiError(410, "Expired", "too old")
    api = ScriptedApi([pod_list("10", "a"), gone, pod_list("30", "b")], [[gone]])
    events, stats, clock, _ = run(api, horizon=5.0)
    assert [c for c, _ in api.calls[:4]] == ["list", "watch", "list", "list"]
    assert clock.waits[0] == 0.8  # only after the second 410
    assert [e.type for e in events if e.type == RELIST] == [RELIST, RELIST]
    assert [p.name for p in events[-1].pods] == ["b"]
    assert stats.requests_failed[("pods", "expired")] == 2


@pytest.mark.parametrize("poison", [
    b"not json at all",
    b"\xff\xfe\x00 not utf-8",
    json.dumps({"type": "SURPRISE", "object": {}}).encode(),
    b"[1, 2, 3]",
    b"[" * 10_000 + b"]" * 10_000,
    json.dumps({"type": "MODIFIED", "object": {"metadata": {}}}).encode(),  # no name, no uid
], ids=["not-json", "not-utf8", "unknown-type", "not-an-object", "nested-10000", "unidentifiable"])
def test_one_poison_line_is_skipped_and_the_watch_goes_on(poison):
    api = ScriptedApi([pod_list("10", "a")], [[event("MODIFIED", "a", "11"), poison, event("MODIFIED", "b", "12")]])
    events, stats, _, reflector = run(api, horizon=1.0)
    assert [e.pod.name for e in events if e.type == MODIFIED] == ["a", "b"]
    assert [c for c, _ in api.calls].count("list") == 1  # no relist loop
    assert stats.skipped[("pods", "undecodable")] == 1
    assert reflector.resource_version == "12"


def test_a_list_keeps_every_good_item_around_a_bad_one():
    body = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "5"},
                       "items": [pod("good-1"), {"metadata": {}}, "a string", pod("good-2")]})
    events, stats, _, _ = run(ScriptedApi([body], []), horizon=1.0)
    assert [p.name for p in events[0].pods] == ["good-1", "good-2"]
    assert stats.skipped[("pods", "undecodable")] == 2


@pytest.mark.parametrize("bad", ["[" * 10_000 + "]" * 10_000, '{"metadata": {"name": "x",, }}', '{"a": "}]\\"[{", "b": 1 2}'],
                         ids=["nested-10000", "bad-syntax", "brackets-in-strings"])
def test_a_list_item_the_parser_refuses_is_skipped_and_the_rest_kept(bad):
    good = [json.dumps(pod(n)) for n in ("good-1", "good-2", "good-3")]
    body = ('{"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": ['
            + ", ".join([good[0], bad, good[1], bad, good[2]]) + "]}")
    events, stats, _, _ = run(ScriptedApi([body], []), horizon=1.0)
    assert [p.name for p in events[0].pods] == ["good-1", "good-2", "good-3"]
    assert events[0].resource_version == "5"
    assert stats.skipped[("pods", "undecodable")] == 2


def test_a_list_that_ends_inside_an_item_is_refused_and_relisted():
    truncated = pod_list("5", "a", "b")[:-40]
    api = ScriptedApi([truncated, pod_list("6", "c")], [])
    events, stats, clock, _ = run(api, horizon=2.0)
    assert stats.requests_failed[("pods", "undecodable")] == 1 and clock.waits[0] == 0.8
    assert [e.type for e in events] == [RELIST] and [p.name for p in events[0].pods] == ["c"]


@pytest.mark.parametrize("error, reason, relists", [
    (TransportError("TLS handshake failed"), "transport", False),
    (ConnectionResetError("reset"), "transport", False),
    (ApiError(401, "Unauthorized", ""), "unauthorized", False),
    (ApiError(403, "Forbidden", ""), "unauthorized", False),
    (LineTooLong("huge"), "line_too_long", True),
    (RuntimeError("a bug nobody foresaw"), "unexpected", True),
    (KeyError("surprise"), "unexpected", True),
])
def test_every_error_is_counted_backed_off_and_survived(error, reason, relists):
    api = ScriptedApi([pod_list("10", "a"), pod_list("20", "b")], [[error], [event("MODIFIED", "b", "21")]])
    events, stats, clock, _ = run(api, horizon=2.0)
    assert stats.requests_failed[("pods", reason)] == 1
    assert clock.waits and clock.waits[0] == 0.8
    assert [c for c, _ in api.calls].count("list") == (2 if relists else 1)
    assert events[-1].type == MODIFIED and events[-1].pod.name == "b"  # the loop went on


def test_429_waits_at_least_retry_after():
    api = ScriptedApi([ApiError(429, "TooManyRequests", "", retry_after=7.0), pod_list("1", "a")], [])
    _, _, clock, _ = run(api, horizon=8.0)
    assert clock.waits[0] == 7.0


def test_a_watch_that_ends_at_once_is_backed_off_but_a_healthy_one_resets_the_backoff():
    api = ScriptedApi([pod_list("1", "a")], [[], [], [event("MODIFIED", "a", "2")], []])
    _, stats, clock, _ = run(api, horizon=3.0)
    assert clock.waits[:3] == [0.8, 1.6, 0.8]
    assert stats.requests_failed[("pods", "short_watch")] >= 2


def test_bookmarks_advance_the_version_without_events_for_pods():
    bookmark = json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "99"}}}).encode()
    api = ScriptedApi([pod_list("1")], [[bookmark], []])
    events, _, _, reflector = run(api, horizon=1.0)
    assert [e.type for e in events] == [RELIST, BOOKMARK]
    assert api.calls[2][1]["resourceVersion"] == "99" and reflector.resource_version == "99"


def test_decide_is_total():
    for exc in (ValueError(), RecursionError(), OSError(), Exception(), ApiError(418, "", "")):
        retry = decide(exc)
        assert retry.reason and retry.backoff


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=200), st.integers(0, 3)), min_size=1, max_size=25),
       st.integers(1, 97))
def test_raw_watch_bytes_never_stop_the_source_and_every_good_event_arrives(items, chunk_size):
    """Hypothesis drives raw bytes, cut into arbitrary chunks, through the line splitter and the reflector."""
    from agent.source.kube import split_lines

    lines, wanted = [], []
    for i, item in enumerate(items):
        if isinstance(item, int):  # a well-formed event
            name = f"pod-{i}"
            lines.append(event("MODIFIED", name, str(100 + i)))
            wanted.append(name)
        else:
            lines.append(item.replace(b"\n", b" "))
    stream = b"\n".join(lines) + b"\n"
    chunks = [stream[i:i + chunk_size] for i in range(0, len(stream), chunk_size)]

    class RawApi(ScriptedApi):
        def stream_lines(self, path, params, read_timeout):
            self.calls.append(("watch", dict(params)))
            if sum(1 for c, _ in self.calls if c == "watch") == 1:
                yield from split_lines(chunks)

    events, stats, _, _ = run(RawApi([pod_list("10")], []), horizon=1.0)
    got = [e.pod.name for e in events if e.type == MODIFIED]
    # Garbage that happens to be a valid event for another pod would show up too; none of ours is lost.
    assert [n for n in got if n in wanted] == wanted
    assert stats.requests_failed.get(("pods", "unexpected"), 0) == 0


def test_a_line_cut_short_by_shutdown_is_not_reported_as_an_undecodable_event(caplog):
    """Shutdown interrupts the watch's read; what the read returned last may be half an event. That is not bad
    input from the API server: nothing is counted as skipped and nothing is logged, and the reflector stops."""
    stop = threading.Event()
    whole, cut = event("MODIFIED", "a", "11"), event("MODIFIED", "b", "12")[:40]

    class InterruptedApi(ScriptedApi):
        def stream_lines(self, path, params, read_timeout):
            self.calls.append(("watch", dict(params)))
            yield whole
            stop.set()  # SIGTERM arrives while the next read is under way
            yield cut

    api = InterruptedApi([pod_list("10", "a")], [])
    with caplog.at_level("WARNING"):
        events, snapshot, _, _ = run(api, stop=stop)
    assert [e.pod.name for e in events if e.type == MODIFIED] == ["a"]
    assert not snapshot.skipped, snapshot.skipped
    assert not [r for r in caplog.records if "undecodable" in r.getMessage()]
    assert [c for c, _ in api.calls] == ["list", "watch"]
