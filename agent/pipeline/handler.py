"""Applies source events to the node state: the only writer of NodeState.

One method per event type, chosen by the event's type. It also owns the
request rules in force: a version reading that changes them re-evaluates
every pod, so no value mixes two releases' arithmetic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from agent.model.pdb import PdbRecord
from agent.model.pod import PODS
from agent.model.rules import rules_for
from agent.model.valuation import SOURCE_POD_REQUESTS, PodValue, evaluate, reevaluate, retained
from agent.pipeline.events import (
    ADDED,
    Bookmark,
    Event,
    NodeChanged,
    NodeDeleted,
    NodeListed,
    PdbChanged,
    PdbDeleted,
    PdbsListed,
    PodChanged,
    PodDeleted,
    PodsListed,
    UsageSampled,
    VersionRead,
)
from agent.pipeline.interfaces import HANDLER_LOOP, HandlerMetrics
from agent.pipeline.queue import EventQueue
from agent.pipeline.state import DEFAULT_KUBERNETES, KubernetesInfo, NodeState

__all__ = ["Handler"]

log = logging.getLogger(__name__)


class Handler:
    def __init__(self, *, state: NodeState, metrics: HandlerMetrics,
                 kubernetes: KubernetesInfo = DEFAULT_KUBERNETES) -> None:
        self._state = state
        self._metrics = metrics
        self._rules = kubernetes.rules
        state.set_kubernetes(kubernetes)
        self._handlers: dict[type, Callable] = {
            PodChanged: self._pod_changed,
            PodDeleted: self._pod_deleted,
            PodsListed: self._pods_listed,
            NodeChanged: self._node_changed,
            NodeDeleted: self._node_deleted,
            NodeListed: self._node_listed,
            PdbChanged: self._pdb_changed,
            PdbDeleted: self._pdb_deleted,
            PdbsListed: self._pdbs_listed,
            Bookmark: self._bookmark,
            UsageSampled: self._usage_sampled,
            VersionRead: self._version_read,
        }

    def handle(self, event: Event) -> None:
        try:
            handler = self._handlers[event.__class__]
        except KeyError:
            raise TypeError(f"no handler for {type(event).__name__}") from None
        handler(event)

    def _pod_changed(self, event: PodChanged) -> None:
        self._state.observed(event.resource_version)
        pod = event.pod
        previous = self._state.get(pod.uid)
        value = retained(reevaluate(pod, previous, self._rules))
        for gone in self._state.upsert(value):
            if gone.uid != value.uid:
                log.info("pod %s/%s is now uid %s; dropping its old uid %s (its DELETED event was missed)",
                         value.namespace, value.name, value.uid, gone.uid, extra=value.identity)
        self._report_problems(value, previous)

    def _pod_deleted(self, event: PodDeleted) -> None:
        self._state.observed(event.resource_version)
        self._state.remove(event.pod.uid)

    def _pods_listed(self, event: PodsListed) -> None:
        self._state.observed(event.resource_version)
        known = {v.uid: v for v in self._state.pods()}
        values = [retained(reevaluate(p, known.get(p.uid), self._rules)) for p in event.pods]
        removed = self._state.replace(values)
        for value in values:
            self._report_problems(value, known.get(value.uid))
        if removed:
            log.info("relist removed %d pod(s) deleted while the watch was down", len(removed))

    def _bookmark(self, event: Bookmark) -> None:
        if event.resource == PODS:
            self._state.observed(event.resource_version)

    def _node_changed(self, event: NodeChanged) -> None:
        self._state.set_node(event.node)

    def _node_deleted(self, event: NodeDeleted) -> None:
        log.info("node %s was deleted; its capacity series stop until it returns", self._state.node_name)
        self._state.set_node(None)

    def _node_listed(self, event: NodeListed) -> None:
        self._state.set_node(event.node, listed=True)

    def _pdb_changed(self, event: PdbChanged) -> None:
        was_over = self._state.pdbs_over_limit
        previous = self._state.upsert_pdb(event.pdb, added=event.type == ADDED)
        if not was_over:
            if self._state.pdbs_over_limit:
                self._over_limit()
            else:
                self._report_pdb(event.pdb, previous)

    def _pdb_deleted(self, event: PdbDeleted) -> None:
        self._state.remove_pdb(event.pdb.uid)

    def _pdbs_listed(self, event: PdbsListed) -> None:
        was_over = self._state.pdbs_over_limit
        known = {p.uid: p for p in self._state.pdbs() or ()}
        self._state.replace_pdbs(event.pdbs, event.more)
        if event.more:
            if not was_over:
                self._over_limit()
            return
        if was_over:
            log.info("%d PodDisruptionBudgets, within the limit again: the verdict counts them", len(event.pdbs))
        for pdb in event.pdbs:
            self._report_pdb(pdb, known.get(pdb.uid))

    def _over_limit(self) -> None:
        log.warning("the cluster holds %d PodDisruptionBudgets, more than the %s the agent keeps (--max-pdbs): "
                    "kube-system pods are reported as blocking unless a PDB covers them, and no pod as blocked by "
                    "a PDB, until there are that many or fewer", self._state.pdbs_over_limit, self._state.max_pdbs)

    @staticmethod
    def _report_pdb(pdb: PdbRecord, previous: PdbRecord | None) -> None:
        """A PDB that brings new problems, once per change (its malformed selector is read as documented)."""
        if pdb.problems and (previous is None or previous.problems != pdb.problems):
            log.warning("PodDisruptionBudget %s/%s: %s", pdb.namespace, pdb.name, "; ".join(pdb.problems))

    def _usage_sampled(self, event: UsageSampled) -> None:
        self._state.set_usage(event.usage)

    def _version_read(self, event: VersionRead) -> None:
        """Follow the API server's release; said once per change of version, every pod re-evaluated when the rules
        change."""
        version = event.version
        current = self._state.kubernetes
        rules, warning = rules_for(version)
        if version.text != current.server_version:
            log.info("Kubernetes API server %s: pod requests follow the Kubernetes %s rules", version, rules)
            if warning:
                log.warning("%s", warning)
        self._state.set_kubernetes(KubernetesInfo(rules, version.text, "apiserver", warning))
        if rules is not self._rules:
            previous_rules, self._rules = self._rules, rules
            changed = 0
            for previous in self._state.pods():
                if previous.record is None:
                    continue
                value = retained(evaluate(previous.record, rules))
                self._state.upsert(value)
                self._report_problems(value, previous)
                changed += (value.cpu, value.memory) != (previous.cpu, previous.memory)
            log.info("re-evaluated every pod with the %s rules (were %s): %d value(s) changed", rules,
                     previous_rules, changed)

    def _report_problems(self, value: PodValue, previous: PodValue | None) -> None:
        """Log and count once per pod change that brings new problems.

        Status-only updates of a pod that keeps the same bad annotation
        repeat nothing, so a broken pod costs one line, not one per event.
        """
        if not value.problems:
            return
        if previous is not None and previous.problems == value.problems:
            return
        log.warning("pod %s/%s (uid %s): %s; exporting %s", value.namespace, value.name, value.uid,
                    "; ".join(str(p) for p in value.problems),
                    "its pod requests" if value.source == SOURCE_POD_REQUESTS else "its VM usage", extra=value.identity)
        for p in value.problems:
            self._metrics.pod_problem(p.subject, p.reason)

    def run(self, queue: EventQueue, stop: threading.Event, poll: float = 5.0, gather: float = 0.002) -> None:
        """Handle events until ``stop`` is set and the queue is drained (``queue.wake()`` ends the wait at once).

        An idle handler wakes once per ``poll`` (its liveness heartbeat), not more. After waiting on an empty
        queue it lets the burst that woke it gather for ``gather`` seconds: the source then hands over a burst
        at one wake-up, not a thread switch per event (which was a seventh of an event's CPU time).
        """
        while True:
            self._metrics.heartbeat(HANDLER_LOOP)
            waited = queue.qsize() == 0
            # Once stopping, never wait: what is queued (also behind the wake-up) is handled, then the loop ends.
            item = queue.get(timeout=0 if stop.is_set() else poll)
            if item is None:
                if stop.is_set() and queue.qsize() == 0:
                    return
                continue
            if waited and gather:
                time.sleep(gather)
            started = time.perf_counter()
            error = None
            try:
                self.handle(item.event)
            except Exception as exc:  # one bad event must not stop the agent
                error = type(exc).__name__
                log.exception("handling %s event failed", item.event.type)
            finally:
                self._metrics.event_handled(time.perf_counter() - started, error)
                queue.task_done()
