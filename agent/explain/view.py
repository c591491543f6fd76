"""``explain``: what the agent would export for a dump of pods (or a live cluster), node by node, and why.

Reading turns documents into pod and Node records (watch events applied in
order); ``valuation.evaluate`` values each pod; ``model.cluster`` groups them
per node, so each node is compared with its own pods only. The CLI does the
I/O and chooses the rules (``--kubernetes-version``; with ``--live`` the API
server's version; else the newest supported). Input that holds no pod is an
error that says what it did hold.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from agent.decode.reader import CONTROLLERS, NODE, PDB, POD, Skipped
from agent.model.autoscaler_settings import AutoscalerSettings
from agent.model.cluster import ClusterView, cluster_totals, group_by_node, order, sections
from agent.model.controllers import ControllerRecord, controller_index
from agent.model.node import NodeRecord
from agent.model.pdb import PdbRecord, as_kept, too_many_pdbs
from agent.model.pod import PodRecord
from agent.model.quantity import to_bytes, to_float
from agent.model.rules import KubernetesVersion, Rules
from agent.model.scale_down import Verdict, node_verdict
from agent.model.valuation import PodValue, evaluate
from agent.pipeline.events import DELETED
from agent.report.verdict_view import verdict_view
from agent.report.views import pod_report, summary_report, totals_report, verdict_report
from agent.source.documents import ClusterObjects, DumpError, changes, objects_in

__all__ = ["read_dump", "nodes_only", "NothingToExplain", "pods_dump", "explain_view", "explain_report",
           "explain_json", "rules_line", "verdicts", "HOW_TO_DUMP"]

HOW_TO_DUMP = "kubectl get nodes,pods -A -o json | node-requests-agent explain"


class NothingToExplain(DumpError):
    """The input parsed but holds no pod (or no Node where one was asked for)."""


def _apply(into: dict[Any, Any], keyed: Iterable[tuple[Any, Any]], deleted: bool) -> None:
    for key, record in keyed:
        if deleted:
            into.pop(key, None)
        else:
            into[key] = record


def read_dump(documents: Iterable[Any]) -> ClusterObjects:
    """Pods and Nodes the documents describe, watch events applied in order; plus what was skipped. PDBs and
    controllers count as known once the documents hold one (of any of the five controller kinds: a dump made with
    ``kubectl get nodes,pods,pdb,rs,jobs,sts,rc,ds -A -o json`` lists them all)."""
    pods: dict[str, PodRecord] = {}
    nodes: dict[str, NodeRecord] = {}
    pdbs: dict[str, PdbRecord] | None = None
    controllers: dict[tuple[str, str, str], ControllerRecord] | None = None
    skipped: list[Skipped] = []
    for change in changes(documents):
        node_records, bad_nodes = NODE.decode_all(change.nodes)
        pod_records, bad_pods = POD.decode_all(change.pods)
        pdb_records, bad_pdbs = PDB.decode_all(change.pdbs)
        skipped += bad_nodes + bad_pods + bad_pdbs
        deleted = change.type == DELETED
        _apply(nodes, ((n.name, n) for n in node_records), deleted)
        _apply(pods, ((p.uid, p) for p in pod_records), deleted)
        if change.pdbs or change.pdbs_only:
            pdbs = {} if pdbs is None else pdbs
            _apply(pdbs, ((p.uid, p) for p in pdb_records), deleted)
        if change.controllers:
            controllers = {} if controllers is None else controllers
            for kind, obj in change.controllers:
                found = CONTROLLERS[kind].decode(obj)
                if isinstance(found, Skipped):
                    skipped.append(found)
                else:
                    _apply(controllers, [((found.kind, found.namespace, found.name), found)], deleted)
    return ClusterObjects(list(pods.values()), list(nodes.values()), skipped,
                          None if pdbs is None else list(pdbs.values()),
                          controllers=None if controllers is None else list(controllers.values()))


def nodes_only(documents: list[Any], where: str) -> list[NodeRecord]:
    """The Node objects of a ``--node-file``; none is an error."""
    _require_objects(documents, where)
    nodes = read_dump(documents).nodes
    if not nodes:
        raise NothingToExplain(f"{where} holds no Node object ({found(documents)}); write one with "
                               f"kubectl get node NAME -o json > FILE")
    return nodes


def _kind(obj: Any) -> str:
    if isinstance(obj, dict):
        return str(obj.get("kind") or "object without a kind")
    return f"{type(obj).__name__} value"


def found(documents: list[Any]) -> str:
    """What the documents hold, for error messages: "found 3 Deployment, 1 Service"."""
    kinds = Counter(_kind(obj) for doc in documents for obj in objects_in(doc))
    lists = sum(1 for d in documents if isinstance(d, dict) and isinstance(d.get("items"), list))
    if not kinds:
        return "found an empty List" if lists else "found nothing"
    return "found " + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())


def _looks_like_kubectl_table(documents: list[Any]) -> bool:
    first = documents[0] if documents else None
    return isinstance(first, str) and first.split(maxsplit=1)[:1] in (["NAME"], ["NAMESPACE"])


def _require_objects(documents: list[Any], where: str) -> None:
    if not documents:
        raise NothingToExplain(f"{where} is empty: nothing to explain; run {HOW_TO_DUMP}")
    if _looks_like_kubectl_table(documents):
        raise NothingToExplain(f"{where} is kubectl's table output, not objects: add -o json ({HOW_TO_DUMP})")
    bad = next((d for d in documents if not isinstance(d, dict)), None)
    if bad is not None:
        raise DumpError(f"{where}: expected Kubernetes objects (JSON or YAML), {found(documents)}; run {HOW_TO_DUMP}")


def pods_dump(documents: list[Any], where: str = "the input") -> ClusterObjects:
    """The dump, where it holds at least one pod: input without one says what it held and what to run."""
    _require_objects(documents, where)
    dump = read_dump(documents)
    if not dump.pods:
        skipped = f"; {len(dump.skipped)} unidentifiable pods skipped" if dump.skipped else ""
        raise NothingToExplain(f"no Pod in {where} ({found(documents)}{skipped}); explain reads pods: run "
                               f"{HOW_TO_DUMP}")
    return dump


def rules_line(rules: Rules, version: KubernetesVersion | None = None, from_server: bool = False) -> str:
    """The table's first line: whose request arithmetic the values follow, and why."""
    if version is None:
        why = "the newest supported; --kubernetes-version X.Y chooses another"
    else:
        why = f"API server {version}" if from_server else f"--kubernetes-version {version}"
    return f"RULES  Kubernetes {rules} PodRequests ({why})"


