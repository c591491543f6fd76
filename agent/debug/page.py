"""The debug endpoint's page, for a person who port-forwarded: a pure function of the snapshots.

The cluster-autoscaler's verdict first (state, utilization by resource against
the threshold, every pod that would block the node's removal, pods its release
counts differently, whether PDBs are known, what the verdict cannot see), then
the node comparison (every quantity, with its share of allocatable for cpu and
memory), what the cluster-autoscaler sees, every reported pod (sortable by any
column), agent health. It refreshes itself every few seconds (``?refresh=N``
changes the period, clamped to 1-3600 s so a link cannot make a browser reload
it in a tight loop) with a visible pause toggle, and says when it was
rendered. One small inline script and inline styles: nothing is fetched from
anywhere else, so it works on a node with no internet and leaks nothing.

The HTML, the style and the script are templates (``templates/``, filled by
``template.fragment``, which escapes every value); this module only picks the
values, and the verdict's words and order come from ``report.verdict_view``.
"""

from __future__ import annotations

import time

from agent.debug.template import NOTHING, SCRIPT, STYLE, Markup, fragment, join
from agent.model.node_summary import QUANTITIES, Comparison, pod_totals
from agent.model.problems import at_most
from agent.model.units import cores, memory, percent
from agent.pipeline.state import NodeSnapshot
from agent.report.verdict_view import VerdictView, verdict_view
from agent.report.views import MAX_PROBLEMS_SHOWN
from agent.telemetry.health import ProbeResult
from agent.telemetry.stats import StatsSnapshot

__all__ = ["render_page", "verdict_section", "refresh_seconds", "PAGE_ROWS", "REFRESH_SECONDS", "REFRESH_RANGE"]

REFRESH_SECONDS = 5
REFRESH_RANGE = (1, 3600)  # seconds: faster would be a reload loop against the agent, slower is "paused"


def _flag(value: bool) -> str:
    """A boolean as the page's data attributes spell it (as JSON does)."""
    return "true" if value else "false"


def _verdict_rows(v: VerdictView) -> tuple[Markup, Markup, Markup, Markup]:
    """The verdict's utilization rows, blockers, PDB risk and differing pods."""
    utilization = join(fragment("utilization_row", resource=r.resource, utilization=r.text,
                                threshold=v.threshold_text if r.decides else "") for r in v.resources)
    blockers = fragment("blockers", rows=join(
        fragment("blocker_row", pod=f"{b.namespace}/{b.name}", reason=b.reason, detail=b.detail)
        for b in v.blockers)) if v.blockers else fragment("no_blockers")
    risk = fragment("pdb_risk", risk=v.pdb_risk) if v.pdb_risk else NOTHING
    differing = fragment("differing", release=v.release, rows=join(
        fragment("differing_row", pod=d.pod, autoscaler=d.autoscaler, scheduler=d.scheduler, why=d.why)
        for d in v.differing)) if v.differing else NOTHING
    return utilization, blockers, risk, differing


def verdict_section(v: VerdictView) -> Markup:
    """The verdict on one screen: headline, utilization against the threshold, blockers, risks, differing pods, PDBs,
    what it cannot see, problems."""
    utilization, blockers, risk, differing = _verdict_rows(v)
    problems = fragment("problems", items=join(fragment("problem", problem=p) for p in v.problems)) \
        if v.problems else NOTHING
    return fragment("verdict", release=v.release_text, state=v.state, candidate=_flag(v.candidate),
                    removable=_flag(v.removable), headline=v.headline, utilization=utilization, blockers=blockers,
                    pdb_risk=risk, differing=differing, pdbs_known=_flag(v.pdbs_known), pdbs=v.pdbs,
                    cannot_see="; ".join(v.cannot_see), problems=problems)


def _share(c: Comparison, quantity: str) -> str:
    values = c.quantities()
    if quantity not in values or not values.get("allocatable"):
        return "-"
    return percent(values[quantity] / values["allocatable"])


