"""End to end through the pipeline users deploy: agent -> OTLP -> the built Collector -> Prometheus -> PromQL.

The Collector runs otel-config/collector.yaml unmodified; only its listen
addresses come from the environment variables it reads. Prometheus scrapes it
with otel-config/prometheus/scrape.yaml (Kubernetes discovery replaced by the
Collector's loopback address, intervals shortened to 1 s) and loads rules.yaml.
The agent is the real command, against the fake API server; values are compared
with what the agent itself says it exports (/debug/pods, /debug/node).
Each test watches its own node name, so tests share one Collector and Prometheus.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
import yaml

from agent.model.scale_down import STATES, UNDERUTILIZED

from testkit.agent_process import AgentProcess, otlp_env
from testkit.cli import run
from testkit.collector import SHIPPED_CONFIG, Collector, Prometheus
from testkit.factory import container, node, pod, vm_pod
from testkit.repo import REPO
from testkit.shipped_queries import alerts, dashboard_queries, dashboard_variables, recording_rules
from testkit.waiting import wait_until

pytestmark = pytest.mark.collector

SCRAPE_INTERVAL = 1.0  # the tests' Prometheus (prometheus_config's interval)
EXPORT_INTERVAL = 1.0  # the tests' agents
# Labels of a per-pod series in Prometheus (the pull variant these tests run, without the token check and
# nodeidentity, which tests/collector/test_collector_trust.py runs): the point's attributes, the one named resource
# attribute (k8s.node.name), the scope as the prometheus exporter adds it, and job/instance.
POD_LABELS = {"__name__", "job", "instance", "k8s_namespace_name", "k8s_pod_name", "k8s_pod_uid", "source",
              "k8s_node_name", "otel_scope_name", "otel_scope_version"}
OTLP_ENDPOINTS = {"http/protobuf": "otlp_http_endpoint", "grpc": "otlp_grpc_endpoint"}


def unique(prefix: str) -> str:
    """A node name no other test of this session uses."""
    return f"{prefix}-{time.time_ns() % 10**10}"


def duration(text: str) -> float:
    """A Collector duration (``45s``, ``1m``, ``100ms``) in seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", text)
    assert m, text
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


def shipped() -> dict:
    return yaml.safe_load(SHIPPED_CONFIG.read_text())


@pytest.fixture(scope="session")
def chain(tmp_path_factory):
    """The shipped Collector and a Prometheus scraping it with the shipped scrape config and rules."""
    work = tmp_path_factory.mktemp("chain")
    with Collector(work / "otelcol") as otelcol, Prometheus(work / "prometheus", [otelcol.prometheus_target]) as prom:
        yield otelcol, prom


def by_uid(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["metric"]["k8s_pod_uid"], []).append(row)
    return out


def value(row: dict) -> float:
    return float(row["value"][1])


def alert(prom: Prometheus, name: str, node_name: str) -> dict | None:
    """The pending or firing ``name`` alert for ``node_name``, if any."""
    return next((a for a in prom.alerts() if a["labels"].get("alertname") == name
                 and a["labels"].get("k8s_node_name") == node_name), None)


# -- 1. the shipped config on the built Collector -------------------------------------------------

