"""The agent's verdict against the cluster-autoscaler's own code, on generated nodes (issue 37).

Each example is a dump of several generated nodes (testkit/generated_nodes.py) with a combination of the autoscaler's
flags. The oracle of each build (1.36.1, and neon's patched 1.31.1) says what the release's own packages compute;
``explain --output json --at <the same moment>`` with the same flags and ``--autoscaler-release`` (1.36 / neon) says
what the agent computes. Per node they must agree on the utilization (cpu, memory, GPU and the node's value, bit for
bit, and the resource that gave it), the threshold, the state (disabled, unusable allocatable, underutilized or not)
and, per pod, blocked or free and the reason (the autoscaler's GetPodsToMove stops at the first blocking pod, the agent
lists every one: the oracle asks the rules about every pod, so the comparison is per pod).

Run: ``.venv/bin/python -m pytest tests/autoscaler -m autoscaler`` (builds the oracles on first use). The seed is
printed; ``NRA_DIFFERENTIAL_SEED=<seed>`` replays it, ``NRA_DIFFERENTIAL_NODES=<n>`` sets how many nodes per release
(default 5,000; CI runs the default, at least the 2,000 issue 37 asks). A failure shrinks to a few pods and prints the node's dump and both answers.

What a dump cannot show the agent, and is therefore not generated (not excluded after the fact): the node's group
(min size, per-group thresholds), whether pods fit elsewhere, DRA resource slices, the GPU labels of other cloud
providers (the oracle's kwok provider has one GPU label, testkit.generated_nodes.GPU_LABEL), --min-replica-count
(the agent has no such flag; its default 0 never blocks), node readiness and deletion taints.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent.model.quantity import QuantityError, parse_quantity
from hypothesis import HealthCheck, given, seed, settings

from testkit.autoscaler_oracle import AGENT_REASONS, ORACLE_RELEASES, AutoscalerOracle, NodeJudgement, exact
from testkit.generated_nodes import Generated, as_json, dumps
from tests.autoscaler.conftest import explain

pytestmark = pytest.mark.autoscaler

NODES_PER_RELEASE = int(os.environ.get("NRA_DIFFERENTIAL_NODES", "5000"))
EXAMPLES_PER_ROUND = 100


@dataclass(frozen=True, kw_only=True)
class Disagreement:
    """One thing the agent and the autoscaler's code answer differently: ``what`` is utilization, threshold, state,
    panic or pod (then ``pod`` is its uid)."""

    release: str  # the oracle's build: 1.36.1 or neon
    node: str
    what: str
    oracle: Any
    agent: Any
    pod: str = ""

    def __str__(self) -> str:
        where = f"{self.node}/{self.pod}" if self.pod else self.node
        return f"[{self.release}] {where} {self.what}: autoscaler {self.oracle!r}, agent {self.agent!r}"


@dataclass(frozen=True, kw_only=True)
class Seen:
    """What a predicate of KNOWN_UNTIL_MERGED sees: the disagreement, the dump, both answers for its node."""

    d: Disagreement
    generated: Generated
    oracle: NodeJudgement
    agent: dict[str, Any]
    # The agent's verdict on the node with every vm.neon.tech/usage annotation taken out (asked only for an upstream
    # release's utilization or state on a node with such pods): the same as the autoscaler's when the usage is why.
    agent_without_vm_usage: dict[str, Any] | None = None

    def pods(self) -> list[dict[str, Any]]:
        return self.generated.pods_of(self.d.node)

    def flag_true(self, name: str) -> bool:
        return self.generated.flag(name) == "true"


def _ratio_as_it_falls(n: NodeJudgement) -> bool:
    """A ratio over an allocatable the ignored pods took to zero or below: negative (-0.0 too), ±Inf or NaN."""
    u = n.utilization
    return u is not None and any(not math.isfinite(x) or math.copysign(1, x) < 0
                                 for x in (exact(u.cpu), exact(u.memory), exact(u.gpu)))


USAGE, OVERCOMMIT = "vm.neon.tech/usage", "vm.neon.tech/overcommit"


def has_vm_usage(pods: list[dict[str, Any]]) -> bool:
    return any(USAGE in p["metadata"].get("annotations", {}) for p in pods)


def _ceil(nano: int, unit: int) -> int:
    return -(-nano // unit)


def neon_reads_differently(pod: dict[str, Any]) -> bool:
    """Whether neon's patch reads the pod's annotations in one of the known ways the agent does not: a usage that is
    not an object of two quantity strings (JSON numbers, a missing field, null), or an overcommit factor that is zero
    (a panic) or does not divide the usage exactly (the patch truncates ``MilliValue()*1000/factor`` and
    ``Value()*1000/factor``). A usage or overcommit that does not decode leaves the pod alone in both."""
    annotations = pod["metadata"].get("annotations", {})
    try:
        usage = json.loads(annotations[USAGE])
        overcommit = json.loads(annotations.get(OVERCOMMIT, "{}"))
    except (KeyError, ValueError):
        return False
    if not isinstance(usage, dict) or any(not isinstance(usage.get(k), str) for k in ("cpu", "memory")):
        return True
    if not isinstance(overcommit, dict):
        return False
    try:
        amounts = {"cpu": _ceil(parse_quantity(usage["cpu"]), 10**6),
                   "memory": _ceil(parse_quantity(usage["memory"]), 10**9)}
        factors = {k: v if not isinstance(v, str) else _ceil(parse_quantity(v), 10**6) for k, v in overcommit.items()
                   if k in amounts and v is not None}
    except QuantityError:
        return False
    return any(not isinstance(f, int) or f == 0 or amounts[k] * 1000 % f for k, f in factors.items())


#: The disagreement classes known on main and being fixed in the agent on another branch (issue 37's "model" slice):
#: tolerated here until that branch is merged. THE LEAD EMPTIES THIS TABLE AT MERGE; nothing else is tolerated.
KNOWN_UNTIL_MERGED: dict[str, Callable[[Seen], bool]] = {
    # DaemonSet/mirror pods at or over the allocatable with the ignore flags: the autoscaler computes the ratio as it
    # falls (negative, over 1, ±Inf or NaN) and the other resource decides; the agent says the allocatable is unusable.
    "daemonset_mirror_at_or_over_allocatable": lambda s: (
        s.d.what in ("utilization", "state") and _ratio_as_it_falls(s.oracle)
        and (s.flag_true("ignore-daemonsets-utilization") or s.flag_true("ignore-mirror-pods-utilization"))),
    # neon's patch: JSON numbers and missing fields in the usage, truncating overcommit division, a zero factor's
    # panic: the verdict for release neon must be what neon's autoscaler computes.
    "neon_patch_arithmetic": lambda s: (
        s.d.release == "neon" and s.d.what in ("utilization", "state", "panic")
        and any(neon_reads_differently(p) for p in s.pods())),
    # Upstream releases do not read vm.neon.tech/usage: their verdict counts the pod's requests (the agent's verdict
    # without the annotations agrees).
    "upstream_releases_ignore_vm_usage": lambda s: (
        s.agent_without_vm_usage is not None
        and not any(x.what == s.d.what for x in compare(s.d.release, s.oracle, s.agent_without_vm_usage))),
    # With the dump's controllers the autoscaler's listers see a controller that is gone: ControllerNotFound.
    "controller_not_found": lambda s: s.d.what == "pod" and s.d.oracle == AGENT_REASONS["ControllerNotFound"],
}


def _same(a: Any, b: Any) -> bool:
    """Bit for bit for floats (NaN equal to NaN), equality otherwise."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def expected_state(n: NodeJudgement) -> str:
    """The agent's state for what the autoscaler decides: the annotation is read before the utilization."""
    if n.scale_down_disabled:
        return "scale_down_disabled"
    if n.utilization is None:
        return "allocatable_unusable"
    return "underutilized" if n.underutilized else "not_underutilized"