def explain_view(pods: Iterable[PodRecord], nodes: Iterable[NodeRecord], rules: Rules, node: str | None = None,
                 sort: str = "busy") -> ClusterView:
    """Every pod valued under ``rules`` and grouped per node; ``node`` keeps only that node (an unknown name is an
    error)."""
    view = group_by_node(((r.node_name, evaluate(r, rules)) for r in pods), nodes)
    if node is not None:
        kept = tuple(g for g in view.nodes if g.name == node)
        if not kept:
            names = ", ".join(g.name for g in view.nodes) or "none"
            raise NothingToExplain(f"no Node {node!r} and no pod bound to it (nodes: {names})")
        view = ClusterView(kept, ())
    return order(view, sort)


def verdicts(view: ClusterView, pdbs: Iterable[PdbRecord] | None, settings: AutoscalerSettings, now: float,
             problems: tuple[str, ...] = (), controllers: Iterable[ControllerRecord] | None = None,
             max_pdbs: int | None = None) -> dict[str, Verdict]:
    """The cluster-autoscaler's verdict on every node of ``view`` at Unix time ``now``, the PDBs read as the agent
    keeps them (``max_pdbs`` at most, selectors within the agent's bounds: agent.model.pdb.as_kept); ``pdbs`` and
    ``controllers`` None: not known; ``problems`` (why the PDBs or controllers could not be read) are added to each."""
    known: list[PdbRecord] | None = None
    if pdbs is not None:
        known, _, held = as_kept(pdbs, max_pdbs=max_pdbs)
        if known is None:
            problems = (*problems, too_many_pdbs(held, max_pdbs))
    listers = None if controllers is None else controller_index(controllers)
    return {g.name: node_verdict(node_name=g.name, node=g.node, pods=g.pods, pdbs=known, settings=settings, now=now,
                                 controllers=listers, said=problems) for g in view.nodes}


def _cluster_report(view: ClusterView) -> dict[str, Any]:
    totals = cluster_totals(view)
    out: dict[str, Any] = {"nodes": totals.nodes, "nodes_without_allocatable": list(totals.nodes_without_allocatable),
                           "unscheduled_pods": totals.unscheduled, "ratios": {}}
    for key, resource, c, unit in (("cpu_cores", "cpu", totals.cpu, to_float),
                                   ("memory_bytes", "memory", totals.memory, to_bytes)):
        values = {q: unit(v) for q, v in c.quantities().items() if q in ("allocatable", "scheduled", "pod_or_vm")}
        if c.allocatable is not None:
            values["headroom"] = unit(c.allocatable - c.pod_or_vm) if c.allocatable >= c.pod_or_vm \
                else -unit(c.pod_or_vm - c.allocatable)
        out[key] = values
        out["ratios"][resource] = c.ratios().get("pod_or_vm_to_allocatable")
    return out


def explain_report(view: ClusterView, shown: Callable[[PodValue], bool] | None = None,
                   verdicts: dict[str, Verdict] | None = None) -> dict[str, Any]:
    """``pods`` (each with its ``node``), ``nodes`` (per-node comparisons, each with the ``autoscaler``'s verdict
    when ``verdicts`` has it), ``unscheduled``, ``cluster``, ``totals`` over the pods shown; ``node`` and
    ``autoscaler`` at the top too when exactly one node is in the answer."""
    groups, unscheduled = sections(view, shown)
    pods = [pod_report(v) | {"node": g.name} for g, values in groups for v in values]
    rows_unscheduled = [pod_report(v) | {"node": None} for v in unscheduled]
    verdicts = verdicts or {}
    nodes = [summary_report(g.summary)
             | ({"autoscaler": verdict_report(verdict_view(verdicts[g.name]))} if g.name in verdicts else {})
             for g, _ in groups]
    report: dict[str, Any] = {
        "pods": pods + rows_unscheduled,
        "totals": totals_report([v for _, values in groups for v in values] + unscheduled),
        "nodes": nodes,
        "unscheduled": rows_unscheduled,
        "cluster": _cluster_report(view),
    }
    if len(nodes) == 1:
        report["node"] = nodes[0]
        if "autoscaler" in nodes[0]:
            report["autoscaler"] = nodes[0]["autoscaler"]
    return report


def explain_json(view: ClusterView, rules: Rules, shown: Callable[[PodValue], bool] | None = None,
                 verdicts: dict[str, Verdict] | None = None) -> str:
    return json.dumps({"kubernetes_rules": rules.name, **explain_report(view, shown, verdicts)}, indent=2)
