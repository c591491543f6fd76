"""The command line as a user runs it: a real subprocess of the installed entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from testkit.cli import AGENT, run
from testkit.factory import container, node, pod, resizing_pod, vm_pod


def test_missing_node_name_is_a_clear_error_with_exit_code_2():
    result = run("run")
    assert result.returncode == 2
    assert "NODE_NAME" in result.stderr and "--node-name" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args,env,words", [
    (["--node-name", "n", "--export-interval", "0"], {}, "positive"),
    (["--node-name", "n"], {"OTEL_METRIC_EXPORT_INTERVAL": "soon"}, "OTEL_METRIC_EXPORT_INTERVAL"),
    (["--node-name", "n"], {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL must be"),
    (["--node-name", "n", "--once"], {}, "--replay"),
    (["--node-name", "n", "--kubeconfig", "/nonexistent/kubeconfig"], {}, "Kubernetes configuration"),
    (["--node-name", "n", "--replay", "/nonexistent/capture.json"], {}, "capture"),
    (["--node-name", "n", "--kubernetes-version", "latest"], {}, "--kubernetes-version: not a Kubernetes version"),
    (["--node-name", "n"], {"KUBERNETES_VERSION": "latest"}, "KUBERNETES_VERSION: not a Kubernetes version"),
])
def test_invalid_configuration_exits_2_with_one_line(args, env, words):
    result = run("run", *args, env=env)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr
    assert one_line(result.stderr)


def one_line(stderr: str) -> str:
    """The one line an error is (docs/configuration.md): no usage before it, no parser's excerpt after it."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and not lines[0].startswith("usage:"), stderr
    return lines[0]


#: (name, bytes of the file, words of the reason). Issue 29: each exited 0 after logging an error (a capture of
#: things that are not objects), or printed PyYAML's caret dump or a codec error.
UNUSABLE = [
    ("truncated.json", b'{"kind": "PodList", "items": [{"metadata": {"na', "line 1, column 45"),
    ("truncated-stream.json", json.dumps({"kind": "PodList", "items": [pod("a")]}).encode()
     + b'\n{"type": "ADDED", "object": {"kind": "Pod", "metad', "line 2, column 45: Unterminated string"),
    ("broken.yaml", b"items:\n  - metadata: {name: [a\n", "line 3, column 1"),
    ("binary.bin", bytes(range(128, 256)) * 4, "not UTF-8"),
    ("nul.bin", b"\x00\x01\x02 capture", "line 1, column 1"),
    ("numbers.json", b"[1, 2, 3]", "expected a Kubernetes object"),
    ("list-of-numbers.json", b'{"kind": "PodList", "items": [1]}', "expected a Kubernetes object"),
]


@pytest.mark.parametrize("name,content,words", UNUSABLE, ids=[u[0] for u in UNUSABLE])
def test_replay_of_an_unusable_capture_exits_2_with_one_line_naming_it(tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    result = run("run", "--node-name", "n", "--replay", str(path), "--exporter", "none", "--once")
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert line.startswith(f"node-requests-agent: cannot read capture '{path}': ") and words in line, line


def test_replay_of_a_missing_capture_exits_2_with_one_line_naming_it(tmp_path):
    result = run("run", "--node-name", "n", "--replay", str(tmp_path / "nope.json"), "--exporter", "none")
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr) == f"node-requests-agent: cannot read capture '{tmp_path / 'nope.json'}': " \
                                      "No such file or directory"


@pytest.mark.parametrize("name,content,words", UNUSABLE[:5] + [("missing.json", None, "No such file or directory")],
                         ids=[u[0] for u in UNUSABLE[:5]] + ["missing.json"])
def test_explain_of_an_unreadable_file_is_one_line_naming_it(tmp_path, name, content, words):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    for args in ([str(path)], ["sample", "--node-file", str(path)]):
        result = run("explain", *args)
        assert result.returncode == 2, result.stderr
        line = one_line(result.stderr)
        assert line.startswith(f"node-requests-agent explain: cannot read {path}: ") and words in line, line
    if content is not None:
        piped = run("explain", input=content.decode("utf-8", errors="surrogateescape")) if content.isascii() else None
        if piped is not None:
            assert piped.returncode == 2 and one_line(piped.stderr).startswith(
                "node-requests-agent explain: cannot read standard input: "), piped.stderr


