"""One number in one place: each measured figure is stated in docs/benchmarks.md (the benchmarks) or docs/testing.md
(the suite's times and what its tests measured), with its machine and date, and everywhere else is a link to it.

A copy elsewhere goes stale the next time the figure is measured, and then two documents disagree (issue #32 found
the suite at 920, 917, 898 or "831 collected" tests depending on the page, and the agent's RSS at 500 pods at 65,
55.0 or 53-56 MiB). Only the kinds of figure below are looked for: each is something only a measurement gives.
Settings (a 160 MiB limit, a 15 s interval, 5 min of lookback) and examples (an overcommit of 2.5x) are not among
them, and where one kind's words can also name a setting, ``unless`` names the words that mark it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from testkit.repo import REPO

FIGURE_DOCS = ("docs/benchmarks.md", "docs/testing.md")
# Owned by another change of issue #32, which moves its figures (the gRPC exporter's RSS, gzip's ratio, the
# shutdown time) to links; it joins the checked files with that change.
NOT_YET_CHECKED: tuple[str, ...] = ()


class Kind(NamedTuple):
    name: str
    pattern: str
    unless: str = r"(?!)"  # words on the line that make a match a setting, not a measurement; by default none


KINDS = (
    Kind("test count", r"\b\d[\d,]*\s+(?:tests|passed|failed|collected)\b"),
    Kind("minutes a run or build took", r"\b\d+(?:[.,]\d+)?(?:[–-]\d+)?\s*(?:min|minutes)\b",
         unless=r"lookback|expiration|timeout|reset after|default"),
    Kind("memory held (RSS, heap)", r"(?:RSS|resident|heap)[^.;]{0,40}?\d+(?:\.\d+)?\s*[KMG]iB"
                                    r"|\d+(?:\.\d+)?\s*[KMG]iB(?:\s+\w+){0,3}\s+(?:RSS|resident|heap)"),
    Kind("image or archive size", r"\b\d+(?:\.\d+)?\s*(?:MB|GB)\b"),
    Kind("ratio against a floor", r"\b\d+\.\d{2,}x\b|~\d+(?:\.\d+)?x\b"
                                  r"|\b\d+(?:\.\d+)?x\s+(?:the|faster|slower|less|more|lower|higher)\b"),
    Kind("share of a core", r"\b\d+\.\d+\s*%"),
    Kind("time per event or call", r"\b\d+(?:\.\d+)?\s*(?:µs|ms)\s+(?:per|an?|each)\b|µs/event"),
    Kind("request rate", r"\b\d+(?:[.,]\d+)?(?:[–-]\d+)?\s*(?:requests?|operations|renewals)"
                         r"(?:/s\b|\s+per\s+(?:s\b|second|minute|agent))"),
    Kind("latency percentile", r"\bp(?:50|90|99)\s+\d"),
    Kind("range of measured seconds", r"\b\d+\.\d+[–-]\d+\.\d+\s*s\b"),
    Kind("a number called measured", r"\b[Mm]easured\b[^.\[(]{0,60}?\d"),
)

TEXT_SUFFIXES = {".md", ".yaml", ".yml", ".txt", ".tpl", ".kubeconfig"}


def checked_files() -> list[Path]:
    """What a user reads besides the two figure documents: README, the pages, and the shipped files' comments."""
    files = [REPO / "README.md", REPO / "Dockerfile", *sorted((REPO / "docs").glob("*.md"))]
    for folder in ("charts", "daemonset", "otel-config", "krew"):
        files += sorted(p for p in (REPO / folder).rglob("*") if p.suffix in TEXT_SUFFIXES)
    return [p for p in files if str(p.relative_to(REPO)) not in FIGURE_DOCS + NOT_YET_CHECKED]


def figures_in(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, the matched text) of every measured figure in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for kind in KINDS:
            if re.search(kind.unless, line):
                continue
            found += [(number, kind.name, m.group(0)) for m in re.finditer(kind.pattern, line)]
    return found


