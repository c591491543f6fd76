"""The command line as a user runs it: a real subprocess of the installed entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.factory import container, pod, vm_pod

AGENT = [sys.executable, "-m", "agent"]


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NODE_NAME", "KUBE"))}
    full_env.update(env or {})
    return subprocess.run([*AGENT, *args], input=input, capture_output=True, text=True, env=full_env, timeout=timeout)


def test_missing_node_name_is_a_clear_error_with_exit_code_2():
    result = run("run")
    assert result.returncode == 2
    assert "NODE_NAME" in result.stderr and "--node-name" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args,env,words", [
    (["--node-name", "n", "--export-interval", "0"], {}, "positive"),
    (["--node-name", "n"], {"OTEL_METRIC_EXPORT_INTERVAL": "soon"}, "OTEL_METRIC_EXPORT_INTERVAL"),
    (["--node-name", "n"], {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "protocol"),
    (["--node-name", "n", "--once"], {}, "--replay"),
    (["--node-name", "n", "--kubeconfig", "/nonexistent/kubeconfig"], {}, "Kubernetes configuration"),
    (["--node-name", "n", "--replay", "/nonexistent/capture.json"], {}, "capture"),
    (["--node-name", "n", "--kubernetes-version", "latest"], {}, "--kubernetes-version: not a Kubernetes version"),
])
def test_invalid_configuration_exits_2_with_one_line(args, env, words):
    result = run("run", *args, env=env)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr


def test_help_everywhere():
    for args in (["--help"], ["run", "--help"], ["explain", "--help"]):
        result = run(*args)
        assert result.returncode == 0 and "usage:" in result.stdout


def test_demo_runs_the_pipeline_on_the_bundled_sample():
    result = run("run", "--node-name", "sample-node", "--replay", "sample", "--exporter", "table", "--once")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("pod_or_vm_cpu_requests{")]
    values = {line.split('k8s.pod.name="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1]) for line in lines}
    assert values["compute-bold-sun-9kq1z"] == 0.8         # 2 cores / 2.5 overcommit
    assert values["compute-quiet-river-7xk2q"] == 0.5      # after the MODIFIED event
    assert values["report-builder-28f1c"] == 0.75          # init peak 500m + overhead 250m
    assert "web-7d4b9c-x2k4p" not in values and "web-7d4b9c-q9w8e" in values  # deleted, then added
    assert "nightly-backup-29391" not in values             # Succeeded
    assert values["compute-odd-fog-2k9d1"] == 0.0 and "invalid_json" in result.stdout
    assert 'neon.vm.migration.role="target"' in result.stdout
    assert "compute-odd-fog-2k9d1" in result.stderr         # one clear log line for the bad pod


def dump(*pods) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(pods)})


def test_explain_json_contract():
    result = run("explain", "-o", "json", "-", input=dump(
        pod("web", containers=[container("a", "250m", "1Gi")]),
        vm_pod("vm-pod", "vm-1", "2", "4Gi", overcommit={"cpu": "2", "memory": "2"}),
        pod("done", phase="Succeeded"),
    ))
    assert result.returncode == 0, result.stderr
    pods = {p["name"]: p for p in json.loads(result.stdout)["pods"]}
    assert pods["web"] | {"uid": None} == pods["web"] | {"uid": None, "namespace": "default", "phase": "Running",
                                                          "reported": True, "source": "pod_requests",
                                                          "cpu_cores": 0.25, "memory_bytes": 2**30, "problems": []}
    assert (pods["vm-pod"]["source"], pods["vm-pod"]["cpu_cores"], pods["vm-pod"]["memory_bytes"]) == ("vm_usage", 1.0, 2 * 2**30)
    assert pods["done"]["reported"] is False
    for p in pods.values():
        assert {"namespace", "name", "uid", "phase", "reported", "source", "cpu_cores", "memory_bytes", "problems"} <= set(p)


def test_explain_table_reads_yaml_and_shows_why(tmp_path):
    path = tmp_path / "pods.yaml"
    bad = vm_pod("broken", "vm-2", "1", "1Gi")
    bad["metadata"]["annotations"]["vm.neon.tech/usage"] = "{oops"
    path.write_text(yaml.safe_dump_all([
        pod("sidecars", init_containers=[container("init", "2"), container("proxy", "100m", restart_policy="Always")],
            containers=[container("app", "500m")]),
        bad,
    ]))
    result = run("explain", str(path))
    assert result.returncode == 0, result.stderr
    assert "sidecar" in result.stdout and "proxy" in result.stdout
    assert "problem: usage: vm.neon.tech/usage ignored" in result.stdout
    assert "TOTAL (2 pods reported)" in result.stdout


def test_explain_applies_a_watch_capture_in_order():
    first = pod("p", containers=[container("a", "1")])
    later = json.loads(json.dumps(first))
    later["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    gone = pod("q")
    capture = "\n".join(json.dumps(e, indent=2) for e in [
        {"type": "ADDED", "object": first}, {"type": "ADDED", "object": gone},
        {"type": "MODIFIED", "object": later}, {"type": "DELETED", "object": gone}])
    out = json.loads(run("explain", "-o", "json", input=capture).stdout)
    assert [(p["name"], p["cpu_cores"]) for p in out["pods"]] == [("p", 3.0)]


@pytest.mark.parametrize("text", ["{not json or yaml: [", "just a string", "[1, 2, 3]"])
def test_explain_bad_input_is_a_clear_error(text):
    result = run("explain", input=text)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.strip()


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_signal_flushes_a_final_export_and_exits_promptly(tmp_path, signame):
    from tests.fake_apiserver import FakeApiServer
    from tests.otlp_receiver import HttpReceiver

    api = FakeApiServer().start()
    receiver = HttpReceiver().start()
    try:
        api.create(pod("p", node="n1"))
        proc = subprocess.Popen([*AGENT, "run", "--node-name", "n1", "--kubeconfig", api.kubeconfig(tmp_path / "kc"),
                                 "--export-interval", "3600"],
                                env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        from tests.conftest import wait_until
        wait_until(lambda: api.count(watch=True) >= 1, timeout=20)
        import signal
        import time
        time.sleep(0.3)
        sent = time.monotonic()
        proc.send_signal(getattr(signal, signame))
        assert proc.wait(15) == 0
        assert time.monotonic() - sent < 5  # well inside the DaemonSet's 30 s grace period
        assert receiver.requests, "no final export on SIGTERM"
        from tests.otlp_receiver import points_of
        assert {p.attributes.get("k8s.pod.name") for p in points_of(receiver.requests[-1][1])} >= {"p"}
    finally:
        api.stop()
        receiver.stop()


def test_explain_prints_the_node_comparisons_from_a_node_in_the_dump(tmp_path):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": "3500m", "memory": "14Gi", "pods": "110"}}}
    pods = [pod("web", containers=[container("a", "1", "2Gi")]), vm_pod("vm", "vm-1", "2", "4Gi", node="node-a")]
    mixed = json.dumps({"apiVersion": "v1", "kind": "List", "items": [node, *pods]})
    out = json.loads(run("explain", "-o", "json", input=mixed).stdout)
    assert out["node"]["cpu_cores"] == {"capacity": 4.0, "allocatable": 3.5, "scheduled": 1.0, "pod_or_vm": 3.0, "vm_usage": 2.0}
    assert out["node"]["ratios"]["cpu"]["pod_or_vm_to_allocatable"] == pytest.approx(3 / 3.5)
    node_file = tmp_path / "node.yaml"
    node_file.write_text(yaml.safe_dump(node))
    table = run("explain", "--node-file", str(node_file), input=dump(*pods)).stdout
    assert "NODE node-a" in table and "pod_or_vm_to_allocatable" in table and "allocatable        3500m" in table


def resizing_pod() -> dict:
    """4 cpu under 1.36 (per-container maxima summed), 3 under 1.37 (the max of whole-pod sums)."""
    return pod("resizing", containers=[container("c1", "2"), container("c2", "1")], container_statuses=[
        {"name": "c1", "allocatedResources": {"cpu": "1"}, "resources": {"requests": {"cpu": "1"}}},
        {"name": "c2", "allocatedResources": {"cpu": "2"}, "resources": {"requests": {"cpu": "2"}}}])


def test_explain_applies_the_newest_rules_unless_told_and_says_which():
    newest = run("explain", input=dump(resizing_pod()))
    assert newest.returncode == 0, newest.stderr
    assert newest.stdout.splitlines()[0].startswith("Pod requests follow the Kubernetes 1.37 rules")
    older = json.loads(run("explain", "-o", "json", "--kubernetes-version", "1.36", input=dump(resizing_pod())).stdout)
    newer = json.loads(run("explain", "-o", "json", input=dump(resizing_pod())).stdout)
    assert (older["kubernetes_rules"], older["pods"][0]["cpu_cores"]) == ("1.36", 4.0)
    assert (newer["kubernetes_rules"], newer["pods"][0]["cpu_cores"]) == ("1.37", 3.0)


def test_explain_outside_the_supported_releases_warns_and_uses_the_nearest():
    result = run("explain", "-o", "json", "--kubernetes-version", "v1.35.4", input=dump(resizing_pod()))
    assert result.returncode == 0
    assert "older than the oldest supported release 1.36" in result.stderr
    assert json.loads(result.stdout)["kubernetes_rules"] == "1.36"


def test_explain_unparsable_version_exits_2():
    result = run("explain", "--kubernetes-version", "one.thirty-seven", input=dump(resizing_pod()))
    assert result.returncode == 2 and "not a Kubernetes version" in result.stderr and "Traceback" not in result.stderr