def _comparison_rows(node: NodeSnapshot) -> Markup:
    """Every node quantity in cores and bytes, with its share of allocatable."""
    summary = node.summary()
    cpu, mem = summary.cpu.quantities(), summary.memory.quantities()
    return join(fragment("comparison_row", quantity=q,
                         cpu="-" if cpu.get(q) is None else cores(cpu[q]), cpu_share=_share(summary.cpu, q),
                         memory="-" if mem.get(q) is None else memory(mem[q]), memory_share=_share(summary.memory, q))
                for q in QUANTITIES)


def _facts(stats: StatsSnapshot) -> dict[str, str]:
    """The agent's own signals, in words."""
    last_export = stats.last_export_success_age_seconds
    ages = sorted(stats.last_event_age_seconds.items())
    return {
        "queue depth": str(stats.queue_depth),
        "events handled": str(stats.events_handled),
        "watch (re)starts": ", ".join(f"{r} {k} {n}" for (r, k), n in sorted(stats.watch_starts.items())) or "none",
        "relists": ", ".join(f"{r} {n}" for r, n in sorted(stats.relists.items())) or "none",
        "last event or bookmark": ", ".join(f"{r} {age:.1f} s ago" for r, age in ages) or "never",
        "last successful export": "never" if last_export is None else f"{last_export:.1f} s ago",
        "export results": ", ".join(f"{k} {n}" for k, n in sorted(stats.exports.items())) or "none yet",
    }


def _fact_rows(facts: dict[str, str]) -> Markup:
    return join(fragment("fact_row", name=name, value=value) for name, value in facts.items())


def refresh_seconds(query: str) -> int:
    """The page's refresh period from its query (``refresh=N``), clamped to REFRESH_RANGE; the default otherwise."""
    low, high = REFRESH_RANGE
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if name == "refresh":
            try:
                asked = float(value)
            except ValueError:
                return REFRESH_SECONDS
            if asked != asked:  # NaN
                return REFRESH_SECONDS
            return int(min(max(asked, low), high))
    return REFRESH_SECONDS


#: Pod rows the page shows at most, the largest by CPU first (more than a node's max-pods: an honest node shows all).
PAGE_ROWS = 500


def render_page(node: NodeSnapshot, stats: StatsSnapshot, live: ProbeResult, ready: ProbeResult, now: float,
                refresh: int = REFRESH_SECONDS) -> str:
    """The whole page; ``now`` is the Unix time it is rendered at (shown as "updated", and when the autoscaler's
    verdict is judged), ``refresh`` the seconds between reloads (already clamped by ``refresh_seconds``)."""
    pods = sorted((p for p in node.pods if p.reported), key=lambda p: (-p.cpu, -p.memory, p.namespace, p.name))
    totals = pod_totals(pods)
    shown = pods[:PAGE_ROWS]  # the largest: the page's size bounded whatever the node holds
    pod_rows = join(fragment("pod_row", namespace=p.namespace, name=p.name, cpu_sort=p.cpu, cpu=cores(p.cpu),
                             memory_sort=p.memory, memory=memory(p.memory), source=p.source,
                             problems="; ".join(at_most(p.problems, MAX_PROBLEMS_SHOWN))) for p in shown)
    rows_note = (f"the {len(shown):,} largest shown, {len(pods) - len(shown):,} more in /debug/pods"
                 if len(shown) < len(pods) else "")
    return fragment(
        "page", node=node.node_name, style=STYLE, script=SCRIPT, refresh=refresh,
        status="healthy" if live.ok and ready.ok else "degraded",
        updated_iso=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), updated_time=f"{now:.3f}",
        updated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now)),
        verdict=verdict_section(verdict_view(node.verdict(now))), comparison=_comparison_rows(node),
        pod_count=len(pods), rows_note=rows_note, pods=totals.pods, by_vm_usage=totals.by_vm_usage,
        cpu=cores(totals.cpu),
        memory=memory(totals.memory),
        pod_rows=pod_rows, health=_fact_rows({**live.checks, **ready.checks}), runtime=_fact_rows(_facts(stats)),
    ) + "\n"
