"""``explain``: what the agent would export for a dump of pods, and why.

Pure rendering on top of ``valuation.evaluate``; the CLI does the reading.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .dumps import pods_of
from .pod import PodDecodeError, PodRecord, decode_pod
from .quantity import format_bytes, format_cores
from .report import pods_report, sorted_values
from .valuation import evaluate

__all__ = ["records_from_documents", "explain_json", "explain_table"]


def records_from_documents(documents: Iterable[Any]) -> tuple[list[PodRecord], list[str]]:
    """The pods a dump describes, watch events applied in order; plus what was skipped."""
    pods: dict[str, PodRecord] = {}
    skipped: list[str] = []
    for doc in documents:
        deleted = isinstance(doc, dict) and doc.get("type") == "DELETED" and "object" in doc
        for obj in pods_of(doc):
            try:
                record = decode_pod(obj)
            except PodDecodeError as exc:
                skipped.append(str(exc))
                continue
            if deleted:
                pods.pop(record.uid, None)
            else:
                pods[record.uid] = record
    return list(pods.values()), skipped


def explain_json(records: Iterable[PodRecord]) -> str:
    return json.dumps(pods_report(evaluate(r) for r in records), indent=2)


def _q(value: int | None, cores: bool) -> str:
    if value is None:
        return "-"
    return format_cores(value) if cores else format_bytes(value)


def explain_table(records: Iterable[PodRecord]) -> str:
    values = sorted_values(evaluate(r) for r in records)
    header = f"{'POD':<48} {'PHASE':<10} {'SOURCE':<13} {'CPU':>9} {'MEMORY':>10}"
    lines = [header]
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
    reported = [v for v in values if v.reported]
    cpu = sum(v.cpu for v in reported)
    mem = sum(v.memory for v in reported)
    lines.append(f"{'TOTAL (' + str(len(reported)) + ' pods reported)':<73} {_q(cpu, True):>9} {_q(mem, False):>10}")
    return "\n".join(lines)
