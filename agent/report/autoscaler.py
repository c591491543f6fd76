"""The text answer to "why is this node not scaled down?": the cluster-autoscaler's verdict on one node.

Utilization by resource against the threshold, the state, every pod that would block the node's removal with its
reason, the pods the autoscaler's release counts differently, whether PDBs were known, and what the verdict cannot
see. ``explain --node`` prints it whole; the demo prints its first lines and the blockers in brief. Pure rendering
of a ``Verdict``.
"""

from __future__ import annotations

import textwrap

from agent.model.scale_down import (ALLOCATABLE_UNUSABLE, NOT_UNDERUTILIZED, REASONS, SCALE_DOWN_DISABLED,
                                    UNDERUTILIZED, Blocker, Verdict)
from agent.model.units import cores, memory, percent
from agent.report.columns import Column, fit, row
from agent.report.views import CANNOT_SEE

__all__ = ["verdict_lines", "headline", "ratio_text", "DETAILS"]

BLOCKER_COLUMNS = (Column("  POD", shrink_to=20, shrink_first=1), Column("REASON"), Column("DETAIL", shrink_to=10))
DIFFERING_COLUMNS = (Column("  POD", shrink_to=20), Column("AUTOSCALER", right=True), Column("SCHEDULER", right=True),
                     Column("WHY", shrink_to=10))


def ratio_text(ratio: float | None, threshold: float | None = None) -> str:
    """A ratio as a whole percentage, as everywhere else (``percent``); with more digits where that would hide its
    side of ``threshold`` (49.6% is not 50%, and the comparison is strict before 1.32: AT_OR_BELOW_FROM)."""
    if ratio is None:
        return "-"
    if threshold is None or ratio == threshold or percent(ratio) != percent(threshold):
        return percent(ratio)
    for digits in range(1, 7):
        text = f"{ratio * 100:.{digits}f}"
        if float(text) != round(threshold * 100, digits):
            return text + "%"
    return f"{ratio * 100!r}%"


def _relation(value: float, threshold: float) -> str:
    """The comparison as it came out (from 1.32 a node at its threshold counts as underutilized)."""
    return "<" if value < threshold else ">" if value > threshold else "="


def headline(v: Verdict) -> str:
    """One line: the state and the comparison that decided it."""
    u = v.utilization
    threshold = ("GPU threshold " if u.resource == "gpu" else "threshold ") + ratio_text(v.threshold)
    which = ("" if u.value is None else
             f"{u.resource} {ratio_text(u.value, v.threshold)} {_relation(u.value, v.threshold)} {threshold}")
    n = len(v.blockers)
    pods = f"{n} pod{'s' if n != 1 else ''}"
    if v.state == UNDERUTILIZED:
        tail = f"but {pods} block{'s' if n == 1 else ''} its removal" if n else "and nothing blocks its removal"
        return f"AUTOSCALER  underutilized: {which}, a scale-down candidate {tail}"
    if v.state == NOT_UNDERUTILIZED:
        tail = f"; {pods} would also block its removal" if n else ""
        return f"AUTOSCALER  not underutilized: {which}{tail}"
    if v.state == SCALE_DOWN_DISABLED:
        return ("AUTOSCALER  scale-down disabled by the Node's annotation "
                "cluster-autoscaler.kubernetes.io/scale-down-disabled=true" + (f" ({which})" if which else ""))
    if v.state == ALLOCATABLE_UNUSABLE:
        return "AUTOSCALER  allocatable unusable: the Node's allocatable gives no utilization (see the problems)"
    return "AUTOSCALER  unknown: no Node object to judge utilization against"


def _utilization_line(v: Verdict) -> str:
    """Every resource's utilization, the deciding one first, the threshold, and whose arithmetic."""
    u = v.utilization
    known = [(r, getattr(u, r)) for r in ("gpu", "cpu", "memory") if getattr(u, r) is not None]
    known.sort(key=lambda item: item[0] != u.resource)  # the one that gave the node's utilization first
    parts = [f"{r} {ratio_text(value, v.threshold)}" + (" (decides)" if r == u.resource and u.value is not None else "")
             for r, value in known] or ["unknown"]
    threshold = ("GPU threshold " if u.resource == "gpu" else "threshold ") + ratio_text(v.threshold)
    release = f"; as cluster-autoscaler {v.release} computes it" if v.release else ""
    return f"  UTILIZATION  {', '.join(parts)}; {threshold}{release}"


_REASON_ORDER = {reason: i for i, reason in enumerate(REASONS)}


