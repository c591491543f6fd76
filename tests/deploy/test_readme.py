"""What the documents show is what the agent does: README's demo output and the warning it logs, and the metric
tables of docs/metrics.md (names, types and attribute sets)."""

from __future__ import annotations

import re

from agent.export.metrics import GAUGES, state_points
from agent.telemetry.table import PREFIX, RUNTIME_METRICS, Readings
from agent.model.node_summary import Usage, summarize
from agent.decode.reader import NODE, POD
from agent.model.rules import NEWEST
from agent.model.scale_down import NOT_REPLICATED, UNDERUTILIZED, Blocker, Utilization, Verdict
from agent.model.valuation import evaluate
from agent.pipeline.events import ADDED, BOOKMARK, DELETED, MODIFIED, RELIST, SAMPLE, VERSION
from agent.pipeline.state import NodeState
from agent.model.node import NODES
from agent.model.pod import PODS
from agent.telemetry.stats import RuntimeStats
from testkit.cli import run
from testkit.factory import node, pod, vm_pod
from testkit.repo import REPO

METRICS_DOC = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
README = (REPO / "README.md").read_text(encoding="utf-8")
DEMO = ("run", "--node-name", "sample-node", "--replay", "sample", "--exporter", "table", "--once")


def test_readme_shows_what_the_demo_prints_and_the_warning_it_logs():
    assert "node-requests-agent " + " ".join(DEMO) in README.split("\n```\n", 1)[0]
    result = run(*DEMO)
    assert result.returncode == 0, result.stderr
    shown, warning = re.findall(r"```\n(.*?)\n```", README.split("What the demo prints first:", 1)[1], re.S)[:2]
    assert shown == result.stdout.split("\n\n", 1)[0]
    logged = [line.split(" WARNING ", 1)[1] for line in result.stderr.splitlines() if " WARNING " in line]
    assert logged and [f"WARNING {line}" for line in logged] == warning.splitlines()


def test_the_demo_says_whose_used_it_shows_only_when_it_shows_one():
    """``used`` in a replay is this machine's /proc; with /proc reading off there is no ``used`` to explain."""
    note = "is this machine's own /proc, not sample-node's"
    with_used, without = run(*DEMO), run(*DEMO, env={"HOST_PROC": "off"})
    assert note in with_used.stdout and 'quantity="used"' in with_used.stdout
    assert note not in without.stdout and 'quantity="used"' not in without.stdout


def table(header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header row starts with ``header``."""
    lines = METRICS_DOC.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header}"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))])
    return rows


def attribute_names(cell: str, previous: set[str]) -> set[str]:
    """`a` = `x` \\| `y`; `b` -> {"a", "b"}; "same" repeats the row above."""
    if cell.startswith("same"):
        return set(previous)
    names = set()
    for part in re.split(r"[;,]", re.sub(r"\([^)]*\)", "", cell)):
        if match := re.match(r"\s*`([^`]+)`", part):
            names.add(match[1])
    return names


def populated() -> Readings:
    """Snapshots in which every counter has at least one attribute set."""
    stats = RuntimeStats()
    for event_type in (ADDED, MODIFIED, DELETED, BOOKMARK, RELIST, SAMPLE, VERSION):
        stats.event_added(event_type)
    stats.event_taken(0.001)
    stats.event_handled(0.001, "KeyError")
    stats.skipped("undecodable", PODS)
    stats.pod_problem("usage", "invalid_json")
    stats.watch_started("initial", PODS)
    stats.relisted(0.1, PODS)
    stats.relisted(0.1, NODES)
    stats.request_failed("transport", PODS)
    stats.export_finished(True, 0.01)
    stats.export_finished(False, 0.01, reason="http_503", rejected_points=2)
    stats.usage_error("missing")
    state = NodeState("node-a")
    state.replace([evaluate(POD.record(pod("p")), NEWEST)])
    return Readings(stats.snapshot(), state.snapshot())


def test_agent_metric_table_matches_the_runtime_metrics():
    readings = populated()
    exported = {}
    for m in RUNTIME_METRICS:
        points = [] if m.kind == "histogram" else m.read(readings)
        exported[m.name] = (m.kind, {k for attrs, _ in points for k in attrs})
        assert m.kind == "histogram" or points, f"{m.name} read nothing from populated snapshots"
    documented = {}
    for cells in table("OTLP = Prometheus name"):
        for name in re.findall(r"`([a-z_]+)`", cells[0]):
            documented[name.removeprefix(PREFIX)] = (cells[1], attribute_names(cells[2], set()))
    assert documented == exported


def test_workqueue_event_types_are_all_documented():
    row = next(r for r in table("OTLP = Prometheus name") if f"`{PREFIX}workqueue_adds_total`" in r[0])
    assert set(re.findall(r"`([A-Z]+)`", row[2])) == {ADDED, MODIFIED, DELETED, BOOKMARK, RELIST, SAMPLE, VERSION}


def test_product_metric_tables_match_state_points():
    values = [evaluate(POD.record(pod("p")), NEWEST), evaluate(POD.record(vm_pod("v", "vm-1", "1", "1Gi", role="target")), NEWEST)]
    blocking = Blocker(uid=values[0].uid, namespace=values[0].namespace, name=values[0].name, reason=NOT_REPLICATED,
                       detail="no controller")
    verdict = Verdict(node="node-a", state=UNDERUTILIZED, threshold=0.5, blockers=(blocking,),
                      utilization=Utilization(cpu=0.1, memory=0.2, gpu=0.3, value=0.3, resource="gpu"))
    points = list(state_points(values, summarize("node-a", NODE.record(node("node-a", "4", "8Gi")), values,
                                                 Usage(cpu=10**9, memory=10**9)), verdict))
    exported: dict[str, set[str]] = {}
    for p in points:
        exported.setdefault(p.metric, set()).update(p.attributes)
    documented: dict[str, set[str]] = {}
    previous: set[str] = set()
    for header in ("OTel name", "OTel = Prometheus name"):
        for cells in table(header):
            name = re.findall(r"`([a-z_]+)`", cells[0])[0]
            attrs = attribute_names(cells[3] if header == "OTel name" else cells[2], previous)
            documented[name] = previous = attrs
    assert documented == exported and set(documented) == set(GAUGES)


def test_process_metric_table_matches_the_sdk_instruments():
    from agent.export.otlp.process import PROCESS_METRICS

    rows = table("OTel name (SDK instrument)")
    documented = {re.findall(r"`([a-z_.]+)`", cells[0])[0]: (cells[2].strip("`"), re.findall(r"`([a-z_]+)`", cells[4])[0])
                  for cells in rows}
    assert documented == {name: (unit, name.replace(".", "_")) for name, (unit, _) in PROCESS_METRICS.items()}
