"""A broken or hostile API server over real HTTP: the sources survive, skip and count, and never serve frozen numbers as fresh."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from testkit.waiting import wait_until
from testkit.agents import pod_names
from testkit.factory import pod
from testkit.http import get


@pytest.mark.parametrize("poison", [
    b"\xff\xfe not utf-8 \xc3\x28",
    json.dumps({"type": "SURPRISE", "object": {"kind": "Pod"}}).encode(),
    b'{"type": "MODIFIED", "object": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
    b"{ this is not json",
], ids=["not-utf8", "unknown-type", "nested-10000", "not-json"])
def test_a_poison_watch_line_is_skipped_and_later_events_arrive(apiserver, make_agent, poison):
    agent = make_agent()
    wait_until(lambda: agent.state.synced and apiserver.count(watch=True) >= 1)
    apiserver.inject_raw(poison)
    apiserver.create(pod("after-poison"))
    wait_until(lambda: "after-poison" in pod_names(agent), message="events after the poison line arrive")
    assert agent.stats.snapshot().skipped[("pods", "undecodable")] == 1
    assert apiserver.count(watch=False) == 1  # no relist loop: the watch went on


def test_a_list_keeps_every_good_item_around_bad_bytes_and_bad_json(apiserver, make_agent):
    apiserver.create(pod("good-1"))
    apiserver.create(pod("good-2"))
    apiserver.raw_list_items = ['{"metadata": {"name": "broken", "uid": "x",, }}', "[" * 10_000 + "]" * 10_000,
                                '{"kind": "Pod", "metadata": {"name": "bad-byte-\udcff", "namespace": "default", '
                                '"uid": "u-bad-byte"}, "spec": {"nodeName": "node-a", "containers": []}, '
                                '"status": {"phase": "Running"}}']
    agent = make_agent()
    wait_until(lambda: agent.state.synced)
    got = pod_names(agent)
    assert {"good-1", "good-2"} <= got and len(got) == 3  # the pod with one bad byte is kept, read with U+FFFD
    assert agent.stats.snapshot().skipped[("pods", "undecodable")] == 2


def test_a_line_over_the_limit_ends_the_watch_relists_and_keeps_memory_bounded(apiserver, make_agent):
    from agent.source.kube import MAX_LINE_BYTES

    agent = make_agent()
    wait_until(lambda: agent.state.synced and apiserver.count(watch=True) >= 1)
    apiserver.inject_raw(b'{"type": "ADDED", "object": {"x": "' + b"a" * (MAX_LINE_BYTES + 1024) + b'"}}')
    apiserver.create(pod("after-huge"))
    wait_until(lambda: "after-huge" in pod_names(agent), timeout=20)
    s = agent.stats.snapshot()
    assert s.requests_failed.get(("pods", "line_too_long")) == 1 and s.relists["pods"] == 2, (s.requests_failed, s.skipped, s.relists)


def test_pods_of_other_nodes_are_dropped_when_the_server_ignores_the_field_selector(apiserver, make_agent):
    apiserver.ignore_field_selector = True
    apiserver.create(pod("mine"))
    apiserver.create(pod("theirs", node="node-b"))
    agent = make_agent()
    wait_until(lambda: agent.state.synced)
    apiserver.create(pod("theirs-later", node="node-b"))
    apiserver.create(pod("mine-later"))
    wait_until(lambda: "mine-later" in pod_names(agent))
    assert pod_names(agent) == {"mine", "mine-later"}
    assert agent.stats.snapshot().skipped[("pods", "other_node")] == 2


def test_same_name_new_uid_replaces_the_old_pod_without_a_deleted_event(apiserver, make_agent):
    apiserver.create(pod("web", uid="uid-1"))
    agent = make_agent()
    wait_until(lambda: agent.state.synced)
    apiserver.create(pod("web", uid="uid-2"))  # recreated; the watch never saw uid-1's DELETED
    wait_until(lambda: {p.uid for p in agent.state.pods()} == {"uid-2"})
    assert len(agent.state) == 1


def test_a_tls_failure_never_ends_the_sources_and_fails_readiness_only(apiserver, make_agent, tmp_path):
    """A CA or scheme that does not match: every request is a TransportError (urllib3's SSLError), never a crash."""
    kubeconfig = tmp_path / "tls-kubeconfig"
    apiserver.kubeconfig(kubeconfig)
    kubeconfig.write_text(kubeconfig.read_text().replace("http://", "https://"))
    agent = make_agent(kubeconfig=str(kubeconfig), read_timeout=1.0, debug_address="127.0.0.1:0")
    port = agent.debug.port
    wait_until(lambda: agent.stats.snapshot().requests_failed.get(("pods", "transport"), 0) >= 2, timeout=20)
    wait_until(lambda: get(port, "/readyz")[0] == 503 and
               "stale" in json.loads(get(port, "/readyz")[2])["checks"].get("pods current", ""), timeout=10)
    # Both sources still run (they keep retrying with backoff): their loops are alive...
    checks = json.loads(get(port, "/healthz")[2])["checks"]
    assert checks["source:pods"] == "ok" and checks["source:nodes"] == "ok"
    # ...and stay alive however long it lasts: a restart cannot fix the API server (issue 21, item 6).
    time.sleep(6 * 1.0)  # past the five read timeouts after which liveness used to fail
    status, _, body = get(port, "/healthz")
    assert status == 200, body
    assert not any(k.startswith("progress:") for k in json.loads(body)["checks"])


def _agent_process(apiserver, tmp_path, *extra, **popen):
    env = {**os.environ, "DEBUG_ADDRESS": "off"}
    return subprocess.Popen([sys.executable, "-m", "agent", "run", "--node-name", "node-a", "--kubeconfig",
                             apiserver.kubeconfig(tmp_path / "kc"), "--exporter", "none", *extra], env=env,
                            stderr=subprocess.PIPE, text=True, **popen)


def test_sighup_is_logged_and_ignored_and_sigquit_dumps_stacks_then_exits_cleanly(apiserver, tmp_path):
    proc = _agent_process(apiserver, tmp_path, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: apiserver.count(watch=True) >= 1, timeout=20)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None, "SIGHUP must not kill the agent"
        proc.send_signal(signal.SIGQUIT)
        assert proc.wait(15) == 0
        err = proc.stderr.read()
        assert err.count("received SIGHUP") == 1 and "ignoring it" in err
        assert "Thread 0x" in err or "Current thread" in err  # faulthandler's stack dump
        assert "received SIGQUIT; exporting once more and exiting" in err
    finally:
        proc.kill()
        proc.communicate()


def test_a_closed_stdout_does_not_turn_into_a_traceback_loop(apiserver, tmp_path):
    read, write = os.pipe()
    os.close(read)  # whatever the agent prints goes nowhere: EPIPE on every write
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--node-name", "node-a", "--kubeconfig",
                             apiserver.kubeconfig(tmp_path / "kc"), "--exporter", "table", "--export-interval", "0.3"],
                            env={**os.environ, "DEBUG_ADDRESS": "off"}, stdout=write, stderr=subprocess.PIPE,
                            text=True)
    os.close(write)
    try:
        time.sleep(3)
        assert proc.poll() is None, "the agent must keep running"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.communicate()


def test_the_line_buffer_stops_at_the_limit_however_long_the_line():
    """Memory, measured where it is spent: 48 MiB without a newline never holds more than about one limit's worth."""
    import tracemalloc

    from agent.source.kube import LineTooLong, split_lines

    limit = 1024 * 1024

    def endless():
        chunk = b"a" * 65536
        for _ in range(48 * 16):
            yield chunk

    tracemalloc.start()
    try:
        with pytest.raises(LineTooLong):
            for _ in split_lines(endless(), limit):
                pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * limit, peak
