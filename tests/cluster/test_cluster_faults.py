"""Faults against the real control plane: an API server restart mid-watch, etcd compaction forcing 410 while pods
churn, and service-account token rotation. Each agent is started from the shipped DaemonSet as the kubelet would
(testkit/kubelet.py); where a test needs to see or break the network, a TCP proxy sits between the agent and the API
server (TLS passes through it untouched).

Soak forms: ``NRA_RESTART_DOWN_SECONDS`` (how long the API server stays down, default 5) and
``NRA_TOKEN_SECONDS`` (the first token's lifetime, default 10; 600 or more uses a plain TokenRequest, rotated at
80 % of its lifetime as the kubelet does).
"""

from __future__ import annotations

import base64
import json
import math
import os
import shutil
import subprocess
import time

import pytest

from testkit.cluster import ApiError, Cluster
from testkit.waiting import wait_until
from testkit.factory import container, for_create, pod
from testkit.kubelet import (AgentContainer, Deployment, deploy, prepare_agent_pod, start_agent_pod,
                                   wait_for_daemon_pod)
from testkit.kwok import Kwok
from testkit.otlp_receiver import HttpReceiver
from testkit.tcp_proxy import TcpProxy

pytestmark = pytest.mark.cluster

RESTART_DOWN_SECONDS = float(os.environ.get("NRA_RESTART_DOWN_SECONDS", "5"))
TOKEN_SECONDS = int(os.environ.get("NRA_TOKEN_SECONDS", "10"))
#: kube-apiserver validates service-account tokens with a minute of leeway for clock skew
TOKEN_LEEWAY_SECONDS = 60


@pytest.fixture
def proxied_agent(kwok: Kwok, deployed: Deployment, module_http_receiver: HttpReceiver, tmp_path):
    """start(node) adds a KWOK Node and runs its DaemonSet pod's agent, reaching the API server through a proxy."""
    agents: list[tuple[AgentContainer, TcpProxy]] = []

    def start(node: str, nodes: Kwok = kwok, deployment: Deployment = deployed) -> tuple[AgentContainer, TcpProxy]:
        target = nodes.cluster
        nodes.add_node(node, cpu="8", memory="16Gi")
        proxy = TcpProxy(target.ports["apiserver"]).start()
        agent = start_agent_pod(target, wait_for_daemon_pod(target, deployment, node), tmp_path / node,
                                module_http_receiver.endpoint, service_address=("127.0.0.1", proxy.port))
        agents.append((agent, proxy))
        agent.wait_ready()
        return agent, proxy

    yield start
    for agent, proxy in agents:
        code = agent.stop()
        proxy.stop()
        assert code == 0, f"agent exited {code}:\n{agent.tail()}"


def truth(target: Cluster, node: str) -> set[str]:
    """Every pod bound to ``node`` as the API server has them (terminating ones included, as the agent tracks)."""
    items = target.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName={node}")["items"]
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items}


def converged(target: Cluster, agent: AgentContainer, timeout: float = 60.0,
              lists: list[int] | None = None) -> set[str]:
    """Wait until the agent tracks exactly the pods bound to its node: nothing missed, no ghost. Each poll is one
    pod LIST of the test's own; ``lists`` (when given) receives their number, for tests that count the API
    server's reads."""
    last: dict[str, set[str]] = {}
    polls = lists if lists is not None else []
    polls.append(0)

    def same() -> bool:
        polls[-1] += 1
        last["api"], last["agent"] = truth(target, agent.node), set(agent.pods())
        return last["api"] == last["agent"]

    try:
        wait_until(same, timeout, interval=0.5)
    except AssertionError:
        raise AssertionError(f"agent on {agent.node}: missed {sorted(last['api'] - last['agent'])}, "
                             f"ghosts {sorted(last['agent'] - last['api'])}") from None
    return last["api"]


def create_pods(target: Cluster, namespace: str, node: str, names: list[str]) -> None:
    for name in names:
        target.api("POST", f"/api/v1/namespaces/{namespace}/pods",
                   for_create(pod(name, containers=[container("app", "100m", "64Mi")]), nodeName=node))


