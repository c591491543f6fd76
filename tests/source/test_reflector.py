"""The pod informer against the fake API server, over real HTTP, through the agent's own urllib3 transport."""

from __future__ import annotations

import time

from testkit.waiting import wait_until
from testkit.agents import pod_names
from testkit.factory import container, pod


def truth(apiserver, node="node-a") -> set[str]:
    return {p["metadata"]["name"] for p in apiserver.objects() if p["spec"]["nodeName"] == node}


def test_initial_list_then_watch_is_node_scoped_and_from_watch_cache(apiserver, make_agent):
    apiserver.create(pod("a1"))
    apiserver.create(pod("a2", phase="Pending"))
    apiserver.create(pod("b1", node="node-b"))
    agent = make_agent()
    wait_until(lambda: agent.state.synced and agent.state.node_listed and apiserver.count(watch=True) >= 1)
    assert pod_names(agent) == {"a1", "a2"}
    (_, first), (_, second) = apiserver.requests_to()[:2]
    assert first["fieldSelector"] == ["spec.nodeName=node-a"]
    assert first["resourceVersion"] == ["0"]
    assert "watch" not in first
    assert second["watch"] == ["true"]
    assert second["allowWatchBookmarks"] == ["true"]
    assert second["resourceVersion"] == [str(apiserver.resource_version)]
    assert 30 <= int(second["timeoutSeconds"][0]) <= 40
    (_, node_list), = apiserver.requests_to("/api/v1/nodes")[:1]
    assert node_list["fieldSelector"] == ["metadata.name=node-a"] and node_list["resourceVersion"] == ["0"]


def test_add_modify_delete_and_phase_changes_follow_the_api(apiserver, make_agent):
    agent = make_agent()
    wait_until(lambda: apiserver.count(watch=True) >= 1)
    p = apiserver.create(pod("job", containers=[container("c", "500m", "1Gi")]))
    apiserver.create(pod("elsewhere", node="node-b"))
    wait_until(lambda: pod_names(agent) == {"job"})
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "750m"
    apiserver.update(p)
    wait_until(lambda: agent.state.pods()[0].cpu == 750 * 10**6)  # nano-cores
    p["status"]["phase"] = "Succeeded"
    apiserver.update(p)
    wait_until(lambda: not agent.state.pods()[0].reported)
    apiserver.delete("default", "job")
    wait_until(lambda: pod_names(agent) == set())
    assert apiserver.count(watch=False) == 1


def test_bookmarks_advance_the_resource_version_and_resume_without_relist(apiserver, make_agent):
    apiserver.create(pod("a1"))
    agent = make_agent()
    wait_until(lambda: apiserver.count(watch=True) >= 1)
    apiserver.create(pod("other", node="node-b"))  # bumps the version; node-a never sees it
    target = str(apiserver.resource_version)
    wait_until(lambda: agent.state.snapshot().resource_version == target, message="bookmark seen")
    apiserver.drop_watches()
    wait_until(lambda: apiserver.count(watch=True) >= 2)
    assert apiserver.requests_to()[-1][1]["resourceVersion"] == [target]
    assert apiserver.count(watch=False) == 1


def test_server_timeout_ends_watch_cleanly_and_no_event_is_missed(apiserver, make_agent):
    agent = make_agent(watch_timeout=(1, 1))
    for i in range(6):
        apiserver.create(pod(f"p{i}"))
        time.sleep(0.4)
    wait_until(lambda: pod_names(agent) == truth(apiserver))
    assert apiserver.count(watch=True) >= 3
    assert apiserver.count(watch=False) == 1


def test_410_after_compaction_relists_and_leaves_no_ghosts(apiserver, make_agent):
    for name in ("stays", "goes", "changes"):
        apiserver.create(pod(name))
    agent = make_agent()
    wait_until(lambda: pod_names(agent) == {"stays", "goes", "changes"})
    apiserver.stop()
    apiserver.delete("default", "goes")
    changed = [p for p in apiserver.objects() if p["metadata"]["name"] == "changes"][0]
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    apiserver.update(changed)
    apiserver.create(pod("new"))
    apiserver.compact()
    apiserver.start()
    wait_until(lambda: pod_names(agent) == {"stays", "changes", "new"}, timeout=15)
    assert [p.cpu for p in agent.state.pods() if p.name == "changes"] == [2 * 10**9]
    assert apiserver.count(watch=False) == 2
    assert agent.stats.snapshot().requests_failed.get(("pods", "expired")) == 1


