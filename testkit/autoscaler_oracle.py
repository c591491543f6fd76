"""The cluster-autoscaler's own code as a judge: a client of our oracle program (components/autoscaler_oracle/).

The oracle is compiled inside each autoscaler release's source tree (components/autoscaler.py), so what it answers
about a dump is what that release's packages compute: ``simulator/utilization.Calculate`` per node, the
scale-down-disabled annotation and the threshold comparison, the GPU configuration the kwok provider gives the node,
and ``rules.Default(options).Drainable`` per pod of the node's snapshot (filled through ``AllPodLister``, so neon's
patch applies in the neon build). One process per release answers a request per line (``--lines``).

    with AutoscalerOracle.start("neon") as oracle:
        answer = oracle.ask(dump, flags=["--ignore-daemonsets-utilization=true"], now="2026-12-05T10:00:00Z")
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["AutoscalerOracle", "Answer", "NodeJudgement", "PodJudgement", "OracleUtilization", "GpuConfig", "exact",
           "ORACLE_RELEASES", "AGENT_REASONS", "OracleError"]

#: The oracle builds (components.autoscaler.AUTOSCALERS) -> the agent's --autoscaler-release that names the same code.
ORACLE_RELEASES = {"1.36.1": "1.36", "neon": "neon"}

#: drain.BlockingPodReason's names (utils/drain) -> the agent's reasons (agent.model.scale_down.REASONS); the one
#: table the tests map the autoscaler's names through. ControllerNotFound and MinReplicasReached need the
#: controllers' listers; UnexpectedError is the autoscaler's own failure.
AGENT_REASONS = {"NotReplicated": "not_replicated", "UnmovableKubeSystemPod": "unmovable_kube_system",
                 "NotSafeToEvictAnnotation": "not_safe_to_evict", "LocalStorageRequested": "local_storage",
                 "NotEnoughPdb": "not_enough_pdb", "ControllerNotFound": "controller_not_found",
                 "MinReplicasReached": "min_replicas_reached", "UnexpectedError": "unexpected_error",
                 "BlockedByOnCompletionPod": "on_completion"}

_SPECIAL = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}


def exact(value: float | str) -> float:
    """A float as the oracle printed it (shortest round-trip form, so bit for bit), NaN and ±Inf from their names."""
    return _SPECIAL[value] if isinstance(value, str) else float(value)


class OracleError(RuntimeError):
    """The oracle refused the request (bad flags, bad dump) or died."""


class GpuConfig(msgspec.Struct, frozen=True, kw_only=True):
    """cloudprovider.GpuConfig as the kwok provider gives it for the node (gpu.GetNodeGPUFromCloudProvider)."""

    label: str
    type: str
    resource: str


class OracleUtilization(msgspec.Struct, frozen=True, kw_only=True):
    """utilization.Info: each ratio exactly as Go computed it (``exact`` turns "NaN"/"+Inf"/"-Inf" into floats)."""

    cpu: float | str
    memory: float | str
    gpu: float | str
    value: float | str
    resource: str


class PodJudgement(msgspec.Struct, frozen=True, kw_only=True):
    """One pod of the node's snapshot through the default drainability rules: the outcome (Undefined, DrainOk,
    BlockDrain, SkipDrain, WaitForCompletion), drain.BlockingPodReason's name when blocked, the status's error, and a
    Go panic in the rules if there was one."""

    namespace: str
    name: str
    uid: str
    outcome: str = ""
    reason: str = ""
    error: str = ""
    panic: str = ""

    @property
    def blocks(self) -> bool:
        """Whether the pod keeps the node: BlockDrain, or WaitForCompletion (1.36's oncompletion rule: the planner
        then keeps the node as BlockedByOnCompletionPod, core/scaledown/planner/planner.go)."""
        return self.outcome in ("BlockDrain", "WaitForCompletion")

    @property
    def blocking_reason(self) -> str:
        """drain.BlockingPodReason's name, or the planner's BlockedByOnCompletionPod for WaitForCompletion."""
        return "BlockedByOnCompletionPod" if self.outcome == "WaitForCompletion" else self.reason


class NodeJudgement(msgspec.Struct, frozen=True, kw_only=True):
    """What the release computes for one node; ``utilization`` None when Calculate returned an error
    (``utilization_error``), ``underutilized`` then None too; ``panic``: pods the pod lister panicked on (neon's patch
    dividing by a zero overcommit), "namespace/name" -> the panic, left out of the snapshot."""

    node: str
    scale_down_disabled: bool
    gpu: GpuConfig | None
    threshold: float
    utilization: OracleUtilization | None
    utilization_error: str = ""
    underutilized: bool | None
    pods: tuple[PodJudgement, ...]
    panic: dict[str, str] = {}


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    release: str  # version.ClusterAutoscalerVersion of the build that answered
    nodes: tuple[NodeJudgement, ...]
    error: str = ""

    def node(self, name: str) -> NodeJudgement:
        return next(n for n in self.nodes if n.node == name)


_DECODE = msgspec.json.Decoder(Answer)


class AutoscalerOracle:
    """One oracle process in line mode; ``ask`` sends a dump and returns its answer (OracleError if refused)."""

    def __init__(self, executable: Path) -> None:
        self.executable = executable
        self._proc = subprocess.Popen([str(executable), "--lines"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=False)

    @classmethod
    def start(cls, name: str) -> AutoscalerOracle:
        """The oracle of build ``name`` (a key of components.autoscaler.AUTOSCALERS), built on first use."""
        from components.autoscaler import oracle_bin

        return cls(oracle_bin(name) / "nra-autoscaler-oracle")

    def ask(self, dump: dict[str, Any], *, flags: Sequence[str] = (), now: str) -> Answer:
        """The answer for ``dump`` (a kubectl-style List) under the autoscaler's ``flags`` at RFC 3339 ``now``."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        line = json.dumps({"dump": dump, "flags": list(flags), "now": now}).encode() + b"\n"
        try:
            self._proc.stdin.write(line)
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise OracleError(f"{self.executable} exited ({self._proc.wait()})") from None
        reply = self._proc.stdout.readline()
        if not reply:
            raise OracleError(f"{self.executable} exited ({self._proc.wait()}) without answering")
        answer = _DECODE.decode(reply)
        if answer.error:
            raise OracleError(answer.error)
        return answer

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> AutoscalerOracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