def compare(release: str, n: NodeJudgement, v: dict[str, Any] | None) -> list[Disagreement]:
    """Every difference between the oracle's judgement of a node and the agent's verdict on it."""
    def d(what: str, oracle: Any, agent: Any, pod: str = "") -> Disagreement:
        return Disagreement(release=release, node=n.node, what=what, oracle=oracle, agent=agent, pod=pod)

    if v is None:
        return [d("state", expected_state(n), None)]
    if n.panic:  # the running autoscaler would crash on these pods: the verdict must name them, nothing else counts
        return [d("panic", f"{pod}: {why}", v["problems"]) for pod, why in sorted(n.panic.items())
                if v["removable"] or not any(pod.split("/", 1)[1] in problem for problem in v["problems"])]
    out = []
    u, agent_u = n.utilization, v["utilization"]
    if u is None:
        if agent_u["value"] is not None:
            out.append(d("utilization", n.utilization_error, agent_u))
    else:
        keys = ("gpu", "value") if n.gpu is not None else ("cpu", "memory", "value")
        got = {k: agent_u[k] for k in keys} | {"resource": agent_u["resource"]}
        want = {k: exact(getattr(u, k)) for k in keys} | {"resource": u.resource}
        if any(not _same(want[k], float(got[k]) if isinstance(got[k], int) else got[k]) for k in want):
            out.append(d("utilization", want, got))
    if not _same(n.threshold, v["threshold"]):
        out.append(d("threshold", n.threshold, v["threshold"]))
    if expected_state(n) != v["state"]:
        out.append(d("state", expected_state(n), v["state"]))
    blocked = {p.uid: AGENT_REASONS.get(p.reason, p.reason) for p in n.pods if p.blocks}
    agent_blocked = {b["uid"]: b["reason"] for b in v["blockers"]}
    for uid in sorted(blocked.keys() | agent_blocked.keys()):
        if blocked.get(uid) != agent_blocked.get(uid):
            out.append(d("pod", blocked.get(uid), agent_blocked.get(uid), pod=uid))
    return out


