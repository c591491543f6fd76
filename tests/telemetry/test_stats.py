"""Runtime telemetry: the queue signals move the way they must under load."""

from __future__ import annotations

import threading
import time

from agent.pipeline.events import ADDED, MODIFIED, Bookmark, PodChanged
from agent.pipeline.handler import Handler
from agent.decode.reader import POD
from agent.pipeline.queue import EventQueue
from agent.pipeline.state import NodeState
from agent.telemetry.stats import RuntimeStats
from testkit.waiting import wait_until
from testkit.factory import pod


class SlowHandler(Handler):
    """The real handler, deliberately slowed (or held) per event."""

    def __init__(self, *, delay: float = 0.0, gate: threading.Event | None = None, **kwargs):
        super().__init__(**kwargs)
        self.delay, self.gate = delay, gate

    def handle(self, event):
        if self.gate is not None:
            self.gate.wait()
        time.sleep(self.delay)
        super().handle(event)


def pipeline(**kwargs):
    stats = RuntimeStats()
    state = NodeState("node-a")
    queue = EventQueue(metrics=stats)
    handler = SlowHandler(state=state, metrics=stats, **kwargs)
    stop = threading.Event()
    thread = threading.Thread(target=handler.run, args=(queue, stop), daemon=True)
    thread.start()
    return stats, state, queue, stop, thread


def events(n):
    return [PodChanged(type=ADDED if i % 3 else MODIFIED, pod=POD.record(pod(f"p{i}"))) for i in range(n)]


def test_fast_handler_counts_and_histograms_agree_with_events_sent():
    stats, state, queue, stop, thread = pipeline()
    sent = events(30) + [Bookmark(resource="pods", resource_version="9")]
    for e in sent:
        queue.put(e)
    assert queue.join(5)
    s = stats.snapshot()
    assert dict(s.events_added) == {"ADDED": 20, "MODIFIED": 10, "BOOKMARK": 1}
    assert s.events_handled == len(sent)
    assert s.queue_duration.count == len(sent) and s.work_duration.count == len(sent)
    assert s.queue_depth == 0 and len(state) == 30
    # In-memory handling is microseconds: the finest buckets must see it.
    assert s.work_duration.cumulative()[6][1] > 0  # <= 100 us
    stop.set()
    thread.join(2)


def test_slowed_handler_makes_depth_and_time_in_queue_rise():
    stats, _, queue, stop, thread = pipeline(delay=0.02)
    for e in events(40):
        queue.put(e)
    time.sleep(0.1)
    s = stats.snapshot()
    assert s.queue_depth >= 30, s.queue_depth
    assert queue.join(10)
    s = stats.snapshot()
    assert s.queue_depth == 0
    # The last events waited behind ~39 others of 20 ms each.
    assert s.queue_duration.sum / s.queue_duration.count > 0.2
    assert dict(s.queue_duration.cumulative())[0.25] < 40  # some waited longer than 250 ms
    assert s.work_duration.sum >= 40 * 0.02
    stop.set()
    thread.join(2)


def test_oldest_unfinished_work_grows_while_the_handler_is_stuck():
    gate = threading.Event()
    stats, _, queue, stop, thread = pipeline(gate=gate)
    queue.put(events(1)[0])
    wait_until(lambda: stats.snapshot().unfinished_work_seconds > 0)
    first = stats.snapshot().unfinished_work_seconds
    time.sleep(0.3)
    second = stats.snapshot().unfinished_work_seconds
    assert second >= first + 0.25
    gate.set()
    assert queue.join(2)
    assert stats.snapshot().unfinished_work_seconds == 0
    stop.set()
    thread.join(2)


def test_snapshot_is_an_immutable_value():
    stats = RuntimeStats()
    stats.event_added("ADDED")
    s = stats.snapshot()
    stats.event_added("ADDED")
    assert s.events_added["ADDED"] == 1
    try:
        s.events_added["ADDED"] = 5  # type: ignore[index]
    except TypeError:
        pass
    else:
        raise AssertionError("snapshot mappings must be read-only")