def test_410_as_http_status_relists(apiserver, make_agent):
    agent = make_agent()
    wait_until(lambda: apiserver.count(watch=True) >= 1)
    apiserver.fail_next(1, 410)
    apiserver.drop_watches()
    wait_until(lambda: apiserver.count(watch=False) == 2)
    apiserver.create(pod("after"))
    wait_until(lambda: pod_names(agent) == {"after"})


def test_failing_api_server_sees_backoff_not_a_hot_loop(apiserver, make_agent):
    agent = make_agent()
    wait_until(lambda: apiserver.count(watch=True) >= 1)
    apiserver.fail_next(1000, 500)
    apiserver.drop_watches()
    # The backoff schedule itself (0.8 s doubling, seven requests in a minute) is asserted exactly on virtual time
    # in test_reflector_decisions.test_a_500_storm_backs_off_exponentially; here: the real agent counts the 500s
    # it gets over HTTP and comes back when the server does.
    wait_until(lambda: agent.stats.snapshot().requests_failed.get(("pods", "http_500"), 0) >= 2, timeout=10)
    apiserver.clear_failures()
    apiserver.create(pod("recovered"))
    wait_until(lambda: pod_names(agent) == {"recovered"}, timeout=20)
    assert agent.stats.snapshot().requests_failed[("pods", "http_500")] >= 2


def test_429_retry_after_is_honoured(apiserver, make_agent):
    agent = make_agent()
    wait_until(lambda: apiserver.count(watch=True) >= 1)
    apiserver.fail_next(2, 429, retry_after=2)
    start = time.monotonic()
    apiserver.drop_watches()
    wait_until(lambda: apiserver.count(since=start) >= 3, timeout=30)  # two Retry-After waits behind a transport backoff, all jittered
    times = [t for t, _ in apiserver.requests_to(since=start)][:3]
    assert times[1] - times[0] >= 1.9 and times[2] - times[1] >= 1.9
    apiserver.create(pod("ok"))
    wait_until(lambda: pod_names(agent) == {"ok"})


def test_outage_then_recovery_restores_truth(apiserver, make_agent):
    """An API server outage (NRA_OUTAGE_SECONDS, default 3 in CI; the soak form is 60) while pods change."""
    import os

    outage = float(os.environ.get("NRA_OUTAGE_SECONDS", "3"))
    apiserver.create(pod("before"))
    apiserver.create(pod("deleted-during"))
    agent = make_agent()
    wait_until(lambda: pod_names(agent) == {"before", "deleted-during"})
    apiserver.stop()
    # While it is down, something on its port that drops every connection at once counts the agent's attempts.
    import socket
    import threading

    dead = socket.create_server(("127.0.0.1", apiserver.port))
    attempts: list[float] = []

    def drop_all():
        while True:
            try:
                conn, _ = dead.accept()
            except OSError:
                return
            attempts.append(time.monotonic())
            conn.close()

    threading.Thread(target=drop_all, daemon=True).start()
    down_at = time.monotonic()
    time.sleep(outage / 2)
    apiserver.create(pod("during"))
    apiserver.delete("default", "deleted-during")
    time.sleep(outage / 2)
    dead.shutdown(socket.SHUT_RDWR)  # unblocks accept(); close alone would not
    dead.close()
    rate = len(attempts) / (time.monotonic() - down_at)
    # Two watches (pods, Node), each backing off from 0.8 s: far below a hot loop.
    assert rate <= 3, f"{len(attempts)} connection attempts in {outage:.0f} s"
    apiserver.start()
    back = time.monotonic()
    wait_until(lambda: pod_names(agent) == truth(apiserver) == {"before", "during"}, timeout=45)
    recovery = time.monotonic() - back
    # Backoff is capped at 30 s (jittered): recovery never takes longer than one capped wait.
    assert recovery < 31, recovery
    print(f"recovered {recovery:.2f} s after a {outage:.0f} s outage; {len(attempts)} connection attempts during it")
    assert agent.stats.snapshot().requests_failed[("pods", "transport")] >= 1


def test_half_open_watch_is_ended_by_the_read_timeout(apiserver, make_agent):
    agent = make_agent(read_timeout=1.0)
    wait_until(lambda: apiserver.count(watch=True) >= 1)
    apiserver.hang_watches()
    apiserver.drop_watches()
    start = time.monotonic()
    wait_until(lambda: agent.stats.snapshot().watch_starts.get(("pods", "read_timeout"), 0) >= 2, timeout=6)
    hung = apiserver.count(watch=True, since=start)
    # One new watch per read timeout, each given up on: never stuck, never hot.
    assert 2 <= hung <= 4, hung
    apiserver.hang_watches(False)
    apiserver.create(pod("after-hang"))
    wait_until(lambda: pod_names(agent) == {"after-hang"}, timeout=5)