def delete_pods(target: Cluster, namespace: str, names: list[str]) -> None:
    """A graceful delete, returned once KWOK's pod-delete stage made the final one (as a kubelet does once the
    containers stopped), so what follows sees the pods gone."""
    paths = [f"/api/v1/namespaces/{namespace}/pods/{name}" for name in names]
    for path in paths:
        target.api("DELETE", path)
    wait_until(lambda: not any(target.exists(path) for path in paths), 30, interval=0.25,
               message=f"{names} removed by KWOK")


def backoff_attempts_bound(seconds: float, reflectors: int = 2) -> int:
    """The most connection attempts the agent's reflectors can make in ``seconds`` of refused connections: one at
    once, one after a resumed stream ends, then one after each backoff delay of at least 0.8 s * 2**n."""
    return reflectors * (2 + math.ceil(math.log2(seconds / 0.8 + 1)))


def flow_requests(target: Cluster, flow_schema: str = "service-accounts") -> float:
    """Requests API Priority and Fairness dispatched for one flow schema. ServiceAccounts outside kube-system land
    in "service-accounts": here, only agents (the controller-manager's are in kube-system's own schema)."""
    return sum(s["value"] for s in target.apiserver_metrics("apiserver_flowcontrol_dispatched_requests_total")
               if s.get("flow_schema") == flow_schema)


# --------------------------------------------------------------------------- API server restart


def test_apiserver_restart_mid_watch_loses_nothing_and_leaves_no_ghost(cluster: Cluster, proxied_agent) -> None:
    agent, proxy = proxied_agent("fault-restart")
    namespace = cluster.create_namespace("restart")
    create_pods(cluster, namespace, agent.node, [f"before-{i}" for i in range(4)])
    converged(cluster, agent)
    # Changes right before the stop: their events may still be in flight when the watch breaks.
    delete_pods(cluster, namespace, ["before-0", "before-1"])
    create_pods(cluster, namespace, agent.node, ["racing-0", "racing-1"])

    stopped = time.monotonic()
    back = cluster.restart_apiserver(down_seconds=RESTART_DOWN_SECONDS)
    attempts = proxy.attempts_between(stopped, back)
    # Changes right after it came back.
    create_pods(cluster, namespace, agent.node, ["after-0", "after-1"])
    delete_pods(cluster, namespace, ["racing-0"])
    own_lists: list[int] = []
    pods = converged(cluster, agent, lists=own_lists)
    resynced = time.monotonic()

    assert {p.split("/")[1] for p in pods if p.startswith(namespace)} == {"before-2", "before-3", "racing-1",
                                                                          "after-0", "after-1"}
    assert 1 <= attempts <= backoff_attempts_bound(back - stopped), (attempts, back - stopped)
    # After the restart no loop: the new API server (whose counters start with it) counts a handful of pod and
    # node LISTs and WATCHes in 20 s from every other client together (scheduler and controller-manager informers
    # included), and the agent relisted each resource at most once (410 from the new watch cache). The test's own
    # polls while waiting for convergence are pod LISTs too, as many as the wait took: not counted.
    time.sleep(max(0.0, 20 - (time.monotonic() - back)))
    after = flow_requests(cluster)
    reads = sum(s["value"] for s in cluster.apiserver_metrics("apiserver_request_total")
                if s.get("resource") in ("pods", "nodes") and s.get("verb") in ("LIST", "WATCH")) - sum(own_lists)
    assert after <= 12 and reads <= 30, (after, reads, sum(own_lists))
    runtime = agent.runtime()
    assert all(n <= 2 for n in runtime["relists"].values()), runtime["relists"]  # the first LIST and one more
    print(f"restart: down {back - stopped:.1f} s, {attempts} connection attempts meanwhile, resynced "
          f"{resynced - back:.1f} s after it was back; since then {after:.0f} agent requests (APF), {reads:.0f} pod and "
          f"node reads from all clients; watch starts {runtime['watch_starts']}")


# --------------------------------------------------------------------------- etcd compaction -> 410


@pytest.fixture(scope="module")
def etcd_served(tmp_path_factory) -> Kwok:
    """KWOK on a second cluster (``.cluster``) whose API server serves pods straight from etcd (watch cache off for
    pods): the configuration in which etcd's compaction reaches a client's watch. With the cache on (the module's
    cluster), a resumed watch is answered from the cache's own window, and a restart is what expires it."""
    target = Cluster(tmp_path_factory.mktemp("etcd-served"), apiserver_flags=["--watch-cache-sizes=pods#0"])
    try:
        target.start()
        with Kwok(target, workdir=target.workdir / "kwok") as nodes:
            yield nodes
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)
    finally:
        target.stop()


