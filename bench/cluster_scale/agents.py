"""The measured agents: one process per node, started from its DaemonSet pod as the kubelet would, and what they
report of themselves."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path

from testkit.kubelet import AGENT_CONTAINER, AgentContainer, ServiceAccountVolume, daemon_pods, prepare_agent_pod
from testkit.trust import TrustCluster


def collector_token(cluster: TrustCluster, agent: AgentContainer, folder: Path) -> None:
    """The DaemonSet's second projected volume (the Collector's audience), written as the kubelet writes it, and
    NRA_OTLP_TOKEN_FILE pointed at it: the mount path exists only inside a container."""
    container = next(c for c in agent.pod["spec"]["containers"] if c["name"] == AGENT_CONTAINER)
    mount = str(Path(agent.env["NRA_OTLP_TOKEN_FILE"]).parent)
    volume = ServiceAccountVolume(cluster, agent.pod, container, folder, mount_path=mount)
    volume.project()
    agent.env["NRA_OTLP_TOKEN_FILE"] = str(volume.token_path)


def prepare_agents(cluster: TrustCluster, deployment, nodes: list[str], workdir: Path, endpoint: str,
                   ca_file: str | None = None) -> list[AgentContainer]:
    pods = {p["spec"].get("nodeName"): p for p in daemon_pods(cluster, deployment)
            if not p["metadata"].get("deletionTimestamp")}
    missing = [n for n in nodes if n not in pods]
    if missing:
        raise RuntimeError(f"no DaemonSet pod on {missing[:5]}")
    agents = []
    for node in nodes:
        agent = prepare_agent_pod(cluster, pods[node], workdir / node, endpoint, otlp_ca_file=ca_file)
        collector_token(cluster, agent, workdir / node / "collector-token")
        agents.append(agent)
    return agents


def agent_pod_count(agent: AgentContainer) -> int | None:
    try:
        if not agent.ready():
            return None
        return len(agent.pods())
    except (OSError, ValueError, AssertionError):
        return None


def pods_of(agent: AgentContainer) -> dict[str, dict]:
    """The agent's /debug/pods, or nothing while it cannot answer."""
    try:
        return agent.pods()
    except (OSError, ValueError, AssertionError):
        return {}


def wait_each(agents: list[AgentContainer], done: Callable[[AgentContainer], bool], timeout: float) -> dict[str, float]:
    """Wall-clock time at which ``done(agent)`` first held, per node (polled round-robin)."""
    at: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    pending = list(agents)
    while pending:
        if time.monotonic() > deadline:
            first = [a.node for a in pending][:10]
            raise RuntimeError(f"{len(pending)} agents not there after {timeout:.0f} s: {first}")
        still = []
        for agent in pending:
            if done(agent):
                at[agent.node] = time.time()
            else:
                still.append(agent)
        pending = still
        if pending:
            time.sleep(0.2)
    return at


_LOG_TIME = "%Y-%m-%d %H:%M:%S,%f"


def log_events(agent: AgentContainer, marker: str, since: float) -> list[float]:
    """Wall-clock times of the agent's log lines containing ``marker`` after ``since`` (its text log format)."""
    out = []
    for line in agent.log.read_text(errors="replace").splitlines():
        if marker in line:
            try:
                at = dt.datetime.strptime(line[:23], _LOG_TIME).timestamp()
            except ValueError:
                continue
            if at >= since:
                out.append(at)
    return out
