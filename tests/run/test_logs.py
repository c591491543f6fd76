"""Structured logs: with --log-format json every line the agent writes is one JSON object, whatever it says."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import pytest

from agent.run.logs import JsonFormatter, configure_logging
from testkit.agent_process import AgentProcess, otlp_env
from testkit.cluster import free_ports
from testkit.waiting import wait_until
from testkit.factory import pod, vm_pod

FIELDS = {"time", "level", "logger", "message", "k8s.node.name"}


def _record(msg: str, *args, **extra) -> logging.LogRecord:
    record = logging.LogRecord("agent.test", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


@pytest.mark.parametrize("message", [
    "line one\nline two\r\x00\x1b[31m red \x7f",
    b"\xff\xfe not utf-8".decode("utf-8", "surrogateescape"),
    "\ud800 a lone surrogate",
    'quotes " and \\ backslashes',
], ids=["control-characters", "undecodable-bytes", "lone-surrogate", "quotes"])
def test_any_message_is_one_valid_json_line(message):
    line = JsonFormatter("node-a").format(_record("pod %s: %s", "ns/p", message, **{"k8s.pod.name": message}))
    assert "\n" not in line and "\r" not in line
    line.encode("utf-8")  # valid UTF-8: no lone surrogate survives
    parsed = json.loads(line)
    assert set(parsed) == FIELDS | {"k8s.pod.name"}
    assert parsed["level"] == "WARNING" and parsed["logger"] == "agent.test" and parsed["k8s.node.name"] == "node-a"
    assert parsed["message"].startswith("pod ns/p: ") and parsed["time"].endswith("Z")


def test_an_exception_stays_inside_the_line():
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        record = logging.LogRecord("agent", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    parsed = json.loads(JsonFormatter().format(record))
    assert "RuntimeError: boom" in parsed["exception"] and "k8s.node.name" not in parsed


def test_library_lines_and_warnings_go_through_the_same_handler():
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("INFO", "json", node_name="node-a", stream=stream)
        logging.getLogger("urllib3.connectionpool").warning("retrying %s", "x")
        import warnings
        warnings.warn("a library's warning")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.captureWarnings(False)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["logger"], line["level"]) for line in lines] == [("urllib3.connectionpool", "WARNING"),
                                                                   ("py.warnings", "WARNING")]


@pytest.mark.parametrize("how", [["--log-format", "yaml"], ["--log-format", ""]], ids=["flag", "empty-flag"])
def test_an_unknown_format_exits_2_with_one_line(how, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "agent", "run", "--node-name", "n", "--replay", "sample", "--once",
                           *how], capture_output=True, text=True, timeout=60, env={"LOG_FORMAT": "xml", "PATH": ""})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "text or json" in lines[0], proc.stderr


def test_the_environment_chooses_the_format_too():
    proc = subprocess.run([sys.executable, "-m", "agent", "run", "--node-name", "sample-node", "--replay", "sample",
                           "--once", "--exporter", "none"], capture_output=True, text=True, timeout=60,
                          env={"LOG_FORMAT": "json", "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    assert lines and all(FIELDS <= set(line) for line in lines)


def test_every_line_of_a_run_with_warnings_is_json(apiserver, tmp_path):
    """Bad annotations, a relist after a 410 and failing exports: every line parses, the pod lines name the pod."""
    bad = vm_pod("broken-vm", "vm-1", "1", "1Gi", node="node-a")
    bad["metadata"]["annotations"]["vm.neon.tech/usage"] = "{not json"
    apiserver.create(bad)
    apiserver.create(pod("plain", node="node-a"))
    closed = f"http://127.0.0.1:{free_ports(1)[0]}"  # nobody listens: every export fails
    agent = AgentProcess(apiserver, tmp_path, "node-a", otlp_env(closed), interval=0.5,
                         args=["--log-format", "json"])
    with agent:
        wait_until(lambda: agent.exports("failure") >= 2, timeout=30, message="failed exports")
        # A restart that lost the watch's history: transport errors, then 410 and a relist.
        apiserver.stop()
        apiserver.create(pod("meanwhile", node="node-a"))
        apiserver.compact()
        apiserver.start()
        wait_until(lambda: "listed 3 pods" in agent.log_text(), timeout=30, message="the relist after the 410")
    lines = [json.loads(raw) for raw in agent.log if raw.strip()]
    assert len(lines) == len([raw for raw in agent.log if raw.strip()])
    assert all(FIELDS <= set(line) and line["k8s.node.name"] == "node-a" for line in lines), lines
    about_pod = [line for line in lines if "vm.neon.tech/usage ignored" in line["message"]]
    assert about_pod and about_pod[0]["k8s.pod.name"] == "broken-vm" and about_pod[0]["k8s.namespace.name"] == "neon"
    assert about_pod[0]["level"] == "WARNING" and about_pod[0]["k8s.pod.uid"] == bad["metadata"]["uid"]
    assert any("OTLP export failed" in line["message"] for line in lines)
    assert any("expired (410)" in line["message"] for line in lines)
