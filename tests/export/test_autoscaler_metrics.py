"""The verdict's series: what each Verdict turns into, on /metrics and in the OTLP request alike.

Verdicts are built by hand here (the rendering under test, not the model); ``test_golden.py`` and the collector
tests run the real verdict of a snapshot through the same path.
"""

from __future__ import annotations

import msgspec
from opentelemetry.sdk.metrics.export import MetricsData
from prometheus_client.parser import text_string_to_metric_families

from agent.export.metrics import (AUTOSCALER_BLOCKING_PODS, AUTOSCALER_CANDIDATE, AUTOSCALER_NODE_UTILIZATION,
                                  AUTOSCALER_STATE, AUTOSCALER_THRESHOLD, AUTOSCALER_UTILIZATION, GAUGES,
                                  POD_BLOCKING, state_points, verdict_points)
from agent.model.scale_down import (ALLOCATABLE_UNUSABLE, NO_NODE, NOT_ENOUGH_PDB, NOT_REPLICATED, REASONS,
                                    SCALE_DOWN_DISABLED, STATES, UNDERUTILIZED, Blocker, Utilization, Verdict)
from agent.report.autoscaler import headline

AUTOSCALER_METRICS = {AUTOSCALER_UTILIZATION, AUTOSCALER_NODE_UTILIZATION, AUTOSCALER_THRESHOLD, AUTOSCALER_STATE,
                      AUTOSCALER_CANDIDATE, AUTOSCALER_BLOCKING_PODS, POD_BLOCKING}


def blocker(name: str, reason: str, namespace: str = "default") -> Blocker:
    return Blocker(uid=f"uid-{name}", namespace=namespace, name=name, reason=reason, detail=f"{name} detail")


def verdict(state: str = UNDERUTILIZED, blockers: tuple[Blocker, ...] = (), gpu: float | None = None,
            known: bool = True) -> Verdict:
    if not known:
        utilization = Utilization(cpu=None, memory=None)
    elif gpu is not None:
        utilization = Utilization(cpu=0.9, memory=0.8, gpu=gpu, value=gpu, resource="gpu")
    else:
        utilization = Utilization(cpu=0.25, memory=0.375, value=0.375, resource="memory")
    return Verdict(node="node-a", state=state, utilization=utilization, threshold=0.5, blockers=blockers)


def points(v: Verdict) -> dict[tuple[str, frozenset], float]:
    return {(p.metric, frozenset(p.attributes.items())): p.value for p in verdict_points(v)}


def test_an_underutilized_node_that_two_pods_block():
    v = verdict(blockers=(blocker("lonely", NOT_REPLICATED), blocker("guarded", NOT_ENOUGH_PDB, "db")))
    got = points(v)
    expected = {
        (AUTOSCALER_UTILIZATION, frozenset({("resource", "cpu")})): 0.25,
        (AUTOSCALER_UTILIZATION, frozenset({("resource", "memory")})): 0.375,
        (AUTOSCALER_NODE_UTILIZATION, frozenset({("resource", "memory")})): 0.375,
        (AUTOSCALER_THRESHOLD, frozenset()): 0.5,
        (AUTOSCALER_CANDIDATE, frozenset()): 0,  # underutilized, but blocked
        **{(AUTOSCALER_STATE, frozenset({("state", s)})): int(s == UNDERUTILIZED) for s in STATES},
        **{(AUTOSCALER_BLOCKING_PODS, frozenset({("reason", r)})): {NOT_REPLICATED: 1, NOT_ENOUGH_PDB: 1}.get(r, 0)
           for r in REASONS},
        (POD_BLOCKING, frozenset({("k8s.namespace.name", "default"), ("k8s.pod.name", "lonely"),
                                  ("k8s.pod.uid", "uid-lonely"), ("reason", NOT_REPLICATED)})): 1,
        (POD_BLOCKING, frozenset({("k8s.namespace.name", "db"), ("k8s.pod.name", "guarded"),
                                  ("k8s.pod.uid", "uid-guarded"), ("reason", NOT_ENOUGH_PDB)})): 1,
    }
    assert got == expected


