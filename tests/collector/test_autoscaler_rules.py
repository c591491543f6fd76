"""The shipped autoscaler rules and alert on the real Prometheus 3's rule engine (``promtool test rules``).

The fast way to prove what takes an hour on a real Prometheus: ``NodeUnderutilizedButBlocked`` (``for: 1h``)
fires after an hour of a node that is a scale-down candidate but not removable, not before; not for a removable
candidate, nor for a blocked node that is busy (no candidate); its hour starts again when the blockers go; its
summary names the node and the reasons with their counts. The recording rules give one value per node whichever resource decides, and
a blocking pod's series that stops is not counted after 45 s. Input series are what the agent pushes
(docs/metrics.md), every 15 s. ``test_e2e_collector.py`` checks the same rules on series that went through the
real Collector.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from agent.model.scale_down import AUTOSCALER_CRASH, NOT_UNDERUTILIZED, REASONS, STATES, UNDERUTILIZED
from testkit.shipped_queries import RULES

pytestmark = pytest.mark.collector  # promtool comes with the Prometheus 3 build (components.gotools)

STEP = "15s"  # the agent's default export interval
HOURS = 2 * 240  # samples in two hours at 15 s


def _state(node: str, current: str) -> list[dict]:
    """The state series as the agent exports them: every state, 1 for the current one."""
    return [{"series": f'node_requests_node_autoscaler_state{{k8s_node_name="{node}",state="{s}"}}',
             "values": f"{int(s == current)}x{HOURS}"} for s in STATES]


def _removal(node: str, candidate: str, removable: str) -> list[dict]:
    """The candidate and removable gauges, in promtool's expanding notation."""
    return [{"series": f'node_requests_node_autoscaler_scale_down_candidate{{k8s_node_name="{node}"}}',
             "values": candidate},
            {"series": f'node_requests_node_autoscaler_removable{{k8s_node_name="{node}"}}', "values": removable}]


def _blocking(node: str, counts: dict[str, str]) -> list[dict]:
    """Every reason always present; ``counts`` gives promtool's expanding notation for some, 0 for the rest."""
    return [{"series": f'node_requests_node_autoscaler_blocking_pods{{k8s_node_name="{node}",reason="{r}"}}',
             "values": counts.get(r, f"0x{HOURS}")} for r in REASONS]


def _one_sample(rule: str, node: str, at: str, value: float) -> dict:
    """A promtool expression test: recording rule ``rule`` holds exactly one sample, ``value`` for ``node`` (the
    selector's text, e.g. ``k8s_node_name="a"``), at ``at``."""
    return {"expr": rule, "eval_time": at, "exp_samples": [{"labels": f"{rule}{{{node}}}", "value": value}]}


