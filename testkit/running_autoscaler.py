"""The real cluster-autoscaler against the suite's control plane, with its kwok cloud provider.

The binary is the one ``components.autoscaler`` builds (1.36.1, or neon's patched 1.31.1, both ``-tags kwok``). The
kwok provider manages a node group of KWOK Nodes (testkit/kwok.py) the test creates and hands over with ``adopt``:
it never starts a machine, it deletes the Node object when the autoscaler removes a node. How it was made to run
against a local API server (KNOWLEDGE §6): ``KWOK_PROVIDER_MODE=local`` with ``KUBECONFIG`` (otherwise the provider
wants in-cluster configuration), its two ConfigMaps in ``--namespace`` (``POD_NAMESPACE`` too), the scale-down delays
at 0 (otherwise it waits 10 minutes after its start), and SIGKILL to stop it: on SIGTERM the kwok provider deletes
every node of its groups.

What the autoscaler did and said is read where an operator reads it: its /metrics (on a free loopback port), its
status ConfigMap, and its log at ``--v=4``, the only place it names a node's reason (``Node X cannot be removed:
ns/pod is not replicated``). Each log line is stamped with the wall-clock time it was read, so what it said can be
put beside the agent's series in Prometheus at the same moment.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from testkit.cluster import ApiError, Cluster, free_ports, parse_prometheus_text
from testkit.http import http_get
from testkit.waiting import wait_until

__all__ = ["DRAIN_REASONS", "GROUP_ANNOTATION", "GROUP_LABEL", "LogLine", "RunningAutoscaler", "Sample", "Said",
           "UNREMOVABLE_REASONS"]

#: The label that names a node's group (the provider's ``nodegroups.fromNodeLabelKey``) and the annotation the
#: provider itself puts on the nodes it makes (``NGNameAnnotation``).
GROUP_LABEL = "kwok-nodegroup"
GROUP_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/name"
_SIZE_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/{}-count"
_KWOK_MANAGED = ("kwok.x-k8s.io/node", "fake")
STATUS_CONFIGMAP = "cluster-autoscaler-status"

#: ``cluster_autoscaler_unremovable_nodes_count{reason}`` labels the reason with the number of its
#: ``simulator.UnremovableReason`` (an iota enum with no String method, simulator/cluster.go); the enum differs
#: between releases (1.36.1 added NodeGroupMaxDeletionCountReached, AtomicScaleDownFailed, NoNodeInfo and
#: BlockedByOnCompletionPod), so its names are listed per build, in the enum's order.
UNREMOVABLE_REASONS: dict[str, tuple[str, ...]] = {
    "1.36.1": ("NoReason", "ScaleDownDisabledAnnotation", "ScaleDownUnreadyDisabled", "NotAutoscaled",
               "NotUnneededLongEnough", "NotUnreadyLongEnough", "NodeGroupMinSizeReached",
               "NodeGroupMaxDeletionCountReached", "AtomicScaleDownFailed", "MinimalResourceLimitExceeded",
               "CurrentlyBeingDeleted", "NotUnderutilized", "NotUnneededOtherReason", "RecentlyUnremovable",
               "NoPlaceToMovePods", "BlockedByPod", "UnexpectedError", "NoNodeInfo", "BlockedByOnCompletionPod"),
    "neon": ("NoReason", "ScaleDownDisabledAnnotation", "ScaleDownUnreadyDisabled", "NotAutoscaled",
             "NotUnneededLongEnough", "NotUnreadyLongEnough", "NodeGroupMinSizeReached",
             "MinimalResourceLimitExceeded", "CurrentlyBeingDeleted", "NotUnderutilized", "NotUnneededOtherReason",
             "RecentlyUnremovable", "NoPlaceToMovePods", "BlockedByPod", "UnexpectedError"),
}

#: The drain rules' error texts (simulator/drainability/rules/*/rule.go, the same in both builds) and the reason the
#: agent gives the same rule (docs/metrics.md). The autoscaler logs the first blocking pod of a node only.
DRAIN_REASONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?P<pod>\S+) is not replicated$"), "not_replicated"),
    (re.compile(r"non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: (?P<pod>\S+)$"),
     "unmovable_kube_system"),
    (re.compile(r"pod annotated as not safe to evict present: (?P<pod>\S+)$"), "not_safe_to_evict"),
    (re.compile(r"pod with local storage present: (?P<pod>\S+)$"), "local_storage"),
    (re.compile(r"not enough pod disruption budget to move (?P<pod>\S+)$"), "not_enough_pdb"),
)

# klog's header ("I1205 07:30:00.123456   12345 file.go:151] "), then the message.
_KLOG = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\] (?P<msg>.*)$")
_BLOCKED = re.compile(r"^[Nn]ode (?P<node>\S+) cannot be removed: (?P<why>.*)$")
_ABOVE = re.compile(r"^Node (?P<node>\S+) unremovable: (?P<why>(?P<resource>\S+) requested \((?P<percent>[\d.e+-]+)% of "
                    r"allocatable\) is above the scale-down utilization threshold)$")
_DISABLED = re.compile(r"^Skipping (?P<node>\S+) from delete consideration - the node is marked as no scale down$")
# utilization.Info printed with %v: its last two fields are the resource that gave the node's utilization, and it.
_REMOVING = re.compile(r'^Scale-down: removing (?:empty node "(?P<empty>[^"]+)"|node (?P<node>\S+), '
                       r'(?P<why>utilization: \{[^}]* (?P<resource>\S+) (?P<utilization>[\d.e+-]+)\}.*))$')
_UNDER = re.compile(r"^Node (?P<node>\S+) - (?P<resource>\S+) requested is (?P<percent>[\d.e+-]+)% of allocatable$")
_UNNEEDED = re.compile(r"^(?P<node>\S+) is unneeded since (?P<since>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) "
                       r"(?P<zone>[+-]\d{4}) ")


@dataclass(frozen=True, kw_only=True)
class LogLine:
    """One line of the autoscaler's log and the wall-clock time (time.time()) it was read."""

    at: float
    text: str

    @property
    def message(self) -> str:
        match = _KLOG.match(self.text)
        return match["msg"] if match else self.text