def test_candidate_only_when_underutilized_and_unblocked():
    assert points(verdict())[(AUTOSCALER_CANDIDATE, frozenset())] == 1
    disabled = points(verdict(SCALE_DOWN_DISABLED))
    assert disabled[(AUTOSCALER_CANDIDATE, frozenset())] == 0
    assert disabled[(AUTOSCALER_STATE, frozenset({("state", SCALE_DOWN_DISABLED)}))] == 1


def test_a_pod_that_stops_blocking_has_no_series_and_its_reason_reads_zero():
    before = points(verdict(blockers=(blocker("lonely", NOT_REPLICATED),)))
    after = points(verdict())
    assert [k for k in before if k[0] == POD_BLOCKING] and not [k for k in after if k[0] == POD_BLOCKING]
    assert after[(AUTOSCALER_BLOCKING_PODS, frozenset({("reason", NOT_REPLICATED)}))] == 0
    assert {k for k in before if k[0] != POD_BLOCKING} == set(after)  # every other series stays


def test_without_the_node_utilization_is_absent_and_the_state_unknown():
    got = points(verdict(NO_NODE, known=False))
    assert not [k for k in got if k[0] in (AUTOSCALER_UTILIZATION, AUTOSCALER_NODE_UTILIZATION)]
    assert got[(AUTOSCALER_STATE, frozenset({("state", NO_NODE)}))] == 1
    assert sum(v for k, v in got.items() if k[0] == AUTOSCALER_STATE) == 1


def test_an_unusable_allocatable_is_exported_and_told_apart_from_an_unknown_node():
    got = points(verdict(ALLOCATABLE_UNUSABLE, known=False))
    assert got[(AUTOSCALER_STATE, frozenset({("state", ALLOCATABLE_UNUSABLE)}))] == 1
    assert got[(AUTOSCALER_STATE, frozenset({("state", NO_NODE)}))] == 0
    assert "allocatable unusable" in headline(verdict(ALLOCATABLE_UNUSABLE, known=False))
    assert "no Node object" in headline(verdict(NO_NODE, known=False))


def test_a_gpu_node_is_judged_by_its_gpu():
    got = points(verdict(gpu=0.2))
    assert got[(AUTOSCALER_UTILIZATION, frozenset({("resource", "gpu")}))] == 0.2
    assert got[(AUTOSCALER_NODE_UTILIZATION, frozenset({("resource", "gpu")}))] == 0.2


def test_state_points_carry_the_verdict_and_every_name_is_in_the_table():
    v = verdict(blockers=(blocker("lonely", NOT_REPLICATED),))
    names = {p.metric for p in state_points((), None, v)}
    assert names == AUTOSCALER_METRICS and names <= set(GAUGES)
    assert not list(state_points((), None, None))


class _Frozen:
    def __init__(self, node) -> None:
        self._node = node

    def snapshot(self):
        return self._node


class _At:
    """An empty node's snapshot whose verdict is ``v``, recording when it was asked for."""

    def __init__(self, v: Verdict) -> None:
        from agent.pipeline.state import NodeSnapshot

        self._snapshot = NodeSnapshot("node-a", (), None, None, synced=True, node_listed=True)
        self._verdict, self.asked = v, []

    def __getattr__(self, name: str):
        return getattr(self._snapshot, name)

    def verdict(self, now: float) -> Verdict:
        self.asked.append(now)
        return self._verdict