def node_dump(generated: Generated, node: str) -> dict[str, Any]:
    """The part of the dump one node's verdict reads: the Node, its pods, the PDBs, the controllers."""
    keep = [o for o in generated.dump["items"]
            if (o["kind"] == "Node" and o["metadata"]["name"] == node)
            or (o["kind"] == "Pod" and o["spec"].get("nodeName") == node) or o["kind"] not in ("Node", "Pod")]
    return {"apiVersion": "v1", "kind": "List", "items": keep}


def known_class(seen: Seen) -> str | None:
    return next((name for name, applies in KNOWN_UNTIL_MERGED.items() if applies(seen)), None)


def disagreements(generated: Generated, oracles: dict[str, AutoscalerOracle], path: Path) -> list[Seen]:
    """Every disagreement on ``generated`` under each release, each with what it was seen on."""
    path.write_text(as_json(generated))
    found = []
    for build, release in ORACLE_RELEASES.items():
        answer = oracles[build].ask(generated.dump, flags=generated.flags, now=generated.now)
        verdicts = explain(path, release=release, flags=generated.flags, at=generated.now)
        without: dict[str, Any] | None = None
        for n in answer.nodes:
            v = verdicts.get(n.node)
            for d in compare(build, n, v):
                stripped = None
                if release != "neon" and d.what in ("utilization", "state") and has_vm_usage(generated.pods_of(n.node)):
                    without = without or _without_vm_usage(generated, path, release)
                    stripped = without.get(n.node)
                found.append(Seen(d=d, generated=generated, oracle=n, agent=v or {}, agent_without_vm_usage=stripped))
    return found


def _without_vm_usage(generated: Generated, path: Path, release: str) -> dict[str, Any]:
    """explain's verdicts on the dump with every vm.neon.tech/usage annotation taken out."""
    items = [copy.deepcopy(o) for o in generated.dump["items"]]
    for o in items:
        o["metadata"].get("annotations", {}).pop(USAGE, None)
    stripped = dataclasses.replace(generated, dump={**generated.dump, "items": items})
    other = path.with_name("without-vm-usage.json")
    other.write_text(as_json(stripped))
    return explain(other, release=release, flags=generated.flags, at=generated.now)


def report(seen: list[Seen]) -> str:
    first = seen[0]
    return "\n".join([f"{len(seen)} disagreement(s), not in KNOWN_UNTIL_MERGED:", *map(str, (s.d for s in seen)),
                      f"flags: {list(first.generated.flags)}; now {first.generated.now}",
                      f"the node's dump: {json.dumps(node_dump(first.generated, first.d.node))}",
                      f"autoscaler: {first.oracle}", f"agent: {json.dumps(first.agent)}"])


@pytest.mark.usefixtures("clean_env")
def test_the_agent_agrees_with_the_autoscalers_own_code(oracles, tmp_path):
    start = int(os.environ.get("NRA_DIFFERENTIAL_SEED") or random.randrange(2**32))
    print(f"differential seed {start} (replay: NRA_DIFFERENTIAL_SEED={start})")
    nodes = 0
    tolerated: dict[str, int] = {}
    path = tmp_path / "dump.json"

    @settings(derandomize=False, max_examples=EXAMPLES_PER_ROUND, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(dumps())
    def check(generated: Generated) -> None:
        nonlocal nodes
        nodes += generated.nodes
        unknown = []
        for s in disagreements(generated, oracles, path):
            name = known_class(s)
            if name is None:
                unknown.append(s)
            else:
                tolerated[name] = tolerated.get(name, 0) + 1
        assert not unknown, report(unknown)

    rounds = 0
    while nodes < NODES_PER_RELEASE:
        seed(start + rounds)(check)()
        rounds += 1
    print(f"{nodes} generated nodes per release ({', '.join(ORACLE_RELEASES)}) in {rounds} round(s); tolerated "
          f"until merged: {tolerated or 'none'}")
