"""``explain``: what the agent would export for a dump of pods, and why.

Pure rendering on top of ``valuation.evaluate``; the CLI does the reading and
chooses the rules (``--kubernetes-version``, else the newest supported).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agent.export.views import pods_report, sorted_values, summary_report
from agent.model.fields import DecodeError
from agent.model.node import NodeRecord
from agent.model.node_summary import QUANTITIES, RATIOS, pod_totals, summarize
from agent.model.pod import PodRecord
from agent.model.quantity import format_bytes, format_cores
from agent.model.rules import Rules
from agent.model.valuation import evaluate
from agent.source.typed_decode import node_record, pod_record
from agent.source.documents import DumpError, nodes_of, pods_of

__all__ = ["records_from_documents", "node_from_documents", "explain_json", "explain_table", "rules_line"]


def records_from_documents(documents: Iterable[Any]) -> tuple[list[PodRecord], list[str]]:
    """The pods a dump describes, watch events applied in order; plus what was skipped."""
    pods: dict[str, PodRecord] = {}
    skipped: list[str] = []
    for doc in documents:
        deleted = isinstance(doc, dict) and doc.get("type") == "DELETED" and "object" in doc
        for obj in pods_of(doc):
            try:
                record = pod_record(obj)
            except DecodeError as exc:
                skipped.append(str(exc))
                continue
            if deleted:
                pods.pop(record.uid, None)
            else:
                pods[record.uid] = record
    return list(pods.values()), skipped


def node_from_documents(documents: Iterable[Any], records: list[PodRecord]) -> NodeRecord | None:
    """The Node the pods are bound to (or the only Node) among the documents, if any."""
    nodes = []
    for doc in documents:
        for obj in nodes_of(doc):
            try:
                nodes.append(node_record(obj))
            except DecodeError as exc:
                raise DumpError(f"unusable Node object: {exc}") from None
    bound = {r.node_name for r in records if r.node_name}
    for node in nodes:
        if node.name in bound or len(nodes) == 1:
            return node
    return None


def rules_line(rules: Rules) -> str:
    return (f"Pod requests follow the Kubernetes {rules} rules (k8s.io/component-helpers v0.{rules.minor} PodRequests); "
            "--kubernetes-version X.Y chooses another supported release.")


def explain_json(records: Iterable[PodRecord], rules: Rules, node: NodeRecord | None = None) -> str:
    values = [evaluate(r, rules) for r in records]
    report = {"kubernetes_rules": rules.name, **pods_report(values)}
    if node is not None:
        report["node"] = summary_report(summarize(node.name, node, values, None))
    return json.dumps(report, indent=2)


def _q(value: int | None, cores: bool) -> str:
    if value is None:
        return "-"
    return format_cores(value) if cores else format_bytes(value)


def explain_table(records: Iterable[PodRecord], rules: Rules, node: NodeRecord | None = None) -> str:
    values = sorted_values(evaluate(r, rules) for r in records)
    header = f"{'POD':<48} {'PHASE':<10} {'SOURCE':<13} {'CPU':>9} {'MEMORY':>10}"
    lines = [rules_line(rules), "", header]
    for v in values:
        pod = f"{v.namespace}/{v.name}"
        source = v.source if v.reported else "not reported"
        lines.append(f"{pod:<48} {v.phase or '-':<10} {source:<13} {_q(v.cpu, True):>9} {_q(v.memory, False):>10}")
        for c in v.contributions:
            note = f"  {c.note}" if c.note else ""
            lines.append(f"    {c.kind:<10} {c.name:<33} {'':<13} {_q(c.cpu, True):>9} {_q(c.memory, False):>10}{note}")
        if v.vm is not None:
            role = f" ({v.vm.migration_role} of a live migration)" if v.vm.migration_role else ""
            lines.append(f"    vm usage   {v.vm.name + role:<47} {_q(v.vm.cpu, True):>9} {_q(v.vm.memory, False):>10}")
        for p in v.problems:
            lines.append(f"    problem: {p}")
        if not v.reported:
            lines.append(f"    not reported: phase {v.phase} pods hold no resources")
    totals = pod_totals(values)
    lines.append(f"{'TOTAL (' + str(totals.pods) + ' pods reported)':<73} {_q(totals.cpu, True):>9} {_q(totals.memory, False):>10}")
    if node is not None:
        lines.extend(_node_table(summarize(node.name, node, values, None)))
    return "\n".join(lines)


def _node_table(s) -> list[str]:
    lines = ["", f"NODE {s.node}", f"    {'QUANTITY':<14} {'CPU':>9} {'MEMORY':>10}"]
    cpu, mem = s.cpu.quantities(), s.memory.quantities()
    for q in QUANTITIES:
        if q in cpu or q in mem:
            lines.append(f"    {q:<14} {_q(cpu.get(q), True):>9} {_q(mem.get(q), False):>10}")
    cpu_r, mem_r = s.cpu.ratios(), s.memory.ratios()
    for name in RATIOS:
        if name in cpu_r or name in mem_r:
            c = f"{cpu_r[name]:.0%}" if name in cpu_r else "-"
            m = f"{mem_r[name]:.0%}" if name in mem_r else "-"
            lines.append(f"    {name:<26} cpu {c:>5}  memory {m:>5}")
    for p in s.problems:
        lines.append(f"    problem: {p}")
    return lines
