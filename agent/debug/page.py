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
"""

from __future__ import annotations

import html
import time

from agent.model.node_summary import QUANTITIES, Comparison, pod_totals
from agent.model.scale_down import Verdict as ScaleDownVerdict
from agent.model.units import cores, memory, percent
from agent.report.autoscaler import headline, ratio_text
from agent.report.views import CANNOT_SEE
from agent.telemetry.health import Verdict
from agent.pipeline.state import NodeSnapshot
from agent.telemetry.stats import StatsSnapshot

__all__ = ["render_page", "refresh_seconds", "verdict_section", "REFRESH_SECONDS", "REFRESH_RANGE"]

REFRESH_SECONDS = 5
REFRESH_RANGE = (1, 3600)  # seconds: faster would be a reload loop against the agent, slower is "paused"

_STYLE = """body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;white-space:nowrap}
th{background:#f3f3f3}#pods th{cursor:pointer;user-select:none}
#pods th[aria-sort=ascending]::after{content:" \\25B2"}#pods th[aria-sort=descending]::after{content:" \\25BC"}
td.problems{white-space:normal;min-width:14em}.scroll{overflow-x:auto;max-width:100%}.scroll table{margin-top:0}.n{text-align:right}.muted{color:#666}
.healthy{color:#176f2c}.degraded{color:#a11}
.verdict{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start}.verdict table{margin:.3em 0 .6em}
#verdict-state{font-weight:600;margin:.3em 0}#verdict-state.candidate{color:#176f2c}#autoscaler-blockers td.detail{white-space:normal;min-width:18em}
#bar{display:flex;gap:1em;align-items:center;margin:-.5em 0 1em}button{font:inherit;padding:.2em .8em}"""

# Refresh (unless paused), the age of the data, and sorting the pod table.
# The pause and the sort survive the reload through sessionStorage.
_SCRIPT = """(function () {
  var every = %(refresh)d;
  var store = window.sessionStorage, button = document.getElementById("pause");
  var paused = store.getItem("nra-paused") === "1";
  function show() {
    button.textContent = paused ? "Resume auto-refresh" : "Pause auto-refresh";
    button.setAttribute("aria-pressed", paused ? "true" : "false");
    document.getElementById("refresh-state").textContent = paused ? "auto-refresh paused" : "refreshes every " + every + " s";
  }
  button.addEventListener("click", function () { paused = !paused; store.setItem("nra-paused", paused ? "1" : "0"); show(); });
  show();
  setInterval(function () { if (!paused) location.reload(); }, every * 1000);
  var updated = document.getElementById("updated"), rendered = parseFloat(updated.dataset.time);
  function age() { document.getElementById("age").textContent = "(" + Math.max(0, Math.round(Date.now() / 1000 - rendered)) + " s ago)"; }
  age(); setInterval(age, 1000);
  var table = document.getElementById("pods"), heads = table.tHead.rows[0].cells, body = table.tBodies[0];
  function key(row, column) { var cell = row.cells[column]; return cell.dataset.sort !== undefined ? parseFloat(cell.dataset.sort) : cell.textContent.toLowerCase(); }
  function sortBy(column, direction) {
    var rows = Array.prototype.slice.call(body.rows), sign = direction === "ascending" ? 1 : -1;
    rows.sort(function (a, b) { var x = key(a, column), y = key(b, column); return x < y ? -sign : x > y ? sign : 0; });
    rows.forEach(function (row) { body.appendChild(row); });
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    heads[column].setAttribute("aria-sort", direction);
  }
  Array.prototype.forEach.call(heads, function (head, column) {
    head.title = "sort by " + head.textContent;
    head.addEventListener("click", function () {
      var numeric = head.classList.contains("n"), current = head.getAttribute("aria-sort");
      var direction = current ? (current === "ascending" ? "descending" : "ascending") : (numeric ? "descending" : "ascending");
      store.setItem("nra-sort", column + ":" + direction);
      sortBy(column, direction);
    });
  });
  var saved = (store.getItem("nra-sort") || "").split(":");
  if (saved.length === 2 && heads[+saved[0]]) { sortBy(+saved[0], saved[1]); }
})();"""


def _share(c: Comparison, quantity: str) -> str:
    values = c.quantities()
    if quantity not in values or not values.get("allocatable"):
        return "-"
    return percent(values[quantity] / values["allocatable"])


def _rows(cells: dict[str, str]) -> str:
    e = html.escape
    return "".join(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>" for k, v in cells.items())


def verdict_section(v: ScaleDownVerdict) -> str:
    """The verdict on one screen: state, utilization against the threshold, blockers, differing pods, PDBs (public:
    the tests compare it with the JSON, the text and the metrics)."""
    e = html.escape
    u = v.utilization
    util_rows = "".join(
        f"<tr><td>{r}</td><td class=n>{ratio_text(value, v.threshold)}</td>"
        f"<td class=n>{ratio_text(v.threshold) if r == u.resource and u.value is not None else ''}</td></tr>"
        for r in ("cpu", "memory", "gpu") if (value := getattr(u, r)) is not None or r != "gpu")
    if v.blockers:
        blockers = ("<table id=autoscaler-blockers><tr><th>blocking pod</th><th>reason</th><th>detail</th></tr>"
                    + "".join(f"<tr><td>{e(b.namespace)}/{e(b.name)}</td><td>{e(b.reason)}</td>"
                              f"<td class=detail>{e(b.detail)}</td></tr>" for b in v.blockers) + "</table>")
    else:
        blockers = "<p id=autoscaler-blockers>No pod blocks the node's removal.</p>"
    if v.pdb_risks:
        blockers += ("<p id=autoscaler-pdb-risks>Risky, not blocking: "
                     + "; ".join(f"PodDisruptionBudget {e(r.namespace)}/{e(r.name)} allows {r.disruptions_allowed} and "
                                 f"covers {r.pods} of the node's pods" for r in v.pdb_risks)
                     + " (the autoscaler cannot evict them all at once; the drain may time out).</p>")
    differing = ""
    if v.differing:
        differing = (f"<table id=autoscaler-differing><tr><th>pod counted differently by cluster-autoscaler "
                     f"{e(v.release)}</th><th>autoscaler</th><th>scheduler</th><th>why</th></tr>"
                     + "".join(f"<tr><td>{e(d.namespace)}/{e(d.name)}</td>"
                               f"<td class=n>{e(cores(d.cpu))} / {e(memory(d.memory))}</td>"
                               f"<td class=n>{e(cores(d.scheduler_cpu))} / {e(memory(d.scheduler_memory))}</td>"
                               f"<td class=detail>{e(d.why)}</td></tr>" for d in v.differing) + "</table>")
    pdbs = ("PodDisruptionBudgets known." if v.pdbs_known else
            "PodDisruptionBudgets not known (no PDB watch): a kube-system pod is shown as blocking unless a PDB covers it.")
    problems = "".join(f"<li>{e(p)}</li>" for p in v.problems)
    candidate = " class=candidate" if v.candidate else ""
    return f"""<h2>Cluster-autoscaler's verdict <small class=muted>release {e(v.release or '-')}</small></h2>
<p id=verdict-state data-state="{e(v.state)}"{candidate}>{e(headline(v).removeprefix("AUTOSCALER  "))}</p>
<div class=verdict><table id=autoscaler-utilization><tr><th>resource</th><th>utilization</th><th>threshold</th></tr>{util_rows}</table>
{blockers}{differing}</div>
<p class=muted id=autoscaler-notes><span id=autoscaler-pdbs data-known="{str(v.pdbs_known).lower()}">{pdbs}</span>
The verdict cannot see: {e("; ".join(CANNOT_SEE))}.</p>{f"<ul id=autoscaler-problems>{problems}</ul>" if problems else ""}"""


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


def render_page(node: NodeSnapshot, stats: StatsSnapshot, live: Verdict, ready: Verdict, now: float,
                refresh: int = REFRESH_SECONDS) -> str:
    """The whole page; ``now`` is the Unix time it is rendered at (shown as "updated", and when the autoscaler's
    verdict is judged), ``refresh`` the seconds between reloads (already clamped by ``refresh_seconds``)."""
    e = html.escape
    pods = sorted((p for p in node.pods if p.reported), key=lambda p: (-p.cpu, -p.memory, p.namespace, p.name))
    totals = pod_totals(pods)
    summary = node.summary()
    comparison = "".join(
        f"<tr><td>{e(q)}</td>"
        f"<td class=n>{e(cores(v)) if (v := summary.cpu.quantities().get(q)) is not None else '-'}</td>"
        f"<td class=n>{_share(summary.cpu, q)}</td>"
        f"<td class=n>{e(memory(v)) if (v := summary.memory.quantities().get(q)) is not None else '-'}</td>"
        f"<td class=n>{_share(summary.memory, q)}</td></tr>" for q in QUANTITIES)
    pod_rows = "".join(
        f"<tr><td>{e(p.namespace)}</td><td class=name>{e(p.name)}</td>"
        f"<td class=n data-sort={p.cpu}>{e(cores(p.cpu))}</td><td class=n data-sort={p.memory}>{e(memory(p.memory))}</td>"
        f"<td>{e(p.source)}</td><td class=problems>{e('; '.join(str(x) for x in p.problems))}</td></tr>"
        for p in pods)
    last_export = stats.last_export_success_age_seconds
    facts = {
        "queue depth": str(stats.queue_depth),
        "events handled": str(stats.events_handled),
        "watch (re)starts": ", ".join(f"{r} {k} {v}" for (r, k), v in sorted(stats.watch_starts.items())) or "none",
        "relists": ", ".join(f"{r} {v}" for r, v in sorted(stats.relists.items())) or "none",
        "last event or bookmark": ", ".join(f"{r} {age:.1f} s ago" for r, age in sorted(stats.last_event_age_seconds.items()))
                                  or "never",
        "last successful export": "never" if last_export is None else f"{last_export:.1f} s ago",
        "export results": ", ".join(f"{k} {v}" for k, v in sorted(stats.exports.items())) or "none yet",
    }
    status = "healthy" if live.ok and ready.ok else "degraded"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    return f"""<!doctype html>
<html lang=en><head><meta charset=utf-8><meta name=viewport content="width=device-width,initial-scale=1">
<title>node-requests-agent: {e(node.node_name)}</title><style>{_STYLE}</style></head><body>
<h1>Node {e(node.node_name)} <small class={status} id=status>{status}</small></h1>
<div id=bar><span>updated <time id=updated datetime="{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(now))}" data-time="{now:.3f}">{stamp}</time>
<span id=age class=muted></span></span><span id=refresh-state class=muted></span><button id=pause type=button>Pause auto-refresh</button></div>
{verdict_section(node.verdict(now))}
<h2>Node comparison</h2>
<table id=comparison><tr><th>quantity</th><th>CPU</th><th>CPU of allocatable</th><th>memory</th><th>memory of allocatable</th></tr>{comparison}</table>
<h2>What the cluster-autoscaler sees</h2>
<table id=node><tr><th>pods reported</th><th>valued by VM usage</th><th>CPU (pod or VM)</th><th>memory (pod or VM)</th></tr>
<tr><td class=n>{totals.pods}</td><td class=n>{totals.by_vm_usage}</td><td class=n>{e(cores(totals.cpu))}</td><td class=n>{e(memory(totals.memory))}</td></tr></table>
<h2>Pods ({len(pods)}), by CPU <small class=muted>click a column to sort</small></h2>
<div class=scroll><table id=pods><thead><tr><th>namespace</th><th>pod</th><th class=n aria-sort=descending>CPU</th><th class=n>memory</th><th>source</th><th>problems</th></tr></thead>
<tbody>{pod_rows}</tbody></table></div>
<h2>Agent health</h2>
<table id=health><tr><th>check</th><th>state</th></tr>{_rows({**live.checks, **ready.checks})}</table>
<table id=runtime><tr><th>signal</th><th>value</th></tr>{_rows(facts)}</table>
<p><a href=/debug/pods>/debug/pods</a> · <a href=/debug/node>/debug/node</a> · <a href=/debug/runtime>/debug/runtime</a> · <a href=/metrics>/metrics</a></p>
<script>{_SCRIPT % {"refresh": refresh}}</script>
</body></html>
"""
