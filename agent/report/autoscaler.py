"""The text answer to "why is this node not scaled down?": the cluster-autoscaler's verdict on one node.

Utilization by resource against the threshold, the state, every pod that would block the node's removal with its
reason, the pods the autoscaler's release counts differently, whether PDBs were known, and what the verdict cannot
see. ``explain --node`` prints it whole; the demo prints its first lines and the blockers in brief. Pure formatting
of a ``VerdictView`` (verdict_view.py decides the words and the order).
"""

from __future__ import annotations

import textwrap

from agent.model.scale_down import Blocker
from agent.report.columns import Column, fit, row
from agent.report.verdict_view import VerdictView, plural

__all__ = ["verdict_lines", "DETAILS"]

BLOCKER_COLUMNS = (Column("  POD", shrink_to=20, shrink_first=1), Column("REASON"), Column("DETAIL", shrink_to=10))
DIFFERING_COLUMNS = (Column("  POD", shrink_to=20), Column("AUTOSCALER", right=True), Column("SCHEDULER", right=True),
                     Column("WHY", shrink_to=10))


def _utilization_line(v: VerdictView) -> str:
    """Every resource's utilization, the deciding one marked, the threshold, and whose arithmetic."""
    parts = [f"{r.resource} {r.text}" + (" (decides)" if r.decides else "") for r in v.resources]
    release = f"; as cluster-autoscaler {v.release} computes it" if v.release else ""
    return f"  UTILIZATION  {', '.join(parts)}; {v.threshold_name} {v.threshold_text}{release}"


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


DETAILS = ("line", "brief", "full")


def verdict_lines(v: VerdictView, width: int | None = 120, detail: str = "full") -> list[str]:
    """The verdict, at one of DETAILS: ``line`` (the headline and the blockers by reason: a node among many),
    ``brief`` (also one blocking pod per reason: the demo), ``full`` (utilization by resource, every blocker, the
    pods counted differently, problems, what the verdict cannot see: ``explain --node``)."""
    lines = _say(f"AUTOSCALER  {v.headline}", width)
    if detail == "full":
        lines.extend(_say(_utilization_line(v), width))
    if not v.blockers:
        lines.append("  BLOCKING  no pod blocks the node's removal")
    else:
        reasons = ", ".join(f"{reason} {n}" for reason, n in v.blocking_counts.items() if n)
        lines.extend(_say(f"  BLOCKING  {plural(len(v.blockers), 'pod')}: {reasons}", width))
    if v.blockers and detail != "line":
        shown = list(v.blockers)
        if detail == "brief":  # one pod per reason: what there is to read, in a few lines
            firsts: dict[str, Blocker] = {}
            for b in shown:
                firsts.setdefault(b.reason, b)
            shown = list(firsts.values())
        lines.extend(_blocker_rows(shown, width))
        if len(shown) < len(v.blockers):
            lines.extend(_say(f"  (one pod per reason; `node-requests-agent explain --node {v.node}` shows all "
                              f"{len(v.blockers)})", width))
    if v.pdb_risk and detail != "line":
        lines.extend(_say(f"  RISKY  {v.pdb_risk}", width))
    if not v.pdbs_known and detail != "line":
        lines.extend(_say(f"  PDBS  {v.pdbs}", width))
    if detail != "full":
        return lines
    if v.differing:
        lines.extend(_say(f"  DIFFERING  {plural(len(v.differing), 'pod')} counted differently by cluster-autoscaler "
                          f"{v.release} than by the scheduler (cpu / memory)", width))
        rows = [[f"  {d.pod}", d.autoscaler, d.scheduler, d.why] for d in v.differing]
        lines.extend(_table(DIFFERING_COLUMNS, rows, width))
    for problem in v.problems:
        lines.extend(_say(f"  problem: {problem}", width))
    lines.extend(_say("  CANNOT SEE  " + "; ".join(v.cannot_see), width))
    return lines