#: Issue 29: "not yaml: [" escaped as PyYAML's traceback; a plain string printed "'str' object does not support item
#: assignment".
NOT_KUBECONFIGS = [
    ("not-yaml", b"not yaml: [", "not YAML: line 1, column 12"),
    ("a-string", b"just a string", "it holds a str"),
    ("a-list", b"- a\n- b\n", "it holds a list"),
    ("clusters-a-string", b"clusters: production\n", "its clusters is not a list"),
    ("binary", bytes(range(128, 256)), "not UTF-8"),
]


@pytest.mark.parametrize("name,content,words", NOT_KUBECONFIGS, ids=[k[0] for k in NOT_KUBECONFIGS])
def test_a_kubeconfig_that_is_not_one_exits_2_with_one_line_naming_it(tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content)
    for env in ({"KUBECONFIG": str(path)}, {"KUBECONFIG": f"{tmp_path / 'absent'}{os.pathsep}{path}"}):
        result = run("run", "--node-name", "n", env=env)
        assert result.returncode == 2, result.stderr
        line = one_line(result.stderr)
        assert f"{path} is not a kubeconfig: " in line and words in line and "--replay sample" in line, line
    live = run("explain", "--live", "--kubeconfig", str(path))
    assert live.returncode == 2 and f"{path} is not a kubeconfig: " in one_line(live.stderr), live.stderr


@pytest.mark.parametrize("args,error", [
    (["run", "--bogus"], "run: unknown flag --bogus: neither the agent's nor the cluster-autoscaler's"),
    (["--bogus"], "run: unknown flag --bogus: neither the agent's nor the cluster-autoscaler's"),
    (["run", "--node-name", "n", "stray"], "run: unrecognized arguments: stray"),
    (["run", "--node-name", "n", "--exporter", "xml"], "run: argument --exporter: invalid choice: 'xml'"),
    (["run", "--node-name"], "run: argument --node-name: expected one argument"),
    (["explain", "--output", "yaml"], "explain: argument --output/-o: invalid choice: 'yaml'"),
    (["explain", "a.json", "b.json"], "explain: unrecognized arguments: b.json"),
])
def test_a_bad_flag_is_one_line_and_exit_2_not_a_usage_dump(args, error):
    result = run(*args)
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    command = error.split(":", 1)[0]
    assert line.startswith(f"node-requests-agent {error}"), line
    assert line.endswith(f"; see node-requests-agent {command} --help"), line


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
    # A short summary first: node totals, the autoscaler's verdict, the top pods, then the metric lines.
    out = result.stdout.splitlines()
    assert out[0] == "NODE sample-node  12 pods  cpu 75%, memory 64% of allocatable"
    # Release 1.36 counts the NeonVM runners by their own requests (upstream reads no VM usage): 2.64 of 7.91 cores,
    # under the default threshold 0.5; every pod that blocks is counted by its reason: the five
    # NeonVM runners (a VirtualMachine or VirtualMachineMigration controller) and the bare debug-shell, web (its
    # PDB allows no disruption), the disk emptyDir and the safe-to-evict "false" pod; thumbnailer's emptyDir is named
    # safe to evict, and finished pods are not judged.
    assert out[1] == ("AUTOSCALER  underutilized: cpu 33% < threshold 50%, a scale-down candidate, not removable: "
                      "9 pods block its removal")
    assert out[2] == "  BLOCKING  9 pods: not_replicated 6, not_safe_to_evict 1, local_storage 1, not_enough_pdb 1"
    blocking = {line.split('k8s.pod.name="')[1].split('"')[0]: line.split('reason="')[1].split('"')[0]
                for line in out if line.startswith("pod_autoscaler_blocking{")}
    assert blocking == {**dict.fromkeys(["compute-bold-sun-9kq1z", "compute-odd-fog-2k9d1", "compute-quiet-river-7xk2q",
                                         "compute-swift-lake-4hd8s", "compute-swift-lake-m8v2c", "debug-shell"],
                                        "not_replicated"),
                        "web-7d4b9c-q9w8e": "not_enough_pdb", "scratch-builder-6f8d9-k4m2n": "local_storage",
                        "legacy-cron-7b5c4-p8t6v": "not_safe_to_evict"}
    assert 'node_requests_node_autoscaler_state{state="underutilized"} 1' in out
    first_metric = next(i for i, line in enumerate(out) if line.startswith("# resource:"))
    summary = out[:first_metric]
    header = next(i for i, line in enumerate(summary) if line.startswith("POD "))
    assert [line.split()[0] for line in summary[header + 1:header + 6]] == [
        "default/queue-worker-5c8f7", "neon/compute-bold-sun-9kq1z", "neon/compute-swift-lake-4hd8s",
        "neon/compute-swift-lake-m8v2c", "batch/report-builder-28f1c"]
    assert ["cpu", "7.91", "2.64", "5.94", "1.97", "75%"] in [line.split() for line in summary]


