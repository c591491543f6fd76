"""One verdict, three renderings: the JSON view, the text and the debug page all render one ``VerdictView``, so
they must say the same thing field by field. Each rendering is read back the way its reader reads it (json, the
text's lines, the HTML through the standard library's parser) and compared with the others: the headline, candidate
and removable, the utilization of each resource and which one decides, every blocker in order with its reason and
detail, the PDB risk's wording, whether PDBs are known, the pods counted differently; the metric's gauges too."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from agent.debug.page import verdict_section
from agent.export.metrics import AUTOSCALER_BLOCKING_PODS, AUTOSCALER_CANDIDATE, AUTOSCALER_REMOVABLE, verdict_points
from agent.model.scale_down import (ALLOCATABLE_UNUSABLE, KUBE_SYSTEM_PDB_UNKNOWN, LOCAL_STORAGE, NO_NODE, NOT_ENOUGH_PDB, NOT_REPLICATED,
                                    NOT_SAFE_TO_EVICT, NOT_UNDERUTILIZED, REASONS, SCALE_DOWN_DISABLED, UNDERUTILIZED,
                                    AutoscalerValue, Blocker, PdbRisk, Utilization, Verdict)
from agent.report.autoscaler import verdict_lines
from agent.report.verdict_view import ratio_text, requests_text, verdict_view
from agent.report.views import verdict_report

MI = 2**20 * 10**9  # nano-units of a MiB


def to_nanos(cores_: float) -> int:
    """JSON's cores back to the nano-units the text and the page format (exact for the cases' whole millicores)."""
    return round(cores_ * 10**6) * 10**3


KNOWN = Utilization(cpu=0.25, memory=0.375, value=0.375, resource="memory")


def blocker(namespace: str, name: str, reason: str, detail: str = "") -> Blocker:
    return Blocker(uid=f"uid-{namespace}-{name}", namespace=namespace, name=name, reason=reason,
                   detail=detail or f"why {name} blocks")


def differing(name: str, cpu: int, scheduler_cpu: int) -> AutoscalerValue:
    return AutoscalerValue(uid=f"uid-{name}", namespace="db", name=name, cpu=cpu * 10**6, memory=64 * MI,
                           scheduler_cpu=scheduler_cpu * 10**6, scheduler_memory=64 * MI, why=f"{name}: resize")


# Blockers given out of order: the renderings must agree on one.
SCRAMBLED = (blocker("web", "z-pod", NOT_REPLICATED), blocker("db", "guarded", NOT_ENOUGH_PDB),
             blocker("kube-system", "dns", NOT_SAFE_TO_EVICT, 'annotated <safe-to-evict> "false" & more'),
             blocker("web", "a-pod", NOT_REPLICATED), blocker("batch", "scratch", LOCAL_STORAGE))

VERDICTS = {
    "underutilized free": Verdict(node="n", state=UNDERUTILIZED, utilization=KNOWN, threshold=0.5, release="1.36"),
    "underutilized blocked": Verdict(node="n", state=UNDERUTILIZED, utilization=KNOWN, threshold=0.5,
                                     blockers=SCRAMBLED, release="1.36"),
    "not underutilized": Verdict(node="n", state=NOT_UNDERUTILIZED, threshold=0.5, blockers=SCRAMBLED[:2],
                                 utilization=Utilization(cpu=0.4996, memory=0.7, value=0.7, resource="memory")),
    "at the threshold": Verdict(node="n", state=UNDERUTILIZED, threshold=0.5, release="1.34",
                                utilization=Utilization(cpu=0.5, memory=0.4996, value=0.5, resource="cpu")),
    "disabled": Verdict(node="n", state=SCALE_DOWN_DISABLED, utilization=KNOWN, threshold=0.5,
                        blockers=SCRAMBLED[3:]),
    "unknown node": Verdict(node="n", state=NO_NODE, utilization=Utilization(cpu=None, memory=None), threshold=0.5,
                            pdbs_known=False, blockers=(blocker("kube-system", "proxy", KUBE_SYSTEM_PDB_UNKNOWN),)),
    "allocatable unusable": Verdict(node="n", state=ALLOCATABLE_UNUSABLE, threshold=0.5, release="1.36",
                                    utilization=Utilization(cpu=0.25, memory=None), blockers=SCRAMBLED[1:2],
                                    problems=("the Node's allocatable memory is 0: no utilization",)),
    "pdb risk": Verdict(node="n", state=UNDERUTILIZED, utilization=KNOWN, threshold=0.5, pdb_risks=(
        PdbRisk(namespace="db", name="primary", disruptions_allowed=1, pods=3),
        PdbRisk(namespace="web", name="front", disruptions_allowed=0, pods=1))),
    "differing pods": Verdict(node="n", state=NOT_UNDERUTILIZED, utilization=KNOWN, threshold=0.3, release="1.31",
                              differing=(differing("z-vm", 250, 500), differing("a-vm", 100, 200)),
                              problems=("db/a-vm: safe-to-evict 'maybe' is neither \"true\" nor \"false\": ignored",)),
    "gpu node": Verdict(node="n", state=UNDERUTILIZED, threshold=0.4, blockers=SCRAMBLED[:1],
                        utilization=Utilization(cpu=None, memory=None, gpu=0.25, value=0.25,
                                                resource="nvidia.com/gpu")),
}


# -- each rendering read back as its reader reads it ----------------------------------------------------------------

def from_json(v: Verdict) -> dict:
    data = json.loads(json.dumps(verdict_report(verdict_view(v))))
    u, threshold = data["utilization"], data["threshold"]
    resources = ["gpu"] if u["gpu"] is not None else ["cpu", "memory"]
    deciding = None if u["value"] is None else "gpu" if u["gpu"] is not None else u["resource"]
    return {
        "headline": data["headline"], "candidate": data["scale_down_candidate"], "removable": data["removable"],
        "utilization": [(r, ratio_text(u[r], threshold), r == deciding) for r in resources],
        "threshold": ratio_text(threshold),
        "blockers": [(f"{b['namespace']}/{b['name']}", b["reason"], b["detail"]) for b in data["blockers"]],
        "counts": {r: n for r, n in data["blocking_pods"].items() if n},
        "pdb_risk": data["pdb_risk"], "pdbs_known": data["pdbs_known"],
        "differing": [" | ".join((f"{d['namespace']}/{d['name']}",
                                  requests_text(to_nanos(d["cpu_cores"]), d["memory_bytes"] * 10**9),
                                  requests_text(to_nanos(d["scheduler_cpu_cores"]), d["scheduler_memory_bytes"] * 10**9),
                                  d["why"]))
                      for d in data["differing"]],
        "problems": data["problems"],
    }


def from_text(v: Verdict) -> dict:
    lines = verdict_lines(verdict_view(v), width=None)
    labelled = {line.split("  ")[1]: line.split("  ", 2)[2] for line in lines[1:] if line.startswith("  ")
                and "  " in line[2:] and line.split("  ")[1].isupper()}
    assert lines[0].startswith("AUTOSCALER  ")
    headline = lines[0].removeprefix("AUTOSCALER  ")
    usage, threshold = labelled["UTILIZATION"].split("; ")[:2]
    utilization = []
    for part in usage.split(", "):
        resource, text, *decides = part.split(" ")
        utilization.append((resource, text, decides == ["(decides)"]))
    counts = labelled["BLOCKING"].partition(": ")[2]
    return {
        "headline": headline, "candidate": ", a scale-down candidate" in headline,
        "removable": ", removable: " in headline,
        "utilization": utilization, "threshold": threshold.rpartition(" ")[2],
        "blockers": _blocker_rows(lines),
        "counts": {r: int(n) for r, n in (c.split(" ") for c in counts.split(", "))} if counts else {},
        "pdb_risk": labelled.get("RISKY"), "pdbs_known": "PDBS" not in labelled,
        # Its numbers are right-aligned: cells are what two spaces or more separate.
        "differing": [" | ".join(re.split(r"\s{2,}", line.strip())) for line in _table_lines(lines, "WHY")[1:]],
        "problems": [line.removeprefix("  problem: ") for line in lines if line.startswith("  problem: ")],
    }


def _table_lines(lines: list[str], *titles: str) -> list[str]:
    """The lines of the text's table whose header has ``titles``, up to the next line that is not a row (a row
    starts with a pod's namespace/name); none when it has no such table."""
    found = [i for i, line in enumerate(lines) if line.lstrip().startswith("POD") and all(t in line for t in titles)]
    if not found:
        return []
    (at,) = found
    rows = []
    for line in lines[at + 1:]:
        if not re.match(r"  \S+/\S+  ", line):
            break
        rows.append(line)
    return [lines[at], *rows]


