"""The narrow interfaces between the stages: what each one may call on the next.

A source gets an ``Emit`` (put an event on the queue) and a
:class:`SourceMetrics`; the queue a :class:`QueueMetrics` (client-go's
workqueue metrics provider); the handler a :class:`HandlerMetrics`; an
exporter an :class:`ExportMetrics`. The agent's own telemetry
(``agent.telemetry.stats.RuntimeStats``) implements them all, and a test can
hand any stage a small recorder instead. The bounded words a stage reports
with (why an object was skipped, which loop beat) are declared here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from agent.pipeline.events import Event

__all__ = ["Emit", "SourceMetrics", "QueueMetrics", "HandlerMetrics", "ExportMetrics", "NO_QUEUE_METRICS",
           "UNDECODABLE", "OTHER_NODE", "SELECTOR_OVER_BOUND",
           "LABELS_OVER_BOUND", "SOURCE_LOOP", "HANDLER_LOOP", "EXPORT_LOOP", "source_loop"]

# The bounded ``resource`` attribute of the watch signals is model.pod.PODS or model.node.NODES.
# Why a source skipped an object (objects_skipped_total{resource, reason}).
UNDECODABLE = "undecodable"  # not JSON, nested too deep, no identity, an unknown event type
OTHER_NODE = "other_node"  # bound to another node: the server did not apply the field selector
# Kept without a part over the agent's bounds (agent.model.pdb, agent.model.pod): coverage by PDBs unknown.
SELECTOR_OVER_BOUND = "selector_over_bound"  # a PDB's selector
LABELS_OVER_BOUND = "labels_over_bound"  # a pod's labels
# Liveness loop names: "source" (a replay) or "source:<resource>", "handler", "export".
SOURCE_LOOP = "source"
HANDLER_LOOP = "handler"
EXPORT_LOOP = "export"


def source_loop(resource: str | None = None) -> str:
    return SOURCE_LOOP if resource is None else f"{SOURCE_LOOP}:{resource}"

#: How a source hands on an event: the queue's ``put``.
Emit = Callable[[Event], None]


class SourceMetrics(Protocol):
    """What a source reports about its requests, watches and the objects it read."""

    def heartbeat(self, loop: str) -> None: ...

    def watch_started(self, reason: str, resource: str) -> None: ...

    def request_failed(self, reason: str, resource: str) -> None: ...

    def relisted(self, seconds: float | None, resource: str) -> None: ...

    def skipped(self, reason: str, resource: str) -> None: ...

    def progressed(self, resource: str) -> None: ...


class QueueMetrics(Protocol):
    def event_added(self, event_type: str) -> None: ...

    def event_taken(self, waited_seconds: float) -> None: ...


class _NoQueueMetrics:
    def event_added(self, event_type: str) -> None:
        pass

    def event_taken(self, waited_seconds: float) -> None:
        pass


NO_QUEUE_METRICS: QueueMetrics = _NoQueueMetrics()


class HandlerMetrics(Protocol):
    def heartbeat(self, loop: str) -> None: ...

    def event_handled(self, seconds: float, error_type: str | None = None) -> None: ...

    def pod_problem(self, subject: str, reason: str) -> None: ...


class ExportMetrics(Protocol):
    def heartbeat(self, loop: str) -> None: ...

    def export_finished(self, ok: bool, seconds: float, reason: str = "success", rejected_points: int = 0) -> None: ...