def test_migration_role_is_spelled_the_same_in_json_and_metrics():
    metrics = run("run", "--node-name", "sample-node", "--replay", "sample", "--exporter", "table", "--once").stdout
    from_metrics = {line.split('k8s.pod.name="')[1].split('"')[0]: line.split('neon.vm.migration.role="')[1].split('"')[0]
                    for line in metrics.splitlines() if line.startswith("vm_cpu_usage{")}
    pods = json.loads(run("explain", "-o", "json", "sample").stdout)["pods"]
    from_json = {p["name"]: p["vm"]["migration_role"] for p in pods if p["vm"] and p["reported"]}
    assert from_json == from_metrics and set(from_json.values()) == {"source", "target", "none"}


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
    assert "NODE node-a  2 pods" in result.stdout
    sidecars = next(line for line in result.stdout.splitlines() if line.startswith("default/sidecars"))
    # init 2 beats app 500m + sidecar 100m; nobody asks for memory
    assert sidecars.split()[-2:] == ["2", "0"] and "cpu: init init peak; memory: nothing requested" in sidecars


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


@pytest.fixture
def hourly_agent(tmp_path, http_receiver):
    """The agent watching node n1 (one pod, p) on a fake API server, exporting to ``http_receiver`` hourly."""
    from testkit.fake_apiserver import FakeApiServer

    api = FakeApiServer().start()
    proc = None
    try:
        api.create(pod("p", node="n1"))
        proc = subprocess.Popen([*AGENT, "run", "--node-name", "n1", "--kubeconfig", api.kubeconfig(tmp_path / "kc"),
                                 "--export-interval", "3600", "--debug-address", "127.0.0.1:0"],
                                env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        yield api, proc
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.communicate(timeout=15)
        api.stop()


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_signal_flushes_a_final_export_and_exits_promptly(hourly_agent, signame, http_receiver):
    import signal
    import time

    from testkit.otlp_receiver import points_of
    from testkit.waiting import wait_until

    api, proc = hourly_agent
    wait_until(lambda: api.count(watch=True) >= 1 and http_receiver.requests, timeout=20)  # the first export
    time.sleep(0.3)
    before = len(http_receiver.requests)
    sent = time.monotonic()
    proc.send_signal(getattr(signal, signame))
    assert proc.wait(15) == 0
    assert time.monotonic() - sent < 5  # well inside the DaemonSet's 30 s grace period
    assert len(http_receiver.requests) > before, "no final export on SIGTERM"
    assert {p.attributes.get("k8s.pod.name") for p in points_of(http_receiver.requests[-1][1])} >= {"p"}


def test_the_first_export_follows_the_first_sync_not_an_interval_after_start(hourly_agent, http_receiver):
    """A node that just joined has its numbers at the Collector as soon as its pods and Node are read (issue 30): the
    SDK's reader alone would first export an interval (here an hour) after start."""
    from testkit.otlp_receiver import points_of
    from testkit.waiting import wait_until

    wait_until(lambda: http_receiver.requests, timeout=30)
    first = points_of(http_receiver.requests[0][1])
    assert {p.attributes.get("k8s.pod.name") for p in first if p.metric == "pod_or_vm_cpu_requests"} == {"p"}
    assert len(http_receiver.requests) == 1  # one early export, then the schedule


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
    assert "NODE node-a  2 pods  cpu 86%, memory 43% of allocatable" in table  # 3 / 3.5 cores, 6Gi / 14Gi
    assert [line.split() for line in table.splitlines() if line.startswith("  cpu")] == [
        ["cpu", "3.5", "1", "3", "500m", "86%"]]  # allocatable, scheduled, pod_or_vm, headroom, ratio
    wide = run("explain", "-o", "wide", "--node-file", str(node_file), input=dump(*pods)).stdout
    assert "pod_or_vm_to_allocatable" in wide and "capacity" in wide


def test_no_kubeconfig_names_what_was_tried_and_what_to_do(tmp_path):
    home = tmp_path / "home"
    result = run("run", "--node-name", "n", env={"HOME": str(home)})
    assert result.returncode == 2, result.stderr
    assert str(home / ".kube" / "config") in result.stderr and "KUBERNETES_SERVICE_HOST" in result.stderr
    assert "--kubeconfig" in result.stderr and "--replay sample" in result.stderr
    listed = run("run", "--node-name", "n", env={"KUBECONFIG": f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}"})
    assert f"{tmp_path / 'a'}, {tmp_path / 'b'}" in listed.stderr


def test_debug_port_in_use_exits_2_naming_the_address():
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        result = run("run", "--node-name", "sample-node", "--replay", "sample", "--exporter", "none",
                     "--debug-address", address, timeout=30)
    assert result.returncode == 2, result.stderr
    assert address in result.stderr and "probes" in result.stderr and "Traceback" not in result.stderr


def test_version_on_every_command():
    for args in (["--version"], ["run", "--version"], ["explain", "--version"]):
        result = run(*args)
        assert result.returncode == 0 and result.stdout.startswith("node-requests-agent 0."), (args, result.stderr)


def test_a_mistyped_command_is_reported_as_such():
    result = run("explian", "pods.json")
    assert result.returncode == 2
    assert "unknown command 'explian'" in result.stderr and "did you mean 'explain'" in result.stderr
    assert "unrecognized arguments" not in result.stderr


def test_every_option_has_help_text():
    from agent.cli import build_parser

    parser = build_parser()
    commands = [a for a in parser._actions if a.dest == "command"][0].choices  # argparse's own registry of subparsers
    for name, sub in [("", parser), *commands.items()]:
        for action in sub._actions:
            if action.dest not in ("help", "command"):
                assert action.help, f"{name} {action.option_strings or action.dest} has no help text"


def test_replay_of_a_capture_without_the_nodes_pods_warns_once(tmp_path):
    result = run("run", "--node-name", "other-node", "--replay", "sample", "--exporter", "none", "--once")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "no pod bound to node other-node" in line]
    assert len(warnings) == 1 and "sample-node" in warnings[0] and "--node-name" in warnings[0]
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"kind": "PodList", "apiVersion": "v1", "items": []}))
    result = run("run", "--node-name", "n", "--replay", str(empty), "--exporter", "none", "--once")
    assert result.returncode == 0 and result.stderr.count("the capture has no pod at all") == 1
    fine = run("run", "--node-name", "sample-node", "--replay", "sample", "--exporter", "none", "--once")
    assert "no pod" not in fine.stderr