def _run(tmp_path, tests: list[dict]) -> subprocess.CompletedProcess:
    from components.gotools import tool_bin

    (tmp_path / "rules.yaml").write_text(RULES.read_text())
    spec = tmp_path / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests},
                                   sort_keys=False))
    promtool = tool_bin("prometheus") / "promtool"
    return subprocess.run([str(promtool), "test", "rules", str(spec)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)


def test_underutilized_and_blocked_fires_after_an_hour_naming_node_and_reasons(tmp_path):
    summary = ("{node} has been a scale-down candidate (underutilized) for an hour, but pods block its removal: "
               "{reasons}")
    always, never = f"1x{HOURS}", f"0x{HOURS}"
    series = [
        # blocked: a candidate for two hours, not removable: 2 pods not replicated and 1 with local storage
        *_state("blocked", UNDERUTILIZED), *_removal("blocked", always, never),
        *_blocking("blocked", {"not_replicated": f"2x{HOURS}", "local_storage": f"1x{HOURS}"}),
        # free: a candidate nothing blocks (removable): the autoscaler may remove it, nothing to alert on
        *_state("free", UNDERUTILIZED), *_removal("free", always, always), *_blocking("free", {}),
        # busy: blocked but not underutilized (no candidate): the blockers do not matter yet
        *_state("busy", NOT_UNDERUTILIZED), *_removal("busy", never, never),
        *_blocking("busy", {"not_safe_to_evict": f"1x{HOURS}"}),
        # cleared: blocked for 40 min, removable for 10, blocked again: its hour starts over at 50 min
        *_state("cleared", UNDERUTILIZED), *_removal("cleared", always, "0x160 1x40 0x280"),
        *_blocking("cleared", {"unmovable_kube_system": "1x160 0x40 1x280"}),
    ]
    alert = "NodeUnderutilizedButBlocked"
    expected = {"severity": "info"}
    tests = [{
        "interval": STEP,
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "59m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "61m", "alertname": alert, "exp_alerts": [{
                "exp_labels": {**expected, "k8s_node_name": "blocked"},
                "exp_annotations": {"summary": summary.format(node="blocked",
                                                              reasons="local_storage 1, not_replicated 2")}}]},
            {"eval_time": "110m", "alertname": alert, "exp_alerts": [{
                "exp_labels": {**expected, "k8s_node_name": "blocked"},
                "exp_annotations": {"summary": summary.format(node="blocked",
                                                              reasons="local_storage 1, not_replicated 2")}}]},
            {"eval_time": "112m", "alertname": alert, "exp_alerts": [
                {"exp_labels": {**expected, "k8s_node_name": "blocked"},
                 "exp_annotations": {"summary": summary.format(node="blocked",
                                                               reasons="local_storage 1, not_replicated 2")}},
                {"exp_labels": {**expected, "k8s_node_name": "cleared"},
                 "exp_annotations": {"summary": summary.format(node="cleared", reasons="unmovable_kube_system 1")}},
            ]},
        ],
        "promql_expr_test": [
            {"expr": "node:node_requests_node_autoscaler_blocking_pods:sum", "eval_time": "10m", "exp_samples": [
                {"labels": f'node:node_requests_node_autoscaler_blocking_pods:sum{{k8s_node_name="{n}"}}', "value": v}
                for n, v in (("blocked", 3), ("busy", 1), ("cleared", 1), ("free", 0))]},
            {"expr": 'count by (state) (node:node_requests_node_autoscaler_state:current)', "eval_time": "10m",
             "exp_samples": [{"labels": f'{{state="{UNDERUTILIZED}"}}', "value": 3},
                             {"labels": f'{{state="{NOT_UNDERUTILIZED}"}}', "value": 1}]},
        ],
    }]
    result = _run(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_one_utilization_per_node_when_the_deciding_resource_changes_and_ended_series_leave(tmp_path):
    """cpu decides until 5 min, then memory: both series exist for 45 s after the switch (a pushed series is
    never marked stale); the recording rule still has one value per node. A reason whose count drops to 0 at
    5 min is not counted 45 s later. The candidate and removable gauges pass through."""
    node = 'k8s_node_name="n"'
    tests = [{
        "interval": STEP,
        "input_series": [
            {"series": f'node_requests_node_autoscaler_node_utilization{{{node},resource="cpu"}}', "values": "0.4x20"},
            {"series": f'node_requests_node_autoscaler_node_utilization{{{node},resource="memory"}}',
             "values": "_x20 0.45x40"},
            {"series": f'node_requests_node_autoscaler_scale_down_candidate{{{node}}}', "values": "0x20 1x40"},
            {"series": f'node_requests_node_autoscaler_removable{{{node}}}', "values": "0x20 1x40"},
            {"series": f'node_requests_node_autoscaler_blocking_pods{{{node},reason="not_replicated"}}',
             "values": "1x20 0x40"},
        ],
        "promql_expr_test": [
            _one_sample("node:node_requests_node_autoscaler_node_utilization:max", node, "4m", 0.4),
            _one_sample("node:node_requests_node_autoscaler_node_utilization:max", node, "5m30s", 0.45),
            _one_sample("node:node_requests_node_autoscaler_node_utilization:max", node, "8m", 0.45),
            _one_sample("node:node_requests_node_autoscaler_scale_down_candidate:max", node, "8m", 1),
            _one_sample("node:node_requests_node_autoscaler_removable:max", node, "8m", 1),
            _one_sample("node:node_requests_node_autoscaler_blocking_pods:sum", node, "8m", 0),
        ],
    }]
    result = _run(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_per_vm_rule_keeps_the_node_so_one_nodes_agent_cannot_add_to_anothers_vm(tmp_path):
    """Issue 29: namespace and VM name are the sender's; only the node is the Collector's (from the token). A rogue
    agent on node-r writes a series with the namespace and name of a VM running on node-a: the recording rule keeps
    it apart, so the real VM's value stays the real one. A live migration (source on node-a, target on node-b) still
    counts the VM once, on the source's node."""
    def vm(node: str, pod: str, role: str, value: float) -> dict:
        return {"series": f'vm_cpu_usage{{k8s_node_name="{node}",k8s_namespace_name="tenant",k8s_pod_name="{pod}",'
                          f'k8s_pod_uid="uid-{pod}",neon_vm_name="db",neon_vm_migration_role="{role}"}}',
                "values": f"{value}x20"}

    rule = "vm:vm_cpu_usage:once"
    tests = [{
        "interval": STEP,
        "input_series": [vm("node-a", "db-source", "source", 2), vm("node-b", "db-target", "target", 2),
                         vm("node-r", "forged", "none", 50)],
        "promql_expr_test": [{"expr": rule, "eval_time": "2m", "exp_samples": [
            {"labels": f'{rule}{{k8s_node_name="node-a",k8s_namespace_name="tenant",neon_vm_name="db"}}', "value": 2},
            {"labels": f'{rule}{{k8s_node_name="node-r",k8s_namespace_name="tenant",neon_vm_name="db"}}', "value": 50},
        ]}],
    }]
    result = _run(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr
    # Every recording rule whose input is a per-VM series groups by the node.
    groups = yaml.safe_load(RULES.read_text())["groups"]
    per_vm = [r for g in groups for r in g["rules"] if "record" in r and "neon_vm_name" in r["expr"]]
    assert per_vm and all("k8s_node_name" in r["expr"].split("(")[1] for r in per_vm), per_vm


def test_points_the_collector_drops_for_a_node_alert_after_ten_minutes(tmp_path):
    """Issue 29: beyond a node's pod budget (or with a wrong type) nodeidentity drops points; not silently. The
    Collector's counter (as tests/collector/test_collector_write_path.py reads it) rising for 10 min fires the alert
    naming the node and the reason; a node whose counter stays flat does not."""
    alert = "OtelCollectorDroppingAgentPoints"
    counter = 'otelcol_nodeidentity_dropped_points{{instance="collector-0:8888",job="otel-collector",node="{}",reason="{}"}}'
    tests = [{
        "interval": STEP,
        "input_series": [
            {"series": counter.format("big-node", "pod_budget"), "values": f"0+80x{HOURS}"},  # 80 more each push
            {"series": counter.format("quiet-node", "pod_budget"), "values": f"5x{HOURS}"},  # dropped once, long ago
        ],
        "alert_rule_test": [
            {"eval_time": "9m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "12m", "alertname": alert, "exp_alerts": [{
                "exp_labels": {"severity": "warning", "node": "big-node", "reason": "pod_budget"},
                "exp_annotations": {"summary": "The Collector drops pod_budget points of node big-node: its pods or "
                                               "series are not all in Prometheus"}}]},
        ],
    }]
    result = _run(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_pod_the_autoscaler_would_crash_on_fires_after_a_minute_and_resolves_when_it_goes(tmp_path):
    """crashing: autoscaler_crash from 5 min to 15 min (the pod with the zero factor deleted then); fine: never."""
    summary = ("{node} holds a pod whose vm.neon.tech/overcommit has a factor of 0: neon's cluster-autoscaler divides "
               "by zero on it and stops scaling the cluster (explain --live --node {node} names the pod)")
    crash = [{"series": f'node_requests_node_autoscaler_state{{k8s_node_name="crashing",state="{s}"}}',
              "values": "1x20 0x40 1x100" if s == UNDERUTILIZED else
                        ("0x20 1x40 0x100" if s == AUTOSCALER_CRASH else "0x160")} for s in STATES]
    alert = "NodeAutoscalerWouldCrash"
    firing = [{"exp_labels": {"severity": "critical", "k8s_node_name": "crashing"},
               "exp_annotations": {"summary": summary.format(node="crashing")}}]
    tests = [{
        "interval": STEP,
        "input_series": [*crash, *_state("fine", UNDERUTILIZED)],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "7m", "alertname": alert, "exp_alerts": firing},
            {"eval_time": "14m", "alertname": alert, "exp_alerts": firing},
            {"eval_time": "17m", "alertname": alert, "exp_alerts": []},
        ],
    }]
    result = _run(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_pushes_the_admission_check_refuses_alert_by_node_and_reason_or_as_foreign_tokens(tmp_path):
    """Issue 38: refusals before a push is read are counted by reason and node (as
    tests/collector/test_collector_write_path.py reads them off the real Collector). An agent token's pushes refused
    for 10 min alert naming the node and reason; "busy" (capacity, not the sender) does not; foreign tokens alert
    on their own."""
    counter = ('otelcol_admission_refused_requests{{instance="collector-0:8888",job="otel-collector",'
               'node="{}",reason="{}"}}')
    tests = [{
        "interval": STEP,
        "input_series": [
            {"series": counter.format("rogue-node", "items"), "values": f"0+4x{HOURS}"},
            {"series": counter.format("busy-node", "busy"), "values": f"0+4x{HOURS}"},
            {"series": counter.format("", "subject"), "values": f"0+1x{HOURS}"},
        ],
        "alert_rule_test": [
            {"eval_time": "9m", "alertname": "OtelCollectorRefusingAgentPushes", "exp_alerts": []},
            {"eval_time": "12m", "alertname": "OtelCollectorRefusingAgentPushes", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "node": "rogue-node", "reason": "items"},
                "exp_annotations": {"summary": "The Collector refuses node rogue-node's pushes before reading them "
                                               "(items): more than an honest agent sends"}}]},
            {"eval_time": "12m", "alertname": "OtelCollectorRefusingForeignTokens", "exp_alerts": [{
                "exp_labels": {"severity": "warning"},
                "exp_annotations": {"summary": "The Collector receives pushes with tokens that are not the agent's: "
                                               "is its NetworkPolicy enforced?"}}]},
        ],
    }]
    result = _run(tmp_path, tests)
    assert result.returncode == 0, result.stdout + result.stderr