def test_measured_figures_are_stated_only_in_the_figure_documents():
    stated = [f"{path.relative_to(REPO)}:{number}: {kind}: {text!r}"
              for path in checked_files() for number, kind, text in figures_in(path.read_text(encoding="utf-8"))]
    assert not stated, ("measured figures outside " + " and ".join(FIGURE_DOCS) + " (link to them instead):\n"
                        + "\n".join(stated))


def test_the_kinds_catch_the_copies_issue_32_found_and_leave_settings_alone():
    """The patterns are tried on lines as they stood before the figures moved, and on settings that must pass."""
    copies = [
        "   components cached and take about 30 minutes (920 tests, the node suite's real token rotation",
        "# Measured: 53 MiB RSS with 110 pods, 65 MiB with 500 (docs/benchmarks.md).",
        "| steady RSS | 53.6 MiB: 1.040x the floor that never connects |",
        "| idle CPU, default 15 s interval | 0.050 % of a core |",
        "  failed, gaps between samples across six kills 15.015–15.633 s, the interval plus",
        "the one static binary in an otherwise empty image (41 MB, measured 2026-12-01)",
        "| API server restart | peak 85 requests/s from the agents |",
        "| churn | p50 7.5 / 8.2 s, p99 14.9 / 14.8 s at a 15 s export interval |",
        "which made a 110-pod export 2.1x the direct-encoding floor",
        "    cd otel-config && builder --config builder-config.yaml   # 6-10 min on 2 cores",
        "a 9 KiB pod in under a fifth of `json.loads`' time; +0.6 MiB RSS.",
        "| one Collector replica killed | no export is lost (measured gap 1.05 s at 1 s intervals) |",
    ]
    assert [line for line in copies if not figures_in(line)] == []
    settings = [
        "and requests 10m CPU / 80 MiB with a 160 MiB limit and no CPU limit",
        "| `--export-interval` (s) | `OTEL_METRIC_EXPORT_INTERVAL` (ms) | 15 s | seconds between exports |",
        "marks it stale: instant queries return its last sample for the lookback delta (5 min by",
        "jittered exponential backoff from 0.8 s to 30 s (reset after 2 min of health)",
        "`{\"cpu\":\"2500m\",\"memory\":\"1500m\"}` = 2.5x, 1.5x) when that is present",
        "| watch line over 8 MiB | the watch ends, relist |",
        "rolls out with `maxUnavailable: 10%`; the alert fires over 80 % full",
        "Buckets run from 1 µs to 60 s: handling is in-memory and a 5 ms first",
    ]
    assert [figures_in(line) for line in settings if figures_in(line)] == []


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors: each heading lowercased, punctuation but hyphens dropped, spaces made hyphens."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)  # a shell comment is no heading
    return {re.sub(r"[^\w\- ]", "", m[1].strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#+\s+(.+)$", prose, re.MULTILINE)}


def linked_anchors(path: Path) -> list[tuple[str, str]]:
    """(document, anchor) of each link from ``path`` to a heading of a figure document.

    Pages link relative to their folder, comments in the shipped files name the document from the repository's
    root (``docs/benchmarks.md#memory``); a figure document's own ``](#anchor)`` links count too.
    """
    here = path.relative_to(REPO).as_posix()
    text = path.read_text(encoding="utf-8")
    found = [(here, anchor) for anchor in re.findall(r"\]\(#([\w-]+)\)", text)] if here in FIGURE_DOCS else []
    for name, anchor in re.findall(r"((?:[\w.-]*/)*(?:benchmarks|testing)\.md)#([\w-]+)", text):
        target = path.parent / name if (path.parent / name).exists() else REPO / name
        found.append((target.resolve().relative_to(REPO.resolve()).as_posix(), anchor))
    return found


def test_links_to_the_figure_documents_land_on_a_heading():
    """Where a figure became a link, the link must lead to it: every #anchor into the two documents exists."""
    anchors = {doc: heading_anchors((REPO / doc).read_text(encoding="utf-8")) for doc in FIGURE_DOCS}
    links = [(path.relative_to(REPO).as_posix(), doc, anchor)
             for path in [*checked_files(), *(REPO / doc for doc in FIGURE_DOCS)] for doc, anchor in linked_anchors(path)]
    assert len(links) > 20 and [link for link in links if link[2] not in anchors[link[1]]] == []
