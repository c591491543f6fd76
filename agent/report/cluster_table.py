"""The text answer to "why is this node full?": one section per node, a cluster summary at the end.

Each section lists the node's pods (what each costs the cluster-autoscaler,
which term of the formula decided it, per-container contributions, a VM's
usage beside the runner's own spec requests) and ends with the node's
allocatable, scheduled, pod_or_vm, headroom and ratio. Pure rendering of a
``ClusterView``; units as ``agent.model.units`` renders them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from agent.model.cluster import ClusterView, NodeGroup, cluster_totals, order
from agent.model.cluster import sections as shown_sections
from agent.model.deciding import describe_terms
from agent.model.node_summary import QUANTITIES, RATIOS, Comparison
from agent.model.scale_down import Verdict
from agent.model.units import cores, memory, percent
from agent.model.valuation import PodValue
from agent.pipeline.state import NodeSnapshot
from agent.report.autoscaler import verdict_lines
from agent.report.columns import GAP, Column, clip, fit, row
from agent.report.verdict_view import verdict_view

__all__ = ["cluster_table", "node_section", "summary_rows", "agent_summary"]

POD_COLUMNS = (Column("POD", shrink_to=20, shrink_first=2), Column("PHASE", shrink_to=7, shrink_first=1),
               Column("SOURCE"), Column("DECIDED BY", shrink_to=12), Column("CPU", right=True),
               Column("MEMORY", right=True))
SUMMARY_COLUMNS = (Column("  RESOURCE"), Column("ALLOCATABLE", right=True), Column("SCHEDULED", right=True),
                   Column("POD_OR_VM", right=True), Column("HEADROOM", right=True), Column("RATIO", right=True))


def _q(value: int | None, resource: str) -> str:
    if value is None:
        return "-"
    return cores(value) if resource == "cpu" else memory(value)


def _pod_rows(v: PodValue, wide: bool = False) -> list[list[str] | str]:
    """The pod's row and its detail rows; a plain string is a free line (problems).

    Containers that request nothing are detail only ``-o wide`` shows.
    """
    source = v.source if v.reported else "-"
    rows: list[list[str] | str] = [[f"{v.namespace}/{v.name}", v.phase or "-", source, describe_terms(v),
                                    cores(v.cpu), memory(v.memory)]]
    for c in v.contributions:
        if c.cpu is None and c.memory is None and not c.note and not wide:
            continue
        rows.append([f"    {c.kind} {c.name}", "", "", c.note, _q(c.cpu, "cpu"), _q(c.memory, "memory")])
    if v.vm is not None:
        role = f" (migration {v.vm.migration_role})" if v.vm.migration_role else ""
        rows.append([f"    vm usage {v.vm.name}{role}", "", "", "annotation, before overcommit",
                     cores(v.vm.cpu), memory(v.vm.memory)])
        rows.append(["    runner spec requests", "", "", "what the scheduler reserved",
                     cores(v.spec_cpu), memory(v.spec_memory)])
    rows.extend(f"    problem: {p}" for p in v.problems)
    if not v.reported:
        rows.append(f"    not reported: phase {v.phase} pods hold no resources")
    return rows


def summary_rows(cpu: Comparison, mem: Comparison) -> list[list[str]]:
    """allocatable, scheduled, pod_or_vm, headroom (allocatable - pod_or_vm) and pod_or_vm / allocatable."""
    out = []
    for name, c in (("cpu", cpu), ("memory", mem)):
        headroom = None if c.allocatable is None else c.allocatable - c.pod_or_vm
        ratio = c.ratios().get("pod_or_vm_to_allocatable")
        out.append([f"  {name}", _q(c.allocatable, name), _q(c.scheduled, name), _q(c.pod_or_vm, name),
                    _q(headroom, name), percent(ratio)])
    return out


def _node_title(g: NodeGroup) -> str:
    reported = sum(1 for p in g.pods if p.reported)
    title = f"NODE {g.name}  {reported} pod{'s' if reported != 1 else ''}"
    if g.node is None:
        return title + "  (no Node object in the input: allocatable unknown)"
    return f"{title}  cpu {percent(g.ratio('cpu'))}, memory {percent(g.ratio('memory'))} of allocatable"


def _detail(widths: list[int], cells: list[str]) -> str:
    """A detail row: its label may use the empty PHASE and SOURCE cells too."""
    label_width = widths[0] + widths[1] + widths[2] + 2 * len(GAP)
    spans = (Column(""), Column(""), Column("", right=True), Column("", right=True))
    return row(spans, [label_width, *widths[3:]], [cells[0], *cells[3:]])


def _emit(rows: Iterable[list[str] | str], widths: list[int], width: int | None) -> list[str]:
    out = []
    for r in rows:
        if isinstance(r, str):
            out.append(clip(r, width))
        else:
            out.append(_detail(widths, r) if r[0].startswith(" ") else row(POD_COLUMNS, widths, r))
    return out


def node_section(g: NodeGroup, pods: list[PodValue], widths: list[int], width: int | None,
                 details: bool = True, verdict: Verdict | None = None, verdict_detail: str = "line") -> list[str]:
    """The node's title, the autoscaler's verdict on it (``verdict_detail`` as ``verdict_lines`` takes it), its
    pods and its comparison rows."""
    lines = [clip(_node_title(g), width)]
    if verdict is not None:
        lines.extend(verdict_lines(verdict_view(verdict), width, verdict_detail))
    lines.append(row(POD_COLUMNS, widths, [c.title for c in POD_COLUMNS]))
    for v in pods:
        rows = _pod_rows(v, wide=width is None)
        lines.extend(_emit(rows if details else rows[:1], widths, width))
    if not pods:
        lines.append("  (no pods)")
    s = g.summary
    summary = summary_rows(s.cpu, s.memory)
    widths_s = fit(SUMMARY_COLUMNS, summary, None)
    lines.append(row(SUMMARY_COLUMNS, widths_s, [c.title for c in SUMMARY_COLUMNS]))
    lines.extend(row(SUMMARY_COLUMNS, widths_s, r) for r in summary)
    lines.extend(clip(f"  problem: {p}", width) for p in s.problems)
    return lines


def comparison_rows(g: NodeGroup) -> list[str]:
    """Every node quantity and ratio (``-o wide``)."""
    cpu, mem = g.summary.cpu.quantities(), g.summary.memory.quantities()
    lines = [f"  {'QUANTITY':<26} {'CPU':>9} {'MEMORY':>10}"]
    for q in QUANTITIES:
        if q in cpu or q in mem:
            lines.append(f"  {q:<26} {_q(cpu.get(q), 'cpu'):>9} {_q(mem.get(q), 'memory'):>10}")
    cpu_r, mem_r = g.summary.cpu.ratios(), g.summary.memory.ratios()
    for name in RATIOS:
        if name in cpu_r or name in mem_r:
            lines.append(f"  {name:<26} {percent(cpu_r.get(name)):>9} {percent(mem_r.get(name)):>10}")
    return lines


def cluster_table(view: ClusterView, shown: Callable[[PodValue], bool] | None = None,
                  width: int | None = 120, wide: bool = False, verdicts: Mapping[str, Verdict] | None = None) -> str:
    """``view`` already ordered; ``shown`` picks pod rows (node sums always cover all of a node's pods);
    ``verdicts`` by node name: the whole verdict when the view holds one node, its headline among several."""
    sections, unscheduled = shown_sections(view, shown)
    limit = None if wide else width
    all_rows = [r for p in [*(p for _, pods in sections for p in pods), *unscheduled]
                for r in _pod_rows(p, wide) if not isinstance(r, str) and not r[0].startswith(" ")]
    widths = fit(POD_COLUMNS, all_rows, limit)
    lines: list[str] = []
    detail = "full" if len(view.nodes) == 1 else "line"
    for g, pods in sections:
        lines.extend(node_section(g, pods, widths, limit, verdict=(verdicts or {}).get(g.name), verdict_detail=detail))
        if wide:
            lines.extend(comparison_rows(g))
        lines.append("")
    if unscheduled:
        lines.append(clip(f"UNSCHEDULED  {len(unscheduled)} pod{'s' if len(unscheduled) != 1 else ''} without "
                          "spec.nodeName (counted in no node)", limit))
        lines.append(row(POD_COLUMNS, widths, [c.title for c in POD_COLUMNS]))
        for p in unscheduled:
            lines.extend(_emit(_pod_rows(p, wide), widths, limit))
        lines.append("")
    if len(view.nodes) > 1 or view.unscheduled:
        lines.extend(_cluster_lines(view, limit))
    return "\n".join(lines).rstrip("\n")


def _cluster_lines(view: ClusterView, width: int | None) -> list[str]:
    totals = cluster_totals(view)
    known = [g for g in view.nodes if g.busiest() is not None]
    busiest = max(known, key=lambda g: g.busiest() or 0.0) if known else None  # (known: never None)
    head = f"CLUSTER  {totals.nodes} node{'s' if totals.nodes != 1 else ''}"
    if totals.unscheduled:
        head += f", {totals.unscheduled} unscheduled pod{'s' if totals.unscheduled != 1 else ''} (in no node)"
    if busiest is not None:
        head += f"; busiest {busiest.name} at {percent(busiest.busiest())} of allocatable"
    summary = summary_rows(totals.cpu, totals.memory)
    widths = fit(SUMMARY_COLUMNS, summary, None)
    lines = [clip(head, width), row(SUMMARY_COLUMNS, widths, [c.title for c in SUMMARY_COLUMNS])]
    lines.extend(row(SUMMARY_COLUMNS, widths, r) for r in summary)
    if totals.nodes_without_allocatable:
        missing = ", ".join(totals.nodes_without_allocatable)
        lines.append(clip(f"  not in these sums (no Node object): {missing}", width))
    return lines


def agent_summary(snapshot: NodeSnapshot, now: float, top: int = 5, width: int | None = 120) -> str:
    """The agent's own node in brief (the demo prints it before the metric lines): totals, the cluster-autoscaler's
    verdict at Unix time ``now`` with its first blockers, and the top pods.

    Only ``run --once`` prints it, and that runs only on a replay: the node is the capture's, but ``used`` is read
    from this machine's /proc, so the note says whose it is rather than let it pass for the node's.
    """
    group = order(ClusterView((NodeGroup(snapshot.node_name, snapshot.node, snapshot.pods, snapshot.summary()),), ()))
    g = group.nodes[0]
    pods = [p for p in g.pods if p.reported][:top]
    widths = fit(POD_COLUMNS, [_pod_rows(p)[0] for p in pods], width)
    lines = node_section(g, pods, widths, width, details=False, verdict=snapshot.verdict(now), verdict_detail="brief")
    reported = sum(1 for p in g.pods if p.reported)
    lines.append(f"  (top {len(pods)} of {reported} pods; `node-requests-agent explain` shows each one and why)")
    if g.summary.cpu.used is not None or g.summary.memory.used is not None:
        lines.append(f"  (`used` below, and its ratios, is this machine's own /proc, not {g.name}'s: a replay has no "
                     "node to read)")
    return "\n".join(lines)