def test_compaction_while_pods_churn_forces_a_relist_without_ghosts(etcd_served: Kwok, proxied_agent) -> None:
    agent, proxy = proxied_agent("fault-compaction", etcd_served, deploy(etcd_served.cluster))
    target = etcd_served.cluster
    namespace = target.create_namespace("compaction")
    create_pods(target, namespace, agent.node, [f"old-{i}" for i in range(5)])
    converged(target, agent)
    before = agent.runtime()

    proxy.refuse()  # a partition: the agent's watches break and it cannot reconnect
    delete_pods(target, namespace, ["old-0", "old-1", "old-2"])
    create_pods(target, namespace, agent.node, [f"new-{i}" for i in range(6)])
    delete_pods(target, namespace, ["new-4", "new-5"])  # born and gone while the agent could not see
    target.etcd_compact(target.etcd_revision())
    proxy.accept()

    pods = converged(target, agent)
    after = agent.runtime()
    assert {p.split("/")[1] for p in pods if p.startswith(namespace)} == {"old-3", "old-4", "new-0", "new-1",
                                                                          "new-2", "new-3"}
    expired = after["requests_failed"].get("pods/expired", 0) - before["requests_failed"].get("pods/expired", 0)
    assert expired >= 1, after["requests_failed"]  # the real server said 410 Gone...
    assert after["relists"]["pods"] > before["relists"]["pods"]  # ...and the agent relisted


# --------------------------------------------------------------------------- token rotation


def reissue(token: str, signing_key, lifetime: int) -> str:
    """``token`` with a lifetime of ``lifetime`` seconds from now, signed with the API server's service-account key.

    TokenRequest refuses expirationSeconds below 600; everything else (issuer, audience, the bound pod, node and
    ServiceAccount with their uids) is the API server's own, and the API server validates it as its own.
    """
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header, payload, _ = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    now = int(time.time())
    claims.update(iat=now, nbf=now, exp=now + lifetime)
    claims.get("kubernetes.io", {}).pop("warnafter", None)
    signed = f"{header}.{b64(json.dumps(claims, separators=(',', ':')).encode())}"
    if not shutil.which("openssl"):
        raise RuntimeError("re-signing a token needs the openssl CLI (.ci/run installs it)")
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(signing_key)], input=signed.encode(),
                               stdout=subprocess.PIPE, check=True).stdout
    return f"{signed}.{b64(signature)}"


def accepted(target: Cluster, token: str, node: str) -> bool:
    try:
        # A LIST of its own Node, as the agent reads it (the agent's RBAC grants list and watch, no get).
        target.api("GET", f"/api/v1/nodes?fieldSelector=metadata.name%3D{node}", token=token)
        return True
    except ApiError as error:
        if error.status == 401:
            return False
        raise


def _agent_behind_a_proxy(cluster: Cluster, kwok: Kwok, deployed: Deployment, receiver: HttpReceiver, folder,
                          node: str) -> tuple[AgentContainer, TcpProxy]:
    """A KWOK Node and its DaemonSet pod's agent, prepared (not started), reaching the API server through a proxy
    a test can cut, so each request after the cut authenticates again."""
    kwok.add_node(node, cpu="8", memory="16Gi")
    proxy = TcpProxy(cluster.ports["apiserver"]).start()
    return prepare_agent_pod(cluster, wait_for_daemon_pod(cluster, deployed, node), folder, receiver.endpoint,
                             service_address=("127.0.0.1", proxy.port)), proxy


