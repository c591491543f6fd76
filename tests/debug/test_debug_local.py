"""The debug endpoint is node-local (issue 21, item 5), over real sockets with the real agent behind it.

The agent listens as in the DaemonSet (every interface). "Another pod" is a client reaching it on a pod IP:
the tests that need one run the agent and its clients in a network namespace they make (``unshare --net``),
whose loopback device also carries a documentation address (192.0.2.10) standing for the pod IP, so a peer on
it is not a loopback peer and no packet leaves the namespace. ``kubectl port-forward`` arrives on loopback
inside the pod, as the loopback clients here do.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

from agent.config import ConfigError, from_sources
from agent.debug.endpoint import host_allowed, is_loopback
from agent.debug.page import REFRESH_RANGE, REFRESH_SECONDS, refresh_seconds
from testkit.repo import REPO
from testkit.http import raw_get
from testkit.waiting import wait_until
from testkit.factory import node, pod

VIEWS = ("/debug/pods", "/debug/node", "/debug/runtime", "/metrics", "/", "/index.html", "/no-such-path")
PROBES = ("/healthz", "/readyz")


@pytest.fixture
def everywhere(apiserver, make_agent):
    """The agent as the DaemonSet runs it: every interface, views local."""
    apiserver.create(node("node-a"), kind="nodes")
    apiserver.create(pod("secret-name-web"))

    def start(**overrides):
        agent = make_agent(debug_address=":0", **overrides)
        wait_until(lambda: agent.state.synced and len(agent.state) == 1)
        return agent
    return start


POD_IP = "192.0.2.10"  # TEST-NET-1, on the namespace's own loopback device


def in_pod_network(script: str) -> dict:
    """Run ``script`` (Python; it prints one JSON object) in a new network namespace where POD_IP is local."""
    setup = f"ip link set lo up && ip addr add {POD_IP}/32 dev lo && exec {sys.executable} -c \"$0\""
    proc = subprocess.run(["unshare", "--net", "sh", "-c", setup, textwrap.dedent(script)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"unshare --net (root and iproute2 needed) failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


AGENT_IN_POD = """
    import json, time
    from agent.run.agent import Agent
    from testkit.agents import agent_config
    from testkit.http import raw_get
    agent = Agent(agent_config(node_name="sample-node", replay="sample", exporter="none", debug_address=":0",
                               {overrides})).start()
    agent.drain()
    port, out = agent.debug.port, {{}}
    for name, (address, path, host) in {asks}.items():
        status, body = raw_get(address, port, path, host=host.replace("PORT", str(port)) if host else host)
        out[name] = [status, body.decode(errors="replace")[:2000]]
    agent.shutdown(final_export=False)
    print(json.dumps(out))