def test_both_paths_judge_at_the_clock_they_are_given_once_per_export():
    from agent.export.otlp.encode import RequestBuilder
    from agent.export.prometheus.exposition import render_metrics
    from agent.telemetry.stats import RuntimeStats

    v = verdict(blockers=(blocker("lonely", NOT_REPLICATED),))
    node = _At(v)
    stats = RuntimeStats()
    text = render_metrics(node, stats.snapshot(), 1_700_000_123.5).decode()
    assert node.asked == [1_700_000_123.5]
    samples = {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text)
               for s in f.samples if s.name in AUTOSCALER_METRICS}
    assert samples[(POD_BLOCKING, frozenset({("k8s_node_name", "node-a"), ("k8s_namespace_name", "default"),
                                             ("k8s_pod_name", "lonely"), ("k8s_pod_uid", "uid-lonely"),
                                             ("reason", NOT_REPLICATED)}))] == 1
    assert len(samples) == len(points(v))

    node.asked.clear()
    builder = RequestBuilder(_Frozen(node), stats, {"k8s.node.name": "node-a"}, "0",
                             wall_ns=iter((1, 1_700_000_200 * 10**9)).__next__)
    request, _ = builder.build(MetricsData(resource_metrics=[]))
    assert node.asked == [1_700_000_200.0]
    exported = {m.name: len(m.gauge.data_points) for rm in request.resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics if m.name in AUTOSCALER_METRICS}
    assert exported[AUTOSCALER_STATE] == len(STATES) and exported[AUTOSCALER_BLOCKING_PODS] == len(REASONS)
    assert exported[POD_BLOCKING] == 1


def test_blocking_counts_and_candidacy_are_one_computation_for_metrics_json_text_and_page():
    """The metric, explain's JSON, the text answer and the page read the counts and the candidacy from the Verdict
    (Verdict.blocking_counts, Verdict.candidate), so none can count differently."""
    from agent.debug.page import verdict_section
    from agent.report.autoscaler import verdict_lines
    from agent.report.views import verdict_report

    v = verdict(blockers=(blocker("b", NOT_REPLICATED), blocker("c", NOT_ENOUGH_PDB), blocker("a", NOT_REPLICATED)))
    counts = v.blocking_counts()
    assert list(counts) == list(REASONS) and counts[NOT_REPLICATED] == 2 and counts[NOT_ENOUGH_PDB] == 1
    assert sum(counts.values()) == 3
    got = points(v)
    assert {r: got[(AUTOSCALER_BLOCKING_PODS, frozenset({("reason", r)}))] for r in REASONS} == counts
    assert verdict_report(v)["blocking_pods"] == counts
    assert "BLOCKING  3 pods: not_replicated 2, not_enough_pdb 1" in "\n".join(verdict_lines(v, width=None))
    assert not v.candidate and verdict_report(v)["scale_down_candidate"] is False
    assert got[(AUTOSCALER_CANDIDATE, frozenset())] == 0 and "class=candidate" not in verdict_section(v)
    free = verdict()
    assert free.candidate and verdict_report(free)["scale_down_candidate"] is True
    assert points(free)[(AUTOSCALER_CANDIDATE, frozenset())] == 1 and "class=candidate" in verdict_section(free)


def test_pdb_risks_reach_the_json_and_the_text():
    from agent.model.scale_down import PdbRisk
    from agent.report.autoscaler import verdict_lines
    from agent.report.views import verdict_report

    v = msgspec.structs.replace(verdict(), pdb_risks=(PdbRisk(namespace="ns", name="web", disruptions_allowed=1,
                                                              pods=3),))
    assert verdict_report(v)["pdb_risks"] == [{"namespace": "ns", "name": "web", "disruptions_allowed": 1, "pods": 3}]
    text = "\n".join(verdict_lines(v, width=None))
    assert "RISKY  PodDisruptionBudget ns/web allows 1 disruption and covers 3 of the node's pods" in text
    assert v.candidate  # a risk does not block
    from agent.debug.page import verdict_section

    assert "PodDisruptionBudget ns/web allows 1 and covers 3 of the node's pods" in verdict_section(v)
    assert "autoscaler-pdb-risks" not in verdict_section(verdict())