def test_a_full_queue_holds_the_source_back_and_loses_nothing_in_order():
    """The bound is back-pressure on the watch reader, not a drop: every event arrives, in order."""
    queue = EventQueue(maxsize=3, full_poll=0.001)
    sent = events(12)
    producer = threading.Thread(target=lambda: [queue.put(e) for e in sent], daemon=True)
    producer.start()
    wait_until(lambda: queue.qsize() == 3, timeout=5)
    time.sleep(0.05)
    assert producer.is_alive() and queue.qsize() == 3  # held at the bound, not past it
    assert not queue.join(0.01)  # put and not handled
    received = []
    while len(received) < len(sent):
        item = queue.get(timeout=5)
        assert item is not None
        assert queue.qsize() <= 3
        received.append(item.event)
        queue.task_done()
    producer.join(5)
    assert received == sent and queue.get(timeout=0) is None and queue.join(0.01)


def test_an_idle_handler_waits_without_polling_and_stops_at_once_when_woken():
    """The idle handler checks its stop event every 5 s only; wake() makes it look now, after what was queued."""
    stats, state, queue, stop, thread = pipeline()
    wait_until(lambda: "handler" in stats.snapshot().loop_idle_seconds, timeout=5)
    time.sleep(0.5)
    assert stats.snapshot().loop_idle_seconds["handler"] >= 0.4  # no heartbeat: it sleeps, not polls
    queue.put(events(1)[0])
    stop.set()
    started = time.monotonic()
    queue.wake()
    thread.join(2)
    assert not thread.is_alive() and time.monotonic() - started < 1.0
    assert len(state) == 1  # the event queued before the wake-up was still handled
    assert queue.get(timeout=0) is None and stats.snapshot().queue_depth == 0


def test_events_queued_behind_the_wake_up_are_still_handled_before_the_handler_ends():
    """Shutdown sets stop and wakes the handler while a source may still be handing over its last event: one that
    lands behind the wake-up is in the queue, and "drained" means it is handled too, not left in the queue."""
    stats, state = RuntimeStats(), NodeState("node-a")
    queue, stop = EventQueue(metrics=stats), threading.Event()
    stop.set()
    queue.wake()
    for e in events(3):
        queue.put(e)
    handler = Handler(state=state, metrics=stats)
    thread = threading.Thread(target=handler.run, args=(queue, stop), daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(3)
    assert not thread.is_alive() and time.monotonic() - started < 1.0  # drained without waiting a poll
    assert len(state) == 3 and stats.snapshot().queue_depth == 0
    assert queue.join(0)


def test_every_watched_resource_is_counted_alike():
    """The Node watch's LIST duration and freshness are reported as the pods' are (they were dropped: only pods
    counted), and a source that never progressed ages from its start without claiming an event."""
    from agent.model.node import NODES
    from agent.model.pod import PODS
    from agent.pipeline.interfaces import source_loop
    from testkit.virtual_time import VirtualClock

    clock = VirtualClock()
    stats = RuntimeStats(clock=clock)
    stats.heartbeat(source_loop(PODS))
    stats.heartbeat(source_loop(NODES))
    clock.advance(2.0)
    stats.relisted(0.25, NODES)
    clock.advance(3.0)
    s = stats.snapshot()
    assert dict(s.list_duration_seconds) == {NODES: 0.25}
    assert dict(s.last_event_age_seconds) == {NODES: 3.0}
    assert dict(s.source_progress_age) == {PODS: 5.0, NODES: 3.0}
    stats.progressed(PODS)
    clock.advance(1.0)
    s = stats.snapshot()
    assert dict(s.last_event_age_seconds) == {NODES: 4.0, PODS: 1.0}
    assert dict(s.source_progress_age) == {PODS: 1.0, NODES: 4.0}