@dataclass(frozen=True, kw_only=True)
class Said:
    """What the autoscaler said about one node: ``action`` "removed" or "kept", ``reason`` the agent's word for it (a
    drain reason, ``not_underutilized``, ``scale_down_disabled``, or ``removed``), ``detail`` its own words, and the
    node's utilization where its words give one; ``at`` its last line (the one it was read from), ``first`` the first
    line of the run."""

    node: str
    action: str
    reason: str
    detail: str
    at: float
    first: float = 0.0
    pod: str = ""
    utilization: float | None = None


@dataclass(frozen=True, kw_only=True)
class Sample:
    """The autoscaler's metrics and status ConfigMap read at ``at``."""

    at: float
    unneeded: float
    unremovable: dict[str, float] = field(default_factory=dict)
    status: dict = field(default_factory=dict)


def _go_time(text: str, zone: str) -> float:
    """A Go time.Time's String() ("2026-12-05 07:30:00.123456789 +0000") as epoch seconds."""
    whole, _, fraction = text.partition(".")
    stamp = dt.datetime.strptime(f"{whole} {zone}", "%Y-%m-%d %H:%M:%S %z").timestamp()
    return stamp + (float(f"0.{fraction}") if fraction else 0.0)


class RunningAutoscaler:
    """``cluster-autoscaler --cloud-provider=kwok`` for one node group of ``cluster``'s KWOK nodes.

    ``build``: the name ``components.autoscaler.autoscaler_bin`` takes ("1.36.1" or "neon"); ``namespace``: where its
    ConfigMaps live (it must exist); ``size``: the group's desired count, the nodes the test adopts (min 0, max the
    same, so it never scales up); ``flags``: the autoscaler's flags on top of the ones the kwok provider needs.
    """

    def __init__(self, cluster: Cluster, *, build: str, workdir: Path, namespace: str, group: str, size: int,
                 flags: Sequence[str] = ()) -> None:
        self.cluster, self.build, self.namespace, self.group, self.size = cluster, build, namespace, group, size
        self.workdir = Path(workdir)
        self.log_path = self.workdir / "cluster-autoscaler.log"
        (self.port,) = free_ports(1)
        self.flags = [
            "--cloud-provider=kwok", f"--namespace={namespace}", "--leader-elect=false",
            f"--address=127.0.0.1:{self.port}", *flags]
        self.lines: list[LogLine] = []
        self.samples: list[Sample] = []
        self._proc: subprocess.Popen | None = None
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()

    # ----------------------------------------------------------------- the node group

    @property
    def args(self) -> list[str]:
        """Its args as a Deployment would list them (no kubeconfig: in a pod it uses its ServiceAccount)."""
        return list(self.flags)

    def configure(self) -> None:
        """The kwok provider's two ConfigMaps: its config, and the group's template Node (a List, as it requires)."""
        config = {"apiVersion": "v1alpha1", "readNodesFrom": "configmap",
                  "nodegroups": {"fromNodeLabelKey": GROUP_LABEL}, "nodes": {"skipTaint": True},
                  "configmap": {"name": "kwok-provider-templates"}}
        sizes = {_SIZE_ANNOTATION.format("min"): "0", _SIZE_ANNOTATION.format("max"): str(self.size),
                 _SIZE_ANNOTATION.format("desired"): str(self.size)}
        template = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": f"{self.group}-template", "annotations": sizes,
                                 "labels": {GROUP_LABEL: self.group, "kubernetes.io/os": "linux"}},
                    "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                               "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}
        for name, key, value in (("kwok-provider-config", "config", config),
                                 ("kwok-provider-templates", "templates",
                                  {"apiVersion": "v1", "kind": "List", "items": [template]})):
            self.cluster.api("POST", f"/api/v1/namespaces/{self.namespace}/configmaps",
                             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                              "data": {key: yaml.safe_dump(value)}})

    def adopt(self, node: str) -> None:
        """Hand a KWOK Node to the group as the provider's own nodes look: its group label and annotation, and a
        ``kwok:`` providerID (nodes with another are not the provider's)."""
        self.cluster.api("PATCH", f"/api/v1/nodes/{node}", {
            "metadata": {"labels": {GROUP_LABEL: self.group},
                         "annotations": {GROUP_ANNOTATION: self.group, _KWOK_MANAGED[0]: _KWOK_MANAGED[1]}},
            "spec": {"providerID": f"kwok:{node}"}})

    # ----------------------------------------------------------------- the process

    def start(self, timeout: float = 90.0, sample_interval: float = 1.0) -> RunningAutoscaler:
        """Launch, wait for its /health-check and its first loop's metrics, and sample them every
        ``sample_interval`` seconds from then on."""
        from components.autoscaler import autoscaler_bin

        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [str(autoscaler_bin(self.build) / "cluster-autoscaler"), *self.flags,
                f"--kubeconfig={self.cluster.admin_kubeconfig}"]
        env = {**os.environ, "KWOK_PROVIDER_MODE": "local", "KUBECONFIG": str(self.cluster.admin_kubeconfig),
               "POD_NAMESPACE": self.namespace}
        self.log_path.write_text(f"$ {shlex.join(argv)}\n")
        self._proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self._spawn(self._read_log, "log")
        try:
            wait_until(self._looped, timeout, interval=0.5, message="cluster-autoscaler's first loop (its metrics)")
        except AssertionError as error:
            self.kill()
            raise AssertionError(f"{error}\n{self.tail()}") from None
        self._spawn(lambda: self._sample(sample_interval), "sampler")
        return self

    def _spawn(self, target, name: str) -> None:
        thread = threading.Thread(target=target, name=f"cluster-autoscaler-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _read_log(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        with open(self.log_path, "ab") as out:
            for raw in self._proc.stdout:
                out.write(raw)
                self.lines.append(LogLine(at=time.time(), text=raw.decode(errors="replace").rstrip("\n")))

    def _looped(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise AssertionError(f"cluster-autoscaler exited with {self._proc.returncode}:\n{self.tail()}")
        try:
            text = self.metrics_text()
        except OSError:
            return False
        return bool(parse_prometheus_text(text, "cluster_autoscaler_unneeded_nodes_count"))

    def _sample(self, interval: float) -> None:
        while not self._stopping.wait(interval):
            try:
                self.samples.append(self.sample())
            except (OSError, AssertionError, ApiError):
                continue  # a read that failed while the machine is busy; the next one counts

    def kill(self) -> None:
        """SIGKILL, never SIGTERM: on a graceful exit the kwok provider deletes every node of its groups."""
        self._stopping.set()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(15)
        for thread in self._threads:
            thread.join(15)

    # ----------------------------------------------------------------- what it says

    def metrics_text(self) -> str:
        status, body = http_get(f"http://127.0.0.1:{self.port}/metrics", timeout=5)
        assert status == 200, (status, body[:300])
        return body.decode()

    def sample(self) -> Sample:
        """Its metrics and status ConfigMap now: unneeded nodes, unremovable nodes by reason name."""
        at = time.time()
        text = self.metrics_text()
        names = UNREMOVABLE_REASONS[self.build]
        unneeded = sum(s["value"] for s in parse_prometheus_text(text, "cluster_autoscaler_unneeded_nodes_count"))
        unremovable = {names[int(s["reason"])]: s["value"]
                       for s in parse_prometheus_text(text, "cluster_autoscaler_unremovable_nodes_count")}
        return Sample(at=at, unneeded=unneeded, unremovable=unremovable, status=self.status())

    def status(self) -> dict:
        """Its status ConfigMap, parsed (YAML in both builds), {} before it wrote one."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{STATUS_CONFIGMAP}"
        if not self.cluster.exists(path):
            return {}
        return yaml.safe_load(self.cluster.api("GET", path).get("data", {}).get("status", "")) or {}

    def history(self) -> dict[str, list[Said]]:
        """Per node, what its log said about it in order, a run of the same statement kept as its last line (a
        blocked node is judged again every loop); a removal is the last word."""
        found: dict[str, list[Said]] = {}
        for line in list(self.lines):
            said = _said(line)
            if said is None:
                continue
            told = found.setdefault(said.node, [])
            if told and told[-1].action == "removed":
                continue
            if told and (told[-1].action, told[-1].reason) == (said.action, said.reason):
                told[-1] = replace(said, first=told[-1].first)
            else:
                told.append(replace(said, first=said.at))
        return found

    def unneeded_since(self, node: str, before: float) -> float | None:
        """When the autoscaler last started counting ``node`` unneeded before ``before`` (its own clock, from its
        ``X is unneeded since T`` lines at --v=4)."""
        since = None
        for line in list(self.lines):
            match = _UNNEEDED.match(line.message)
            if line.at <= before and match and match["node"] == node:
                since = _go_time(match["since"], match["zone"])
        return since

    def utilization_lines(self, node: str) -> list[tuple[float, str, float]]:
        """Every (time read, resource, utilization) its log gave ``node``, line by line: at or below the threshold
        (``Node X - cpu requested is 12.5% of allocatable``, for the first nodes of a loop), above it, and on removal
        (its utilization.Info)."""
        found = []
        for line in list(self.lines):
            message = line.message
            match = _UNDER.match(message) or _ABOVE.match(message)
            if match and match["node"] == node:
                found.append((line.at, match["resource"], float(match["percent"]) / 100))
            elif (match := _REMOVING.match(message)) and match["node"] == node and match["utilization"]:
                found.append((line.at, match["resource"], float(match["utilization"])))
        return found

    def tail(self, lines: int = 40) -> str:
        return "\n".join(line.text for line in self.lines[-lines:])


def _said(line: LogLine) -> Said | None:
    message = line.message
    if match := _REMOVING.match(message):
        return Said(node=match["empty"] or match["node"], action="removed", reason="removed", detail=message,
                    at=line.at, utilization=float(match["utilization"]) if match["utilization"] else None)
    if match := _BLOCKED.match(message):
        why = match["why"]
        for pattern, reason in DRAIN_REASONS:
            if found := pattern.search(why):
                return Said(node=match["node"], action="kept", reason=reason, detail=why, at=line.at,
                            pod=found["pod"])
        return Said(node=match["node"], action="kept", reason="other", detail=why, at=line.at)
    if match := _ABOVE.match(message):
        return Said(node=match["node"], action="kept", reason="not_underutilized", detail=match["why"], at=line.at,
                    utilization=float(match["percent"]) / 100)
    if match := _DISABLED.match(message):
        return Said(node=match["node"], action="kept", reason="scale_down_disabled",
                    detail="marked as no scale down", at=line.at)
    return None