def test_unauthorized_is_retried_with_backoff(apiserver, make_agent, tmp_path):
    stale = apiserver.kubeconfig(tmp_path / "stale-kubeconfig")
    apiserver.token = "rotated"
    agent = make_agent(kubeconfig=stale)
    # That a 401 is backed off (0.8 s first) is asserted exactly on virtual time in
    # test_reflector_decisions.test_every_error_is_counted_backed_off_and_survived; here: a real 401 over HTTP is
    # classified as unauthorized and retried, and nothing is synced meanwhile.
    wait_until(lambda: agent.stats.snapshot().requests_failed.get(("pods", "unauthorized"), 0) >= 2, timeout=10)
    assert not agent.state.synced


def test_transport_uses_tcp_keepalive(apiserver, tmp_path):
    import socket

    from agent.config import ClusterAccess
    from agent.source.kube import KubeApi, load_configuration

    import os

    import psutil

    api = KubeApi(load_configuration(ClusterAccess(kubeconfig=apiserver.kubeconfig(tmp_path / "kc"))))
    try:
        # A watch holds its connection open; read the option off that very socket.
        stream = api.stream_lines("/api/v1/pods", {"watch": "true", "fieldSelector": "spec.nodeName=x",
                                                   "timeoutSeconds": "30"}, read_timeout=5)
        apiserver.create(pod("keepalive-probe", node="x"))
        next(stream)
        fds = [c.fd for c in psutil.Process().net_connections(kind="tcp")
               if c.raddr and c.raddr.port == apiserver.port and c.fd >= 0]
        assert fds, "no connection to the API server"
        for fd in fds:
            with socket.socket(fileno=os.dup(fd)) as s:
                assert s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        stream.close()
    finally:
        api.close()


def test_in_cluster_configuration_reads_the_service_account_folder(tmp_path):
    """Token and CA come from NRA_SERVICEACCOUNT_DIR when set (tests), else the kubelet's fixed folder."""
    import shutil

    import pytest

    from agent.config import SETTINGS, cluster_access
    from agent.source.kube import KubeConfigError, load_configuration
    from testkit.fake_apiserver import FakeApiServer

    server = FakeApiServer(tls=True)
    (tmp_path / "token").write_text("first-token")
    shutil.copy(server.ca_file, tmp_path / "ca.crt")
    folder_variable = SETTINGS["serviceaccount_dir"].env[0]
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", folder_variable: str(tmp_path)}
    endpoint = load_configuration(cluster_access(None, None, environ))
    assert endpoint.server == "https://10.96.0.1:443"
    assert endpoint.ca_file == str(tmp_path / "ca.crt")
    assert endpoint.tokens.authorization() == "Bearer first-token"
    with pytest.raises(KubeConfigError, match="in-cluster service account: .*missing/ca.crt: No such file"):
        load_configuration(cluster_access(None, None, {**environ, folder_variable: str(tmp_path / "missing")}))
    kubelets = cluster_access(None, None, {k: v for k, v in environ.items() if k != folder_variable})
    assert kubelets.in_cluster.serviceaccount_dir == "/var/run/secrets/kubernetes.io/serviceaccount"


def test_over_tls_the_agent_lists_and_watches_and_an_idle_agent_stops_at_once(tmp_path):
    """As against a real API server: HTTPS verified against the kubeconfig's CA. Its idle loops wait for seconds
    between looks at the stop event; shutdown tells each, so it still ends within a second."""
    from agent.run.agent import Agent
    from testkit.agents import agent_config
    from testkit.fake_apiserver import FakeApiServer

    apiserver = FakeApiServer(tls=True).start()
    try:
        apiserver.create(pod("a1"))
        agent = Agent(agent_config(node_name="node-a", kubeconfig=apiserver.kubeconfig(tmp_path / "kubeconfig"),
                                   exporter="none", read_timeout=5.0, watch_timeout=(30, 40))).start()
        try:
            wait_until(lambda: agent.state.synced and agent.state.node_listed and apiserver.count(watch=True) >= 1)
            apiserver.create(pod("a2"))
            wait_until(lambda: pod_names(agent) == {"a1", "a2"})
            assert apiserver.url.startswith("https://")
            assert agent.state.kubernetes.server_version == "v1.37.2"
            time.sleep(0.5)  # idle: every loop is waiting
        finally:
            took = agent.shutdown(final_export=False)
        assert took < 1.5, took
        assert not agent.running_loops
    finally:
        apiserver.stop()