def test_the_built_collector_holds_exactly_what_the_shipped_config_names(tmp_path):
    """Validated with its endpoints from the environment; the build has those components, plus remote write."""
    from components.collector import otelcol_bin

    for env in ({}, Collector(tmp_path).env()):  # the defaults (a pod) and loopback ports (these tests)
        check = subprocess.run([str(otelcol_bin()), "validate", "--config", str(SHIPPED_CONFIG)], env=env,
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stderr
    built = yaml.safe_load(subprocess.run([str(otelcol_bin()), "components"], capture_output=True, text=True,
                                          check=True, timeout=60).stdout)
    config = shipped()
    for kind in ("receivers", "processors", "exporters", "extensions"):
        assert {c["name"] for c in built[kind]} == set(config[kind]), kind
    pipeline = config["service"]["pipelines"]["metrics"]
    assert pipeline == {"receivers": ["otlp"], "processors": ["memory_limiter", "nodeidentity"],
                        "exporters": ["prometheus_remote_write"]}
    # One release: every collector module of the build at core v0.165.0 / v1.71.0 or contrib v0.165.1, plus this
    # repository's own module (nodeidentity and the admission extension: a local module, v0.0.0).
    versions = {c["module"].split()[-1] for kind in ("receivers", "processors", "exporters", "extensions")
                for c in built[kind] if not c["module"].startswith("nra.local/")}
    assert versions == {"v0.165.0", "v0.165.1"}
    deployment = yaml.safe_load_all((REPO / "otel-config" / "collector-deployment.yaml").read_text())
    image = next(d for d in deployment if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    # The distribution built from the manifest (the contrib image has no nodeidentity processor).
    dist = yaml.safe_load((REPO / "otel-config" / "builder-config.yaml").read_text())["dist"]
    assert image == f"{dist['name']}:{dist['version']}"


# -- 2. agent -> Collector -> Prometheus: names, labels, values ------------------------------------

def _node_with_pods(api, name: str) -> None:
    api.create(node(name, "8", "32Gi", allocatable_cpu="7", allocatable_memory="30Gi"), kind="nodes")
    api.create(pod("web", node=name, containers=[container("a", "250m", "256Mi")]))
    api.create(pod("batch", namespace="jobs", node=name, containers=[container("a", "500m", "1Gi")],
                   init_containers=[container("init", "2", "512Mi")]))
    api.create(pod("finished", node=name, phase="Succeeded"))  # bound, but not reported
    api.create(vm_pod("compute-1", f"vm-{name}-1", "2", "4Gi", overcommit={"cpu": "2", "memory": "1"}, node=name))
    api.create(vm_pod("compute-2", f"vm-{name}-2", "500m", "2Gi", role="source", node=name))
    api.create(vm_pod("compute-2-target", f"vm-{name}-2", "500m", "2Gi", role="target", node=name))


@pytest.mark.parametrize("protocol", list(OTLP_ENDPOINTS))
def test_every_pod_vm_and_node_number_reaches_prometheus_with_the_agents_values(protocol, chain, apiserver, tmp_path):
    otelcol, prom = chain
    name = unique(f"e2e-{protocol.split('/')[0]}")
    _node_with_pods(apiserver, name)
    env = otlp_env(getattr(otelcol, OTLP_ENDPOINTS[protocol]), protocol)
    with AgentProcess(apiserver, tmp_path / "agent", name, env, EXPORT_INTERVAL) as agent:
        pods = agent.pods()
        assert len(pods) == 5  # "finished" is not reported
        here = f'k8s_node_name="{name}"'
        wait_until(lambda: set(by_uid(prom.query(f"pod_or_vm_cpu_requests{{{here}}}"))) == set(pods), timeout=30,
                   message="every reported pod in Prometheus")
        for metric, key in (("pod_or_vm_cpu_requests", "cpu_cores"), ("pod_or_vm_mem_requests", "memory_bytes")):
            series = by_uid(prom.query(f"{metric}{{{here}}}"))
            assert set(series) == set(pods), metric
            for uid, rows in series.items():
                (row,) = rows  # one series per pod
                labels, expected = row["metric"], pods[uid]
                assert set(labels) == POD_LABELS, sorted(labels)
                assert (labels["__name__"], labels["k8s_namespace_name"], labels["k8s_pod_name"], labels["source"],
                        labels["instance"]) == (metric, expected["namespace"], expected["name"], expected["source"], name)
                assert value(row) == expected[key], (metric, expected["name"])

        vms = {uid: p["vm"] for uid, p in pods.items() if p["vm"]}
        assert len(vms) == 3
        for metric, key in (("vm_cpu_usage", "cpu_cores"), ("vm_mem_usage", "memory_bytes")):
            series = by_uid(prom.query(f"{metric}{{{here}}}"))
            assert set(series) == set(vms), metric
            for uid, (row,) in series.items():
                assert row["metric"]["neon_vm_name"] == vms[uid]["name"]
                assert row["metric"]["neon_vm_migration_role"] == (vms[uid]["migration_role"] or "none")
                assert value(row) == vms[uid][key]

        quantities = {"capacity", "allocatable", "scheduled", "pod_or_vm", "vm_usage", "used"}
        wait_until(lambda: {r["metric"]["quantity"] for r in prom.query(f"node_requests_node_cpu_cores{{{here}}}")}
                   == quantities, timeout=20, message="used needs two host readings")
        summary = agent.debug("node")
        for metric, key in (("node_requests_node_cpu_cores", "cpu_cores"), ("node_requests_node_memory_bytes", "memory_bytes")):
            shown = {r["metric"]["quantity"]: value(r) for r in prom.query(f"{metric}{{{here}}}")}
            assert set(shown) == set(summary[key]) == quantities
            assert {q: v for q, v in shown.items() if q != "used"} == {q: v for q, v in summary[key].items() if q != "used"}
            assert shown["used"] > 0  # host usage changes every interval: present, not compared
        ratios = {(r["metric"]["resource"], r["metric"]["ratio"]): value(r)
                  for r in prom.query(f"node_requests_node_ratio{{{here}}}")}
        expected_ratios = {(res, ratio): v for res, by in summary["ratios"].items() for ratio, v in by.items()}
        assert set(ratios) == set(expected_ratios)
        for key in (k for k in ratios if "used" not in k[1]):
            assert ratios[key] == pytest.approx(expected_ratios[key], rel=1e-12), key
        for metric, key, label in (("node_requests_node_pods_by_phase", "pods_by_phase", "phase"),
                                   ("node_requests_node_pods_by_source", "pods_by_source", "source"),
                                   ("node_requests_node_pod_slots", "pod_slots", "quantity")):
            assert {r["metric"][label]: value(r) for r in prom.query(f"{metric}{{{here}}}")} == summary[key], metric
        assert agent.exports("failure") == 0 and agent.exports("success") >= 1


def _documented_prometheus_names() -> dict[str, bool]:
    """Every name in the Prometheus-name column of docs/metrics.md's tables (histograms as their three series),
    mapped to whether the table says it has no series until something fails."""
    section = (REPO / "docs" / "metrics.md").read_text()
    names: dict[str, bool] = {}
    column = kind = None
    for line in section.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]  # \| is a pipe inside a cell
        if column is None:  # a header row
            column = next(i for i, c in enumerate(cells) if "Prometheus" in c)
            kind = cells.index("type") if "type" in cells else None
            continue
        if set(cells[0]) <= {"-"}:
            continue
        found = re.findall(r"`([a-z_:]+)`", cells[column])
        if kind is not None and cells[kind] == "histogram":
            found = [f + suffix for f in found for suffix in ("_bucket", "_sum", "_count")]
        names.update(dict.fromkeys(found, "no series until" in cells[-1]))
    return names


def test_readme_metric_tables_name_exactly_what_prometheus_shows(chain, apiserver, tmp_path):
    otelcol, prom = chain
    name = unique("names")
    _node_with_pods(apiserver, name)
    apiserver.create(pod("bad-usage", node=name, annotations={"vm.neon.tech/usage": "{not json"}))  # pod_problems_total
    with AgentProcess(apiserver, tmp_path / "agent", name, otlp_env(otelcol.otlp_http_endpoint), EXPORT_INTERVAL):
        apiserver.fail_next(1, 500)  # one failed watch: api_errors_total
        apiserver.drop_watches()
        names = _documented_prometheus_names()
        documented = set(names)
        # Counters that exist only once their failure has happened, as docs/metrics.md says of each of them.
        not_here = {n for n, until_failure in names.items() if until_failure} - {
            "node_requests_agent_pod_problems_total", "node_requests_agent_api_errors_total"}  # made to happen above

        def shown() -> set[str]:
            return prom.names(f'{{job="node-requests-agent",k8s_node_name="{name}"}}') - {"target_info"}

        try:
            wait_until(lambda: documented - not_here <= shown(), timeout=30)
        except AssertionError:
            raise AssertionError(f"in docs/metrics.md, not in Prometheus: {sorted(documented - not_here - shown())}") from None
        assert shown() <= documented, f"in Prometheus, not in docs/metrics.md: {sorted(shown() - documented)}"


# -- 3. lifecycle: deleted pods and stopped agents --------------------------------------------------

def test_a_deleted_pod_and_a_stopped_agent_leave_prometheus_within_the_stated_bound(chain, apiserver, tmp_path):
    """Bound: metric_expiration + batch timeout + one scrape + one export interval (+2 s for this machine)."""
    otelcol, prom = chain
    config = shipped()
    expiration = duration(config["exporters"]["prometheus"]["metric_expiration"])
    batch = duration(config["processors"]["batch"]["timeout"])
    bound = expiration + batch + SCRAPE_INTERVAL + EXPORT_INTERVAL + 2.0
    kept, stopped = unique("lifecycle"), unique("stopped")
    apiserver.create(pod("stays", node=kept))
    apiserver.create(pod("deleted", node=kept))
    apiserver.create(pod("alone", node=stopped))
    env = otlp_env(otelcol.otlp_http_endpoint)
    with AgentProcess(apiserver, tmp_path / "kept", kept, env, EXPORT_INTERVAL), \
            AgentProcess(apiserver, tmp_path / "stopped", stopped, env, EXPORT_INTERVAL) as leaving:
        def present(selector: str) -> bool:
            return bool(prom.query(selector))

        deleted = f'pod_or_vm_cpu_requests{{k8s_node_name="{kept}",k8s_pod_name="deleted"}}'
        stays = f'pod_or_vm_cpu_requests{{k8s_node_name="{kept}",k8s_pod_name="stays"}}'
        # What the agent sent (not rules' results or ALERTS, which carry the node label too).
        agent_series = f'{{job="node-requests-agent",k8s_node_name="{stopped}",__name__!="target_info"}}'
        wait_until(lambda: present(deleted) and present(stays) and present(agent_series), timeout=30)
        apiserver.delete("default", "deleted")
        deleted_at = time.monotonic()
        assert leaving.stop() == 0  # SIGTERM: one final export, then exit
        stopped_at = time.monotonic()
        gone: dict[str, float] = {}
        while len(gone) < 3:
            now = time.monotonic()
            assert now - deleted_at < bound + 5, f"still there: {sorted({'exporter', 'pod', 'agent'} - set(gone))}"
            if "exporter" not in gone and 'k8s_pod_name="deleted"' not in otelcol.exported_metrics():
                gone["exporter"] = now - deleted_at
            if "pod" not in gone and not present(deleted):
                gone["pod"] = now - deleted_at
            if "agent" not in gone and not present(agent_series):
                gone["agent"] = now - stopped_at
            assert present(stays), "a live pod's series vanished"
            time.sleep(0.2)
        print(f"metric_expiration {expiration:g} s, batch {batch:g} s: deleted pod gone from the exporter after "
              f"{gone['exporter']:.1f} s and from Prometheus after {gone['pod']:.1f} s; a stopped agent's series "
              f"{gone['agent']:.1f} s after it exited (bound {bound:.1f} s)")
        # metric_expiration is what governs: not sooner than it (less the export already under way) ...
        assert gone["pod"] >= expiration - EXPORT_INTERVAL - 1.0
        # ... and not later than the bound docs/operations.md states.
        assert gone["pod"] <= bound and gone["agent"] <= bound
        # The stopped agent is what NodeRequestsAgentNotExporting is about; the live one is not.
        pending = wait_until(lambda: alert(prom, "NodeRequestsAgentNotExporting", stopped), timeout=10)
        assert pending["state"] == "pending" and stopped in pending["annotations"]["summary"]
        assert alert(prom, "NodeRequestsAgentNotExporting", kept) is None


# -- 4. rules and dashboard on the real Prometheus ---------------------------------------------------

def test_every_recording_rule_and_dashboard_query_returns_this_nodes_data(chain, apiserver, tmp_path):
    otelcol, prom = chain
    name = unique("rules")
    _node_with_pods(apiserver, name)
    with AgentProcess(apiserver, tmp_path / "agent", name, otlp_env(otelcol.otlp_http_endpoint), EXPORT_INTERVAL) as agent:
        pods = agent.pods()
        vm = f"vm-{name}-2"  # migrating: source and target carry the same usage
        here = {"node:pod_or_vm_cpu_requests:sum": f'{{k8s_node_name="{name}"}}',
                "node:pod_or_vm_mem_requests:sum": f'{{k8s_node_name="{name}"}}',
                "vm:vm_cpu_usage:once": f'{{neon_vm_name="{vm}"}}',
                "node:node_requests_agent_workqueue_queue_duration_seconds:p99_5m": f'{{k8s_node_name="{name}"}}',
                **{rule: f'{{k8s_node_name="{name}"}}' for rule in (
                    "node:node_requests_node_autoscaler_node_utilization:max",
                    "node:node_requests_node_autoscaler_state:current",
                    "node:node_requests_node_autoscaler_scale_down_candidate:max",
                    "node:node_requests_node_autoscaler_removable:max",
                    "node:node_requests_node_autoscaler_blocking_pods:sum")}}
        assert set(here) == set(recording_rules())

        def recorded() -> dict[str, list[dict]]:
            return {rule: prom.query(rule + selector) for rule, selector in here.items()}

        wait_until(lambda: all(recorded().values()), timeout=30, message="every recording rule has a series")
        result = recorded()
        assert value(result["node:pod_or_vm_cpu_requests:sum"][0]) == pytest.approx(sum(p["cpu_cores"] for p in pods.values()))
        assert value(result["node:pod_or_vm_mem_requests:sum"][0]) == sum(p["memory_bytes"] for p in pods.values())
        assert value(result["vm:vm_cpu_usage:once"][0]) == 0.5  # the source only
        assert 0 <= value(result["node:node_requests_agent_workqueue_queue_duration_seconds:p99_5m"][0]) < 1
        judged = agent.debug("node")["autoscaler"]
        assert value(result["node:node_requests_node_autoscaler_node_utilization:max"][0]) == pytest.approx(
            judged["utilization"]["value"], rel=1e-12)
        (state,) = result["node:node_requests_node_autoscaler_state:current"]
        assert state["metric"]["state"] == judged["state"] and value(state) == 1
        assert value(result["node:node_requests_node_autoscaler_scale_down_candidate:max"][0]) == int(
            judged["scale_down_candidate"])
        assert value(result["node:node_requests_node_autoscaler_removable:max"][0]) == int(judged["removable"])
        assert value(result["node:node_requests_node_autoscaler_blocking_pods:sum"][0]) == len(judged["blockers"]) > 0

        queries = dashboard_queries(node=name)  # a regex that matches only this node
        assert len(queries) >= 10
        wait_until(lambda: all(prom.query(expr) for _, expr in queries), timeout=30,
                   message=f"every panel has data: {[t for t, e in queries if not prom.query(e)]}")
        for var in dashboard_variables():
            assert name in prom.label_values(var.label, var.metric), var


def test_the_autoscalers_verdict_reaches_prometheus_as_the_agent_and_explain_judge_it(chain, apiserver, tmp_path):
    """Every verdict series through the real Collector into Prometheus 3 with the values the agent's /debug/node
    holds; explain --live on the same cluster agrees; a pod that stops blocking leaves Prometheus; the alert goes
    pending (``for: 1h``; test_autoscaler_rules.py proves on promtool that it fires after the hour)."""
    otelcol, prom = chain
    name = unique("verdict")
    apiserver.create(node(name, "8", "32Gi"), kind="nodes")
    rs = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs-1", "uid": "rs-uid", "controller": True}]
    scratch = pod("scratch", node=name, owner_references=rs, containers=[container("a", "250m", "256Mi")])
    scratch["spec"]["volumes"] = [{"name": "s", "emptyDir": {}}]
    for p in (pod("bare", node=name, containers=[container("a", "250m", "256Mi")]),  # no controller
              scratch,  # a disk-backed emptyDir
              pod("pinned", node=name, owner_references=rs, containers=[container("a", "250m", "256Mi")],
                  annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
              pod("fine", node=name, owner_references=rs)):  # replicated, nothing local: does not block
        apiserver.create(p)
    expected = {"bare": "not_replicated", "scratch": "local_storage", "pinned": "not_safe_to_evict"}
    here = f'k8s_node_name="{name}"'
    with AgentProcess(apiserver, tmp_path / "agent", name, otlp_env(otelcol.otlp_http_endpoint), EXPORT_INTERVAL) as agent:
        def blocking() -> dict[str, str]:
            return {r["metric"]["k8s_pod_name"]: r["metric"]["reason"]
                    for r in prom.query(f"pod_autoscaler_blocking{{{here}}}")}

        wait_until(lambda: blocking() == expected, timeout=30, message="every blocking pod in Prometheus")
        judged = agent.debug("node")["autoscaler"]
        # 0.25 * 3 + 0.1 = 0.85 of 8 cores; 768Mi + 128Mi of 32Gi: cpu decides, far below 0.5.
        assert judged["state"] == "underutilized" and judged["utilization"]["resource"] == "cpu"
        assert judged["utilization"]["value"] == pytest.approx(0.85 / 8)
        assert {b["name"]: b["reason"] for b in judged["blockers"]} == expected
        shown = {r["metric"]["resource"]: value(r) for r in prom.query(f"node_requests_node_autoscaler_utilization{{{here}}}")}
        assert shown == {r: pytest.approx(judged["utilization"][r], rel=1e-12) for r in ("cpu", "memory")}
        (deciding,) = prom.query(f"node_requests_node_autoscaler_node_utilization{{{here}}}")
        assert deciding["metric"]["resource"] == "cpu" and value(deciding) == pytest.approx(0.85 / 8, rel=1e-12)
        assert value(prom.query(f"node_requests_node_autoscaler_threshold{{{here}}}")[0]) == judged["threshold"] == 0.5
        states = {r["metric"]["state"]: value(r) for r in prom.query(f"node_requests_node_autoscaler_state{{{here}}}")}
        assert states == {state: int(state == UNDERUTILIZED) for state in STATES}  # every state, always
        # Underutilized, so a scale-down candidate; blocked, so not removable.
        assert judged["scale_down_candidate"] is True and judged["removable"] is False
        assert value(prom.query(f"node_requests_node_autoscaler_scale_down_candidate{{{here}}}")[0]) == 1
        assert value(prom.query(f"node_requests_node_autoscaler_removable{{{here}}}")[0]) == 0
        counts = {r["metric"]["reason"]: value(r) for r in prom.query(f"node_requests_node_autoscaler_blocking_pods{{{here}}}")}
        assert counts == judged["blocking_pods"] and sum(counts.values()) == 3

        # explain --live on the same cluster: the same verdict as the agent's and the series'.
        kubeconfig = apiserver.kubeconfig(tmp_path / "kubeconfig")
        result = run("explain", "--live", "--node", name, "--kubeconfig", kubeconfig, "-o", "json")
        assert result.returncode == 0, result.stderr
        live = json.loads(result.stdout)["autoscaler"]
        assert {b["name"]: b["reason"] for b in live["blockers"]} == blocking()
        assert live["utilization"]["value"] == pytest.approx(value(deciding), rel=1e-12)
        assert live["state"] == judged["state"] and live["blocking_pods"] == counts

        # The alert: a candidate, blocked; pending for its hour, its value the blocking pods, naming the node and
        # the reasons.
        pending = wait_until(lambda: alert(prom, "NodeUnderutilizedButBlocked", name), timeout=30)
        assert pending["state"] == "pending" and float(pending["value"]) == 3
        summary = pending["annotations"]["summary"]
        assert name in summary and all(f"{reason} 1" in summary for reason in expected.values()), summary

        # A pod that stops blocking: its series leaves (within the deleted-pod bound), its reason reads 0.
        apiserver.delete("default", "bare")
        wait_until(lambda: "bare" not in blocking(), timeout=90, message="the deleted blocker's series left")
        wait_until(lambda: value(prom.query(f'node_requests_node_autoscaler_blocking_pods{{{here},reason="not_replicated"}}')[0]) == 0,
                   timeout=30)
        assert blocking() == {"scratch": "local_storage", "pinned": "not_safe_to_evict"}


def test_autoscaler_view_above_allocatable_alert_goes_pending(chain, apiserver, tmp_path):
    otelcol, prom = chain
    name = unique("overfull")
    apiserver.create(node(name, "4", "16Gi", allocatable_cpu="1"), kind="nodes")
    apiserver.create(vm_pod("big", f"vm-{name}", "3", "4Gi", node=name))  # 3 cores on 1 allocatable
    with AgentProcess(apiserver, tmp_path / "agent", name, otlp_env(otelcol.otlp_http_endpoint), EXPORT_INTERVAL):
        pending = wait_until(lambda: alert(prom, "NodeAutoscalerViewAboveAllocatable", name), timeout=30)
        assert pending["state"] == "pending" and float(pending["value"]) == 3.0
        assert name in pending["annotations"]["summary"]


def test_queue_slow_alert_goes_pending_when_the_handler_stalls_on_a_blocked_log(chain, apiserver, tmp_path):
    """A log pipe nobody reads (a wedged log collector) blocks the handler; events wait in the queue."""
    otelcol, prom = chain
    name = unique("stalled")
    apiserver.create(node(name), kind="nodes")
    with AgentProcess(apiserver, tmp_path / "agent", name, otlp_env(otelcol.otlp_http_endpoint), EXPORT_INTERVAL) as agent:
        wait_until(lambda: prom.query(f'node_requests_agent_synced{{k8s_node_name="{name}"}}'), timeout=30)
        time.sleep(2 * SCRAPE_INTERVAL)  # the histogram has samples before the stall, so rate() sees it
        agent.hold_log()
        for i in range(200):  # each bad annotation is one warning line from the handler
            apiserver.create(pod(f"bad-{i}", node=name, annotations={"vm.neon.tech/usage": "{not json"}))
        wait_until(lambda: agent.debug("runtime")["unfinished_work_seconds"] > 3, timeout=30,
                   message="handler blocked in a log write")
        agent.release_log()
        pending = wait_until(lambda: alert(prom, "NodeRequestsAgentQueueSlow", name), timeout=30)
        assert pending["state"] == "pending" and float(pending["value"]) > 1
        assert len(agent.pods()) == 200  # nothing was lost while it was stuck


def test_watch_restarts_looping_alert_goes_pending_on_a_410_loop(chain, apiserver, make_agent, monkeypatch):
    """Every resume answered 410 Gone (a watch cache compacting faster than the agent resumes) relists each time."""
    otelcol, prom = chain
    name = unique("looping")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otelcol.otlp_http_endpoint)
    # Watches that end cleanly after 1 s, so each resume is a new request the API server can refuse.
    make_agent(node_name=name, exporter="otlp", export_interval=EXPORT_INTERVAL, watch_timeout=(1, 1))
    deadline = time.monotonic() + 60
    while not alert(prom, "NodeRequestsAgentWatchRestartsLooping", name):
        assert time.monotonic() < deadline, "no alert after 60 s of 410s"
        watches = apiserver.count(watch=True)
        wait_until(lambda: apiserver.count(watch=True) > watches, timeout=10)
        apiserver.fail_next(1, 410)  # the resume after this watch ends
    pending = alert(prom, "NodeRequestsAgentWatchRestartsLooping", name)
    assert pending["state"] == "pending" and float(pending["value"]) > 1


def test_every_shipped_alert_is_made_true_by_a_test():
    exercised = {"NodeAutoscalerViewAboveAllocatable", "NodeRequestsAgentNotExporting", "NodeRequestsAgentQueueSlow",
                 "NodeRequestsAgentWatchRestartsLooping",
                 # pending here, firing after its hour in test_autoscaler_rules.py (promtool):
                 "NodeUnderutilizedButBlocked",
                 # test_autoscaler_rules.py (promtool), on the state series the verdict tests export:
                 "NodeAutoscalerWouldCrash",
                 # tests/collector/test_collector_alerts.py drives these to firing and back:
                 "OtelCollectorReplicaDown", "OtelCollectorUnavailable", "OtelCollectorRefusingData",
                 "OtelCollectorExportFailing", "OtelCollectorSendingQueueFull",
                 # test_autoscaler_rules.py (promtool), on the counters test_collector_write_path.py reads:
                 "OtelCollectorDroppingAgentPoints", "OtelCollectorRefusingAgentPushes",
                 "OtelCollectorRefusingForeignTokens"}
    assert set(alerts()) == exercised