def test_token_rotated_on_disk_keeps_the_agent_working_after_the_old_one_expired(
        cluster: Cluster, kwok: Kwok, deployed: Deployment, module_http_receiver: HttpReceiver, tmp_path) -> None:
    node = "fault-token-rotation"
    agent, proxy = _agent_behind_a_proxy(cluster, kwok, deployed, module_http_receiver, tmp_path / node, node)
    volume = agent.serviceaccount
    try:
        if TOKEN_SECONDS >= 600:  # a TokenRequest can do it: the kubelet's own timing, rotation at 80 %
            first, rotate_after = volume.request_token(TOKEN_SECONDS), 0.8 * TOKEN_SECONDS
        else:  # rotated as soon as the agent has read the first one
            first, rotate_after = reissue(volume.request_token(), cluster.pki.key("sa"), TOKEN_SECONDS), 0.0
        expires = time.monotonic() + TOKEN_SECONDS
        volume.write_token(first)
        started = time.monotonic()
        agent.start()
        agent.wait_ready()
        print(f"token: agent ready {time.monotonic() - started:.1f} s after start")
        assert accepted(cluster, first, node)

        time.sleep(rotate_after)
        volume.write_token(volume.request_token())  # the kubelet's rotation: a fresh TokenRequest, swapped in
        wait_until(lambda: not accepted(cluster, first, node), TOKEN_SECONDS + TOKEN_LEEWAY_SECONDS + 30, interval=1.0,
                   message="the first token refused by the API server once expired")
        refused = time.monotonic()
        # Refused for expiry, not for something else: the API server accepts a token up to a minute past its
        # expiry (go-jose's DefaultLeeway for clock skew, as measured here).
        assert refused >= expires + TOKEN_LEEWAY_SECONDS - 5, refused - expires

        before = agent.runtime()
        proxy.cut()  # every connection gone: each request from now on authenticates again
        namespace = cluster.create_namespace("token")
        create_pods(cluster, namespace, node, ["after-expiry"])
        converged(cluster, agent)
        after = agent.runtime()
        assert sum(after["watch_starts"].values()) > sum(before["watch_starts"].values())
        assert not any(k.endswith("/unauthorized") for k in after["requests_failed"]), after["requests_failed"]
        print(f"token: first token refused {refused - expires:+.1f} s after its expiry; agent resynced "
              f"{time.monotonic() - refused:.1f} s later with the rotated one")
    finally:
        code = agent.stop()
        proxy.stop()
    assert code == 0, agent.tail()


def test_a_token_made_invalid_at_once_is_replaced_by_the_rotated_file_without_a_single_401(
        cluster: Cluster, kwok: Kwok, deployed: Deployment, module_http_receiver: HttpReceiver, tmp_path) -> None:
    """The agent starts with a token bound to another pod of its node; the kubelet's rotation swaps in one bound to
    the agent's own pod, and the first pod is deleted, which the API server makes its token invalid for at once.
    The agent's next request reads the changed file first (its stat changed), so not one request is refused. On
    main (the kubernetes package re-read the file once a minute) the requests right after were refused (401)."""
    node = "fault-token-bound"
    agent, proxy = _agent_behind_a_proxy(cluster, kwok, deployed, module_http_receiver, tmp_path / node, node)
    volume = agent.serviceaccount
    namespace, account = volume.pod["metadata"]["namespace"], volume.pod["spec"]["serviceAccountName"]
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}  # the namespace's PodSecurity
    holder = cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", for_create(
        pod("token-holder", namespace=namespace, containers=[{**container("app", "10m", "16Mi"),
                                                              "securityContext": restricted}]),
        nodeName=node, serviceAccountName=account))
    first = cluster.api("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
            "expirationSeconds": 3600, "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "token-holder",
                                                          "uid": holder["metadata"]["uid"]}}})["status"]["token"]
    try:
        volume.write_token(first)
        agent.start()
        agent.wait_ready()
        assert accepted(cluster, first, node)

        volume.write_token(volume.request_token())  # the kubelet's rotation
        delete_pods(cluster, namespace, ["token-holder"])
        wait_until(lambda: not accepted(cluster, first, node), 30, interval=0.5,
                   message="the first token refused once the pod it is bound to is gone")
        before = agent.runtime()
        proxy.cut()  # every connection gone: each request from now on authenticates again
        create_pods(cluster, cluster.create_namespace("token-bound"), node, ["after-rotation"])
        converged(cluster, agent)
        after = agent.runtime()
        assert sum(after["watch_starts"].values()) > sum(before["watch_starts"].values())
        assert not any(k.endswith("/unauthorized") for k in after["requests_failed"]), after["requests_failed"]
    finally:
        code = agent.stop()
        proxy.stop()
    assert code == 0, agent.tail()