def _blocker_rows(lines: list[str]) -> list[tuple[str, ...]]:
    """The blockers' table cut at its header's columns (no wrapping: width None)."""
    table = _table_lines(lines, "REASON", "DETAIL")
    if not table:
        return []
    reason, detail = table[0].index("REASON"), table[0].index("DETAIL")
    return [(row[:reason].strip(), row[reason:detail].strip(), row[detail:]) for row in table[1:]]


class _Page(HTMLParser):
    """The verdict section's parts by element id: attributes, text, and each table's rows of cell texts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.attrs: dict[str, dict[str, str | None]] = {}
        self.text: dict[str, str] = {}
        self.rows: dict[str, list[list[str]]] = {}
        self.items: list[str] = []  # the problems' list items
        self._open: list[str] = []  # ids of the open elements that have one
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self._open.append(attrs["id"])
            self.attrs[attrs["id"]], self.text[attrs["id"]] = attrs, ""
        if tag == "table":
            self._table = attrs.get("id")
            self.rows[self._table] = []
        elif tag == "tr":
            self.rows[self._table].append([])
        elif tag in ("td", "th", "li"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.rows[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "li":
            self.items.append("".join(self._cell))
            self._cell = None
        if tag in ("p", "span", "table", "ul") and self._open:
            self._open.pop()

    def handle_data(self, data):
        for element in self._open:
            self.text[element] += data
        if self._cell is not None:
            self._cell.append(data)


def from_page(v: Verdict) -> dict:
    page = _Page()
    page.feed(verdict_section(verdict_view(v)))
    state = page.attrs["verdict-state"]
    utilization = page.rows["autoscaler-utilization"][1:]
    risk = page.text.get("autoscaler-pdb-risks")
    return {
        "headline": page.text["verdict-state"],
        "candidate": state["data-candidate"] == "true", "removable": state["data-removable"] == "true",
        "utilization": [(resource, text, bool(threshold)) for resource, text, threshold in utilization],
        "threshold": next((threshold for *_, threshold in utilization if threshold), None),
        "blockers": [tuple(row) for row in page.rows.get("autoscaler-blockers", [])[1:]],
        "counts": _counts(tuple(row) for row in page.rows.get("autoscaler-blockers", [])[1:]),
        "pdb_risk": None if risk is None else risk.removeprefix("Risky: ").removesuffix("."),
        "pdbs_known": page.attrs["autoscaler-pdbs"]["data-known"] == "true",
        "differing": [" | ".join(row) for row in page.rows.get("autoscaler-differing", [])[1:]],
        "problems": page.items,
    }


def _counts(rows) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, reason, _ in rows:
        counts[reason] = counts.get(reason, 0) + 1
    return {r: counts[r] for r in REASONS if r in counts}


def from_metrics(v: Verdict) -> dict:
    points = {(p.metric, p.attributes.get("reason")): p.value for p in verdict_points(v)}
    return {"candidate": points[(AUTOSCALER_CANDIDATE, None)] == 1,
            "removable": points[(AUTOSCALER_REMOVABLE, None)] == 1,
            "counts": {r: int(points[(AUTOSCALER_BLOCKING_PODS, r)]) for r in REASONS
                       if points[(AUTOSCALER_BLOCKING_PODS, r)]}}


# -- the comparison -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", list(VERDICTS))
def test_json_text_and_page_say_the_same_field_by_field(case):
    v = VERDICTS[case]
    read = {"json": from_json(v), "text": from_text(v), "page": from_page(v)}
    fields = ("headline", "candidate", "removable", "utilization", "blockers", "counts", "pdb_risk", "pdbs_known",
              "differing", "problems")
    for field in fields:
        values = {name: got[field] for name, got in read.items()}
        assert values["json"] == values["text"] == values["page"], (case, field, values)
    decides = [r for r, _, d in read["json"]["utilization"] if d]
    if decides:  # the page shows the threshold beside the deciding resource; the text after the resources
        assert read["page"]["threshold"] == read["text"]["threshold"] == read["json"]["threshold"], case
    metrics = from_metrics(v)
    for field in ("candidate", "removable", "counts"):
        assert metrics[field] == read["json"][field], (case, field)


def test_the_cases_cover_what_the_renderings_can_disagree_on():
    """Not a rendering check: the cases above hold each kind of verdict, so the comparison has something to compare."""
    read = {case: from_json(v) for case, v in VERDICTS.items()}
    assert {v.state for v in VERDICTS.values()} == {UNDERUTILIZED, NOT_UNDERUTILIZED, SCALE_DOWN_DISABLED, NO_NODE,
                                                    ALLOCATABLE_UNUSABLE}
    assert read["underutilized free"]["candidate"] and read["underutilized free"]["removable"]
    assert read["underutilized blocked"]["candidate"] and not read["underutilized blocked"]["removable"]
    assert not read["disabled"]["candidate"] and not read["not underutilized"]["candidate"]
    assert read["pdb risk"]["pdb_risk"] and not read["unknown node"]["pdbs_known"]
    assert len(read["differing pods"]["differing"]) == 2 and len(read["underutilized blocked"]["blockers"]) == 5
    unusable = read["allocatable unusable"]
    assert unusable["headline"].startswith("allocatable unusable: ") and not unusable["candidate"]
    assert unusable["utilization"] == [("cpu", "25%", False), ("memory", "-", False)]


def test_one_order_of_blockers_the_drain_rules_then_namespace_and_name():
    got = [(b[0], b[1]) for b in from_json(VERDICTS["underutilized blocked"])["blockers"]]
    assert got == [("web/a-pod", NOT_REPLICATED), ("web/z-pod", NOT_REPLICATED),
                   ("kube-system/dns", NOT_SAFE_TO_EVICT), ("batch/scratch", LOCAL_STORAGE),
                   ("db/guarded", NOT_ENOUGH_PDB)]


def test_candidate_and_removable_are_worded_as_the_autoscaler_uses_them():
    assert from_json(VERDICTS["underutilized blocked"])["headline"] == (
        "underutilized: memory 38% < threshold 50%, a scale-down candidate, not removable: 5 pods block its removal")
    assert from_json(VERDICTS["underutilized free"])["headline"] == (
        "underutilized: memory 38% < threshold 50%, a scale-down candidate, removable: no pod blocks its removal")
    assert from_json(VERDICTS["not underutilized"])["headline"] == (
        "not underutilized: memory 70% > threshold 50%; 2 pods would also block its removal")


def test_a_gpu_node_is_judged_against_the_gpu_threshold_by_its_gpu_row():
    """The GPU's resource is its name (nvidia.com/gpu): every rendering still says "GPU threshold" and marks the
    gpu row as the deciding one (they compared the name with "gpu" and said "threshold", marking no row)."""
    v = VERDICTS["gpu node"]
    assert from_json(v)["headline"].startswith("underutilized: nvidia.com/gpu 25% < GPU threshold 40%, ")
    assert from_page(v)["utilization"] == [("gpu", "25%", True)]
    assert "  UTILIZATION  gpu 25% (decides); GPU threshold 40%" in verdict_lines(verdict_view(v), width=None)[1]


def test_more_digits_only_where_a_whole_percentage_would_hide_the_side_of_the_threshold():
    assert from_json(VERDICTS["not underutilized"])["utilization"] == [("cpu", "49.96%", False),
                                                                       ("memory", "70%", True)]
    assert from_json(VERDICTS["at the threshold"])["utilization"] == [("cpu", "50%", True), ("memory", "49.96%", False)]


def test_what_a_verdict_shows_of_its_problems_and_risks_is_bounded_and_the_rest_counted():
    """A tenant's PDBs over the bound each added a problem line to every verdict of its namespace's nodes."""
    many = Verdict(node="n", state=UNDERUTILIZED, utilization=KNOWN, threshold=0.5,
                   problems=tuple(f"problem {i}" for i in range(300)),
                   pdb_risks=(PdbRisk(namespace="t", name="p", disruptions_allowed=1, pods=0, unknown=3),),
                   pdb_risks_more=41)
    view = verdict_view(many)
    report = verdict_report(view)
    assert report["problems"] == [*(f"problem {i}" for i in range(20)), "... and 280 more problems not shown"]
    assert report["pdb_risks"] == [{"namespace": "t", "name": "p", "disruptions_allowed": 1, "pods": 0,
                                    "unknown": 3}] and report["pdb_risks_more"] == 41
    assert "may cover 3 more" in view.pdb_risk and "41 more PodDisruptionBudgets" in view.pdb_risk
    page = str(verdict_section(view))
    assert page.count("problem ") == 20 and "280 more problems not shown" in page
