"""Host usage read with psutil: from a fixture procfs folder, and from a container's own /proc."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from agent.config import from_sources
from agent.model.quantity import NANO
from agent.telemetry.stats import RuntimeStats
from agent.source.host_usage import UsageSampler, set_procfs
from testkit.processes import stop_process

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


# Memory moves while a test reads it twice; another source of `used` (a cgroup's usage, MemTotal - MemFree)
# is off by hundreds of MiB or more.
DRIFT = 32 * 1024 * 1024


def meminfo_used_and_total() -> tuple[int, int]:
    """MemTotal - MemAvailable and MemTotal in bytes, read straight from /proc/meminfo."""
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total, available = (int(fields[k].split()[0]) * 1024 for k in ("MemTotal", "MemAvailable"))
    return total - available, total


def test_default_procfs_is_proc_and_used_memory_is_meminfos():
    """No flag, no HOST_PROC: `used` memory is MemTotal - MemAvailable of the process's own /proc/meminfo."""
    config = from_sources({"node_name": "node-a"}, {})
    assert config.procfs == "/proc"
    old = psutil.PROCFS_PATH
    try:
        set_procfs(config.procfs)
        before, _ = meminfo_used_and_total()
        usage = UsageSampler().sample()
        after, _ = meminfo_used_and_total()
    finally:
        set_procfs(old)
    assert min(before, after) - DRIFT <= usage.memory / NANO <= max(before, after) + DRIFT


SAMPLE_IN_NAMESPACES = """
import json, os
from agent.source.host_usage import UsageSampler, set_procfs
set_procfs("/proc")
stat = open("/proc/stat").read().splitlines()
print(json.dumps({
    "pids": [int(p) for p in os.listdir("/proc") if p.isdigit()],
    "memtotal": open("/proc/meminfo").readline(),
    "cpus": [line.split()[0] for line in stat if line.startswith("cpu")],
    "btime": [line for line in stat if line.startswith("btime")],
    "used": UsageSampler().sample().memory,
}))
"""


def test_a_fresh_pid_namespace_with_its_own_proc_reads_the_hosts_memory():
    """What a container runtime gives the agent: new PID and mount namespaces and a procfs mounted in them.

    Its process list is the namespace's own; /proc/meminfo and /proc/stat are still the whole host's, so the
    sampler inside reads the same `used` as outside.
    """
    unshare = ["unshare", "--user", "--map-root-user", "--pid", "--mount", "--fork", "--mount-proc"]
    # Every machine of this project's kind can (util-linux's unshare, unprivileged user namespaces): a machine
    # that cannot fails here, saying so, rather than skipping the one proof of the claim README makes.
    probe = subprocess.run([*unshare, "true"], capture_output=True, text=True) if shutil.which("unshare") else None
    assert probe is not None and probe.returncode == 0, (
        f"cannot create user, PID and mount namespaces: {probe.stderr.strip() if probe else 'no unshare'}")
    before, total = meminfo_used_and_total()
    done = subprocess.run([*unshare, sys.executable, "-c", SAMPLE_IN_NAMESPACES], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    after, _ = meminfo_used_and_total()
    assert done.returncode == 0, done.stderr
    inside = json.loads(done.stdout)
    stat = Path("/proc/stat").read_text().splitlines()
    assert 1 in inside["pids"] and len(inside["pids"]) < 5  # a namespaced process list: python is pid 1
    assert inside["memtotal"] == Path("/proc/meminfo").read_text().splitlines()[0] + "\n"
    assert int(inside["memtotal"].split()[1]) * 1024 == total
    assert inside["cpus"] == [line.split()[0] for line in stat if line.startswith("cpu")]
    assert inside["btime"] == [line for line in stat if line.startswith("btime")]
    assert min(before, after) - DRIFT <= inside["used"] / NANO <= max(before, after) + DRIFT
def test_used_moves_on_its_own_schedule_with_no_exporter_and_only_metrics(tmp_path):
    """--exporter none: nothing exports, yet /metrics shows a used cpu and a used memory that follow the host."""
    import re
    import subprocess
    import sys
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from testkit.waiting import wait_until

    root = tmp_path / "proc"
    root.mkdir()
    (root / "meminfo").write_text(MEMINFO)
    (root / "stat").write_text(stat([(100, 0, 50, 800, 50, 0, 0, 0, 0, 0)] * 2))
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--node-name", "sample-node", "--replay", "sample",
                             "--exporter", "none", "--export-interval", "0.3", "--procfs", str(root),
                             "--debug-address", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:
            if match := re.search(r"debug endpoint on port (\d+)", line):
                port = int(match[1])
                break
        assert port, "the agent did not report its debug port"

        def used() -> dict[str, float]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
            return {name: s.value for name in ("node_requests_node_cpu_cores", "node_requests_node_memory_bytes")
                    for s in families[name].samples if s.labels["quantity"] == "used"}

        start_memory = (16384000 - 4096000) * 1024
        wait_until(lambda: used() == {"node_requests_node_cpu_cores": 0.0, "node_requests_node_memory_bytes": start_memory},
                   timeout=15)
        # The host gets busy (cpu0 fully, cpu1 half) and memory fills up.
        (root / "stat").write_text(stat([(100 + 60, 0, 50, 800, 50, 0, 0, 0, 0, 0),
                                         (100 + 30, 0, 50, 800 + 30, 50, 0, 0, 0, 0, 0)]))
        (root / "meminfo").write_text(MEMINFO.replace("MemAvailable:    4096000 kB", "MemAvailable:    1024000 kB"))
        wait_until(lambda: used().get("node_requests_node_cpu_cores") == pytest.approx(1.5), timeout=15, interval=0.05)
        wait_until(lambda: used()["node_requests_node_memory_bytes"] == (16384000 - 1024000) * 1024, timeout=15)
    finally:
        stop_process(proc, 10.0)
        proc.stderr.close()