def test_explain_applies_the_newest_rules_unless_told_and_says_which():
    newest = run("explain", input=dump(resizing_pod()))
    assert newest.returncode == 0, newest.stderr
    assert newest.stdout.splitlines()[0].startswith("RULES  Kubernetes 1.37 PodRequests (the newest supported")
    pinned = run("explain", "--kubernetes-version", "1.36", input=dump(resizing_pod()))
    assert pinned.stdout.splitlines()[0] == "RULES  Kubernetes 1.36 PodRequests (--kubernetes-version 1.36)"
    older = json.loads(run("explain", "-o", "json", "--kubernetes-version", "1.36", input=dump(resizing_pod())).stdout)
    newer = json.loads(run("explain", "-o", "json", input=dump(resizing_pod())).stdout)
    assert (older["kubernetes_rules"], older["pods"][0]["cpu_cores"]) == ("1.36", 4.0)
    assert (newer["kubernetes_rules"], newer["pods"][0]["cpu_cores"]) == ("1.37", 3.0)


def test_explain_takes_the_kubernetes_version_as_run_does():
    """One row, one parse: explain's --kubernetes-version is run's flag, with its variable and its one-line error."""
    from agent.cli import build_parser

    commands = [a for a in build_parser()._actions if a.dest == "command"][0].choices
    helps = {name: {a.dest: a.help for a in sub._actions} for name, sub in commands.items()}
    for dest in ("kubeconfig", "context", "kubernetes_version"):
        assert helps["explain"][dest].split(" (env")[0].split(" (default")[0] == \
            helps["run"][dest].split(" (env")[0].split(" (default")[0]
    from_env = run("explain", "-o", "json", input=dump(resizing_pod()), env={"KUBERNETES_VERSION": "1.36"})
    assert json.loads(from_env.stdout)["kubernetes_rules"] == "1.36", from_env.stderr
    bad = run("explain", input=dump(resizing_pod()), env={"KUBERNETES_VERSION": "latest"})
    assert (bad.returncode, one_line(bad.stderr).startswith("node-requests-agent explain: KUBERNETES_VERSION: ")) \
        == (2, True), bad.stderr


