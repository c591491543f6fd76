"""Issue 39: a wrong autoscaler release in the DaemonSet's environment (the kustomize path has no values schema) must
not crash-loop every node. The agent, run as the DaemonSet runs it (``run``, every setting from the environment),
stays up and ready, exports the pods' series, says one line at start, and reports the verdict as off: state
``unknown``, no threshold, and the line on /debug (docs/configuration.md#when-a-setting-is-wrong)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from testkit.cli import AGENT, run
from testkit.factory import node, pod
from testkit.fake_apiserver import FakeApiServer
from testkit.otlp_receiver import points_of
from testkit.repo import REPO
from testkit.waiting import wait_until


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("variable,value,named", [
    ("NRA_AUTOSCALER_RELEASE", "1.40", "unknown cluster-autoscaler release '1.40'"),
    ("NRA_AUTOSCALER_ARGS", "--scale-down-utilization-threshold=1.5", "outside [0, 1]"),
    ("NRA_WATCH_PDBS", "yes", "NRA_WATCH_PDBS must be true or false"),
])
def test_an_unusable_autoscaler_setting_turns_the_verdict_off_not_the_agent(tmp_path: Path, http_receiver,
                                                                            variable, value, named):
    api = FakeApiServer().start()
    stderr_path = tmp_path / "stderr"
    proc = None
    try:
        api.create(node("n1"), kind="nodes")
        api.create(pod("p", node="n1"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NRA_", "KUBE", "DEBUG_"))}
        env.update({"NODE_NAME": "n1", "KUBECONFIG": api.kubeconfig(tmp_path / "kc"), "DEBUG_ADDRESS": "127.0.0.1:0",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint, "OTEL_METRIC_EXPORT_INTERVAL": "500",
                    variable: value})
        with stderr_path.open("w") as stderr:
            proc = subprocess.Popen([*AGENT, "run"], env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        port = int(wait_until(lambda: re.search(r"debug endpoint on port (\d+)", stderr_path.read_text()), 30,
                              message="the debug endpoint's port in the log")[1])

        def exported_pod_and_verdict():
            for _, request in http_receiver.requests:
                points = points_of(request)
                if any(p.metric == "pod_or_vm_cpu_requests" and p.attributes.get("k8s.pod.name") == "p"
                       for p in points) and any(p.metric == "node_requests_node_autoscaler_state" for p in points):
                    return points
            return None

        points = wait_until(exported_pod_and_verdict, 30, message="an export with the pod's series")
        states = {p.attributes["state"]: p.value for p in points if p.metric == "node_requests_node_autoscaler_state"}
        assert states["unknown"] == 1 and sum(states.values()) == 1, states
        assert not [p for p in points if p.metric in ("node_requests_node_autoscaler_threshold",
                                                      "node_requests_node_autoscaler_utilization")]
        assert any(p.metric == "node_requests_node_cpu_cores" and p.attributes["quantity"] == "allocatable"
                   for p in points), "the node's values are exported as usual"
        # Up and ready, several exports later: no exit, no crash loop.
        wait_until(lambda: len(http_receiver.requests) >= 3, 30, message="exports keep coming")
        assert proc.poll() is None, stderr_path.read_text()
        assert _get(port, "/readyz")[0] == 200 and _get(port, "/healthz")[0] == 200
        status, body = _get(port, "/debug/node")
        assert status == 200, body
        verdict = json.loads(body)["autoscaler"]
        assert verdict["state"] == "unknown" and verdict["threshold"] is None, verdict
        assert verdict["headline"].startswith("unknown: the verdict is off: ") and named in verdict["headline"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(15)
        api.stop()
    said = stderr_path.read_text()
    assert "Traceback" not in said, said
    errors = [line for line in said.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and variable in errors[0] and named in errors[0] and "verdict is off" in errors[0], said
    assert proc.returncode == 0, said  # stopped by SIGTERM, exported once more and exited cleanly


def test_a_host_proc_without_the_agents_own_process_leaves_the_exports_running(http_receiver):
    """HOST_PROC points psutil's one module-wide /proc elsewhere: the agent's own process metrics read it too, and a
    folder without the agent's pid was a traceback at start (exit 1 on every node). Now the used series are absent
    with their warning, the process's memory and threads have no observation, and everything else is exported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NRA_", "KUBE", "DEBUG_"))}
    env.update({"HOST_PROC": "/nonexistent", "OTEL_EXPORTER_OTLP_ENDPOINT": http_receiver.endpoint})
    result = subprocess.run([*AGENT, "run", "--node-name", "sample-node", "--replay", "sample", "--once"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "cannot read host usage from /nonexistent" in result.stderr
    points = [p for _, request in http_receiver.requests for p in points_of(request)]
    metrics = {p.metric for p in points}
    assert {"pod_or_vm_cpu_requests", "process.cpu.time"} <= metrics, metrics
    assert not {"process.memory.usage", "process.thread.count"} & metrics
    assert not [p for p in points if p.metric == "node_requests_node_cpu_cores" and p.attributes["quantity"] == "used"]


#: Each variable a bad value of which the agent refuses at start, one line naming it and exit 2: what it configures
#: is the agent's own job (where and how it exports, its probes, its logs, whose request rules the pods' values
#: follow), so running on with a guess would export something else than was asked, or nothing a person can read.
REFUSED = {
    "OTEL_METRICS_EXPORTER": "xml", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "thrift",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "ftp://collector",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://collector", "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "no-equals-sign",
    "OTEL_EXPORTER_OTLP_HEADERS": "no-equals-sign", "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION": "zstd",
    "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd", "OTEL_RESOURCE_ATTRIBUTES": "no-equals-sign",
    "OTEL_METRIC_EXPORT_INTERVAL": "soon", "OTEL_METRIC_EXPORT_TIMEOUT": "0", "DEBUG_ADDRESS": "nine-eight-oh-eight",
    "DEBUG_VIEWS": "everyone", "DEBUG_HOSTS": "a/b", "LOG_LEVEL": "LOUD", "LOG_FORMAT": "xml",
    "KUBERNETES_VERSION": "latest",
}
#: Read as the verdict's: a bad value turns the verdict off (config.VERDICT_SETTINGS; the test above and
#: tests/test_config_autoscaler.py).
VERDICT_OFF = {"NRA_AUTOSCALER_ARGS", "NRA_AUTOSCALER_RELEASE", "NRA_WATCH_PDBS", "NRA_MAX_PDBS"}
#: Paths and names the agent opens rather than parses, each with its own test of what a wrong one does: the node name
#: (required: tests/test_cli.py), the kubeconfig and the in-cluster service account (one line, exit 2:
#: tests/test_cli.py, tests/source/test_in_cluster.py), the CA and client files (one line, exit 2:
#: tests/export/test_ca_file.py), the token file (a warning, re-read at each export), HOST_PROC (a warning, the used
#: series absent: above), MALLOC_ARENA_MAX (glibc's), and the OTLP boolean (a warning, false, as OpenTelemetry
#: reads it).
OPENED_OR_WARNED = {"NODE_NAME", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
                    "NRA_SERVICEACCOUNT_DIR", "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
                    "OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
                    "OTEL_EXPORTER_OTLP_CLIENT_KEY", "NRA_OTLP_TOKEN_FILE", "HOST_PROC", "MALLOC_ARENA_MAX",
                    "OTEL_EXPORTER_OTLP_METRICS_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"}


def test_every_variable_has_its_decision():
    """docs/configuration.md#when-a-setting-is-wrong decides each variable the agent reads: a new one must be put in
    one of the three groups here (and there) before it ships."""
    from agent.config import SETTINGS, VERDICT_SETTINGS

    variables = {v for s in SETTINGS.values() for v in s.env}
    assert REFUSED.keys() | VERDICT_OFF | OPENED_OR_WARNED == variables
    assert not (REFUSED.keys() & VERDICT_OFF or REFUSED.keys() & OPENED_OR_WARNED or VERDICT_OFF & OPENED_OR_WARNED)
    assert {v for name in VERDICT_SETTINGS for v in SETTINGS[name].env} == VERDICT_OFF
    documented = (REPO / "docs" / "configuration.md").read_text().split("## When a setting is wrong", 1)[1]
    for variable in variables - {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}:
        base = variable.replace("OTEL_EXPORTER_OTLP_METRICS_", "OTEL_EXPORTER_OTLP_")
        assert f"`{base}`" in documented, variable


@pytest.mark.parametrize("variable", sorted(REFUSED))
def test_a_refused_variable_is_one_line_naming_it_and_exit_2(variable):
    quiet = {} if variable == "LOG_LEVEL" else {"LOG_LEVEL": "WARNING"}  # no INFO line before a refusal at build
    result = run("run", "--node-name", "sample-node", "--replay", "sample", "--once",
                 env={**quiet, variable: REFUSED[variable]})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"node-requests-agent: {variable}"), line
