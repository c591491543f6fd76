"""Host usage read with psutil from a fixture procfs folder."""

from pathlib import Path

import psutil
import pytest

from agent.model.quantity import NANO
from agent.pipeline.stats import RuntimeStats
from agent.source.host_usage import UsageSampler, set_procfs

MEMINFO = """MemTotal:       16384000 kB
MemFree:         1024000 kB
MemAvailable:    4096000 kB
Buffers:          102400 kB
Cached:          2048000 kB
SwapCached:            0 kB
Active:          8192000 kB
Inactive:        4096000 kB
Shmem:             10240 kB
SReclaimable:     204800 kB
"""


def stat(cpus):
    """/proc/stat with per-CPU (user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice) in ticks."""
    total = [sum(c[i] for c in cpus) for i in range(10)]
    lines = ["cpu  " + " ".join(map(str, total))]
    lines += [f"cpu{i} " + " ".join(map(str, c)) for i, c in enumerate(cpus)]
    lines += ["intr 1 0", "ctxt 100", "btime 1700000000", "processes 10", "procs_running 1", "procs_blocked 0"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def procfs(tmp_path):
    old = psutil.PROCFS_PATH
    root = tmp_path / "proc"
    root.mkdir()
    (root / "meminfo").write_text(MEMINFO)
    set_procfs(str(root))
    yield root
    set_procfs(old)


def test_cpu_from_deltas_and_memory_total_minus_available(procfs: Path):
    sampler = UsageSampler()
    (procfs / "stat").write_text(stat([(100, 0, 50, 800, 50, 0, 0, 0, 0, 0)] * 4))
    first = sampler.sample()
    assert first.cpu is None  # one sample: no delta yet
    assert first.memory == (16384000 - 4096000) * 1024 * NANO
    # Over the interval: cpu0 fully busy, cpu1 half busy (iowait counts as idle), cpu2 idle, cpu3 1/4 busy (steal).
    (procfs / "stat").write_text(stat([
        (100 + 80, 0, 50 + 20, 800, 50, 0, 0, 0, 0, 0),
        (100 + 25, 0, 50 + 25, 800 + 25, 50 + 25, 0, 0, 0, 0, 0),
        (100, 0, 50, 800 + 100, 50, 0, 0, 0, 0, 0),
        (100, 0, 50, 800 + 75, 50, 0, 0, 25, 0, 0),
    ]))
    second = sampler.sample()
    assert second.cpu / NANO == pytest.approx(1.0 + 0.5 + 0.0 + 0.25, abs=1e-6)


def test_missing_procfs_makes_usage_absent_and_counts_it(tmp_path):
    old = psutil.PROCFS_PATH
    stats = RuntimeStats()
    try:
        set_procfs(str(tmp_path / "nowhere"))
        sampler = UsageSampler(on_error=stats.usage_error)
        assert sampler.sample() is None and sampler.sample() is None
    finally:
        set_procfs(old)
    assert stats.snapshot().usage_errors == {"missing": 2}


def test_malformed_files_are_reported_not_raised(procfs: Path):
    stats = RuntimeStats()
    (procfs / "stat").write_text("cpu garbage\n")
    (procfs / "meminfo").write_text("nonsense\n")
    sampler = UsageSampler(on_error=stats.usage_error)
    assert sampler.sample() is None
    assert stats.snapshot().usage_errors == {"malformed": 1}