"""


def test_another_pod_reaches_the_probes_but_not_the_views():
    asks = {f"pod {path}": (POD_IP, path, "default") for path in PROBES + VIEWS}
    asks |= {f"{a} {path}": (a, path, "default") for a in ("127.0.0.1", "::1") for path in ("/debug/pods", "/metrics")}
    got = in_pod_network(AGENT_IN_POD.format(overrides="", asks=repr(asks)))
    for path in PROBES:
        assert got[f"pod {path}"][0] == 200, path  # the kubelet probes the pod IP
    for path in VIEWS:
        status, body = got[f"pod {path}"]
        assert status == 403, (path, status)
        assert "nightly-backup" not in body and "port-forward" in body, body
    # The same views answer on loopback (IPv4 and IPv6), where kubectl port-forward arrives.
    for address in ("127.0.0.1", "::1"):
        status, body = got[f"{address} /debug/pods"]
        assert status == 200 and "nightly-backup" in body, (address, status)
        assert got[f"{address} /metrics"][0] == 200


def test_views_refuse_a_rebound_host_name(everywhere):
    port = everywhere().debug.port
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "localhost.evil.example",
                 f"[::2]:{port}", "10.1.2.3"):
        for path in VIEWS:
            assert raw_get("127.0.0.1", port, path, host=host)[0] == 403, (host, path)
        assert raw_get("127.0.0.1", port, "/healthz", host=host)[0] == 200  # probes never check Host
    for host in (f"localhost:{port}", "localhost", "LOCALHOST.", f"127.0.0.1:{port}", f"127.5.6.7:{port}",
                 f"[::1]:{port}", None):  # None: no Host header, so no browser and no rebinding
        assert raw_get("127.0.0.1", port, "/debug/node", host=host)[0] == 200, host
    twice = b"Host: localhost\r\n"
    assert raw_get("127.0.0.1", port, "/debug/node", extra=twice)[0] == 400


def test_views_for_any_peer_still_check_the_host():
    asks = {"literal": (POD_IP, "/debug/pods", "default"),  # Host: the pod IP literal it connected to
            "configured": (POD_IP, "/debug/pods", "agent.example:PORT"),
            "rebound": (POD_IP, "/debug/pods", "evil.example"),
            "other-ip": (POD_IP, "/debug/pods", "198.51.100.7")}
    got = in_pod_network(AGENT_IN_POD.format(overrides='debug_views="any", debug_hosts=("agent.example",)',
                                             asks=repr(asks)))
    assert {name: status for name, (status, _) in got.items()} == {"literal": 200, "configured": 200,
                                                                    "rebound": 403, "other-ip": 403}


@pytest.mark.parametrize("query, expected", [
    ("", REFRESH_SECONDS), ("refresh=30", 30), ("refresh=0.001", 1), ("refresh=0", 1), ("refresh=-5", 1),
    ("refresh=1e9", 3600), ("refresh=inf", 3600), ("refresh=nan", REFRESH_SECONDS), ("refresh=abc", REFRESH_SECONDS),
    ("x=1&refresh=2.7", 2),
])
def test_the_page_refresh_is_clamped(everywhere, query, expected):
    port = everywhere().debug.port
    status, body = raw_get("127.0.0.1", port, f"/?{query}" if query else "/")
    assert status == 200
    (every,) = re.findall(rb'<body data-refresh="([^"]*)">', body)  # the period the page's script reloads at
    assert int(every) == expected and REFRESH_RANGE[0] <= expected <= REFRESH_RANGE[1]
    assert refresh_seconds(query) == expected


def test_address_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("10.0.0.5") and not is_loopback("::ffff:10.0.0.5") and not is_loopback("")
    assert host_allowed("10.0.0.5:8080", "::ffff:10.0.0.5")  # the pod IP on a dual-stack socket
    assert not host_allowed("10.0.0.6:8080", "10.0.0.5")
    assert host_allowed("[fd00::2]:8080", "fd00::2") and not host_allowed("[fd00::3]:8080", "fd00::2")


def test_configuration_of_the_views():
    base = {"node_name": "n"}
    assert from_sources(base, {}).debug_views == "local"
    assert from_sources(base, {"DEBUG_VIEWS": "any"}).debug_views == "any"
    assert from_sources({**base, "debug_views": "local"}, {"DEBUG_VIEWS": "any"}).debug_views == "local"
    with pytest.raises(ConfigError, match="^DEBUG_VIEWS must be local or any"):
        from_sources(base, {"DEBUG_VIEWS": "everyone"})
    assert from_sources(base, {"DEBUG_HOSTS": "a.example, b.example"}).debug_hosts == ("a.example", "b.example")
    assert from_sources({**base, "debug_host": ["c.example"]}, {"DEBUG_HOSTS": "a"}).debug_hosts == ("c.example",)
    with pytest.raises(ConfigError):
        from_sources(base, {"DEBUG_HOSTS": "http://x/"})


def test_the_daemonset_probes_are_the_unrestricted_paths():
    import yaml

    ds = yaml.safe_load((REPO / "daemonset" / "daemonset.yaml").read_text())
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert {container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"]} == set(PROBES)
    assert json.dumps(container).count("DEBUG_VIEWS") == 0  # views stay local as shipped