def _say(text: str, width: int | None) -> list[str]:
    """A line of prose, wrapped to the terminal under its own first word (never cut: every word is the answer)."""
    if width is None or len(text) <= width:
        return [text]
    body = text.lstrip(" ")
    indent = len(text) - len(body)
    first = body.split("  ", 1)[0] if "  " in body else ""
    hang = indent + (len(first) + 2 if first and first.isupper() else 2)
    return textwrap.wrap(text, width, subsequent_indent=" " * min(hang, width // 2), break_on_hyphens=False,
                         drop_whitespace=True) or [text]


def _table(columns: tuple[Column, ...], rows: list[list[str]], width: int | None) -> list[str]:
    """A header and ``rows``; a last cell too long for the terminal goes on under itself rather than being cut."""
    widths = fit(columns, rows, width)
    lines = [row(columns, widths, [c.title for c in columns])]
    blank = [""] * (len(columns) - 1)
    for cells in rows:
        wrap = width is not None and widths[-1] > 0
        parts = textwrap.wrap(cells[-1], widths[-1], break_on_hyphens=False) if wrap else [cells[-1]]
        lines.append(row(columns, widths, [*cells[:-1], parts[0] if parts else ""]))
        lines.extend(row(columns, widths, [*blank, more]) for more in parts[1:])
    return lines


def _blocker_rows(blockers: list[Blocker], width: int | None) -> list[str]:
    return _table(BLOCKER_COLUMNS, [[f"  {b.namespace}/{b.name}", b.reason, b.detail] for b in blockers], width)


def _reasons(v: Verdict) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in v.blocking_counts().items() if n)


DETAILS = ("line", "brief", "full")


def verdict_lines(v: Verdict, width: int | None = 120, detail: str = "full") -> list[str]:
    """The verdict, at one of DETAILS: ``line`` (the headline and the blockers by reason: a node among many),
    ``brief`` (also one blocking pod per reason: the demo), ``full`` (utilization by resource, every blocker, the
    pods counted differently, problems, what the verdict cannot see: ``explain --node``)."""
    lines = _say(headline(v), width)
    if detail == "full":
        lines.extend(_say(_utilization_line(v), width))
    if not v.blockers:
        lines.append("  BLOCKING  no pod blocks the node's removal")
    else:
        lines.extend(_say(f"  BLOCKING  {len(v.blockers)} pod{'s' if len(v.blockers) != 1 else ''}: {_reasons(v)}",
                          width))
    if v.blockers and detail != "line":
        ordered = sorted(v.blockers, key=lambda b: (_REASON_ORDER.get(b.reason, len(REASONS)), b.namespace, b.name))
        if detail == "brief":  # one pod per reason: what there is to read, in a few lines
            firsts: dict[str, Blocker] = {}
            for b in ordered:
                firsts.setdefault(b.reason, b)
            ordered = list(firsts.values())
        lines.extend(_blocker_rows(ordered, width))
        if len(ordered) < len(v.blockers):
            lines.extend(_say(f"  (one pod per reason; `node-requests-agent explain --node {v.node}` shows all "
                              f"{len(v.blockers)})", width))
    if v.pdb_risks and detail != "line":
        lines.extend(_say("  RISKY  " + "; ".join(
            f"PodDisruptionBudget {r.namespace}/{r.name} allows {r.disruptions_allowed} disruption"
            f"{'s' if r.disruptions_allowed != 1 else ''} and covers {r.pods} of the node's pods" for r in v.pdb_risks)
            + ": the autoscaler still counts the node removable, but its pods cannot all be evicted at once "
              "(the drain may time out)", width))
    if not v.pdbs_known and detail != "line":
        lines.extend(_say("  PDBS  not known: a kube-system pod is shown as blocking unless a PodDisruptionBudget "
                          "covers it", width))
    if detail != "full":
        return lines
    if v.differing:
        lines.extend(_say(f"  DIFFERING  {len(v.differing)} pod{'s' if len(v.differing) != 1 else ''} counted "
                          f"differently by cluster-autoscaler {v.release} than by the scheduler (cpu / memory)",
                          width))
        rows = [[f"  {d.namespace}/{d.name}", f"{cores(d.cpu)} / {memory(d.memory)}",
                 f"{cores(d.scheduler_cpu)} / {memory(d.scheduler_memory)}", d.why]
                for d in sorted(v.differing, key=lambda d: (d.namespace, d.name))]
        lines.extend(_table(DIFFERING_COLUMNS, rows, width))
    for problem in v.problems:
        lines.extend(_say(f"  problem: {problem}", width))
    lines.extend(_say("  CANNOT SEE  " + "; ".join(CANNOT_SEE), width))
    return lines
