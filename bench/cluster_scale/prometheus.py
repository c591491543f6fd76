"""What the benchmark reads back from Prometheus: raw samples, series counts, the head's size."""

from __future__ import annotations

from testkit.http import http_get


def prom_samples(prom, selector: str, seconds: float) -> dict[tuple, list[tuple[float, float]]]:
    """Raw samples of the last ``seconds`` for every series matching ``selector``, keyed by sorted label pairs."""
    rows = prom.query(f"{selector}[{int(seconds) + 1}s]")
    return {tuple(sorted(r["metric"].items())): [(float(t), float(v)) for t, v in r["values"]] for r in rows}


def series_count(prom, selector: str) -> int:
    rows = prom.query(f"count({selector})")
    return int(float(rows[0]["value"][1])) if rows else 0


def head_series(prom) -> float:
    status, body = http_get(f"{prom.url}/metrics", timeout=10)
    for line in body.decode().splitlines():
        if line.startswith("prometheus_tsdb_head_series "):
            return float(line.split()[1])
    return float("nan")