def test_explain_outside_the_supported_releases_warns_and_uses_the_nearest():
    result = run("explain", "-o", "json", "--kubernetes-version", "v1.35.4", input=dump(resizing_pod()))
    assert result.returncode == 0
    assert "older than the oldest supported release 1.36" in result.stderr
    assert json.loads(result.stdout)["kubernetes_rules"] == "1.36"


def test_explain_unparsable_version_exits_2():
    result = run("explain", "--kubernetes-version", "one.thirty-seven", input=dump(resizing_pod()))
    assert result.returncode == 2 and "not a Kubernetes version" in result.stderr and "Traceback" not in result.stderr


def test_run_as_the_daemonset_runs_it_builds_no_parser():
    """``run`` alone, settings from the environment, never imports argparse; any flag goes through the parser."""
    code = ("import sys; from agent.cli import main; rc = main(sys.argv[1:]); "
            "print('exit', rc, 'argparse' in sys.modules, file=sys.stderr)")
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    for args, parsed in ((["run"], False), ([], False), (["run", "--log-level", "INFO"], True)):
        result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=60)
        assert result.stderr.splitlines()[-1] == f"exit 2 {parsed}", (args, result.stderr)
        assert "the node name is required" in result.stderr


def test_no_flag_is_what_the_parser_returns_when_none_is_given():
    """The unparsed path hands ``from_sources`` no flags; that is only right while every run option defaults to unset."""
    from agent.cli import build_parser
    from agent.config import from_sources

    parsed = {k: v for k, v in vars(build_parser().parse_args(["run"])).items() if k != "command"}
    assert parsed and not any(parsed.values()), parsed
    for env in ({"NODE_NAME": "n", "OTEL_METRICS_EXPORTER": "none"},
                {"NODE_NAME": "n", "OTEL_METRICS_EXPORTER": "none", "DEBUG_ADDRESS": "off", "LOG_LEVEL": "debug",
                 "OTEL_METRIC_EXPORT_INTERVAL": "2500", "DEBUG_HOSTS": "a,b", "HOST_PROC": "off"}):
        assert from_sources({}, env) == from_sources(parsed, env)


def owned(name: str, kind: str, cpu: str) -> dict:
    return pod(name, containers=[container("main", cpu, "1Gi")],
               owner_references=[{"apiVersion": "apps/v1", "kind": kind, "name": f"{name}-owner", "uid": f"{name}-uid",
                                  "controller": True}])


def test_a_bare_autoscaler_boolean_takes_no_value_word_so_explain_reads_the_file_after_it(tmp_path):
    """Issue 37: ``explain --ignore-daemonsets-utilization dump.json`` failed with "'dump.json' is not a boolean": a
    boolean alone is true in the autoscaler's flag grammar and never takes the next word."""
    dump_file = tmp_path / "dump.json"
    dump_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        node("node-a", cpu="4"), owned("ds-pod", "DaemonSet", "1"), owned("web", "ReplicaSet", "1")]}))

    def cpu(*flags: str) -> float:
        result = run("explain", *flags, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["autoscaler"]["utilization"]["cpu"]

    assert cpu(str(dump_file)) == 0.5  # 2 of 4 cores
    assert cpu("--ignore-daemonsets-utilization", str(dump_file)) == 1 / 3  # the DaemonSet's core leaves both
    assert cpu("--ignore-daemonsets-utilization=true", str(dump_file)) == 1 / 3
    assert cpu(str(dump_file), "--ignore-daemonsets-utilization=false") == 0.5
