"""``python -m components [--jobs N]``: build (or find in the cache) every real component the suite runs, several
at a time.

On a cold machine most of the first CI run is spent here, and much of each build waits on the Go module proxy or
Debian's mirror rather than on the two cores, so independent builds overlap: the control plane's compile beside the
Collector's downloads beside the image's debootstrap. A build that reuses another's Go build cache (the kubelet
reuses the control plane's packages) or output (the Collector's builder, the images' binaries) waits for it instead
of building the same thing twice at once. Each component still builds through its own module (``python -m
components.<name> [target]``; the Go tools of components.gotools by their row's name), so its cache entry and lock
are the same as when a test asks for it; a warm cache makes every job return at once.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from components.gotools import GO_TOOLS

__all__ = ["JOBS", "Job", "build_all", "go_tool_job", "main"]


class Job(NamedTuple):
    name: str
    argv: tuple[str, ...]  # after ``python``
    after: tuple[str, ...] = ()


def go_tool_job(name: str) -> Job:
    """The job that builds row ``name`` of components.gotools' table (a KeyError at import for a name not in it)."""
    return Job(name=GO_TOOLS[name].name, argv=("-m", "components.gotools", name))


#: In the order they are started when a slot is free: the longest chains first.
JOBS: tuple[Job, ...] = (
    Job(name="kubernetes 1.37.2", argv=("-m", "components.kubernetes", "1.37.2")),
    go_tool_job("otelcol-builder"),
    Job(name="collector", argv=("-m", "components.collector"), after=("otelcol-builder",)),
    Job(name="node tools", argv=("-m", "components.node", "tools")),
    Job(name="kubernetes 1.36.3", argv=("-m", "components.kubernetes", "1.36.3")),
    go_tool_job("kwok"),
    Job(name="tiny", argv=("-m", "components.node", "tiny")),
    Job(name="coredns", argv=("-m", "components.node", "coredns")),
    Job(name="images", argv=("-m", "components.image", "all"), after=("collector", "node tools", "tiny", "coredns")),
    Job(name="kubelet", argv=("-m", "components.node", "kubelet"), after=("kubernetes 1.37.2",)),
    go_tool_job("helm"),
    go_tool_job("prometheus"),
    go_tool_job("etcd"),
    go_tool_job("krew"),
    go_tool_job("registry"),
    go_tool_job("prometheus-operator"),
    # The cluster-autoscaler from its released source (../shared/autoscaler/), and our oracle inside each tree.
    Job(name="cluster-autoscaler 1.36.1", argv=("-m", "components.autoscaler", "1.36.1")),
    Job(name="cluster-autoscaler neon", argv=("-m", "components.autoscaler", "neon")),
)


def build_all(jobs: Sequence[Job], slots: int) -> int:
    """Run ``jobs`` with at most ``slots`` at once, each after the ones it names; 0 when all succeeded."""
    pending, done = list(jobs), set()
    running: dict[subprocess.Popen[bytes], tuple[Job, float]] = {}
    failed: list[str] = []
    started_all = time.monotonic()
    while pending or running:
        for job in list(pending):
            if len(running) >= slots or failed:
                break
            if all(dep in done for dep in job.after):
                pending.remove(job)
                proc = subprocess.Popen([sys.executable, *job.argv], stdout=subprocess.DEVNULL)
                running[proc] = (job, time.monotonic())
        if failed and not running:
            break
        finished = _wait_any(running)
        job, started = running.pop(finished)
        took = time.monotonic() - started
        if finished.returncode == 0:
            done.add(job.name)
            print(f"components: {job.name} ready after {took:.0f} s", file=sys.stderr, flush=True)
        else:
            failed.append(job.name)
            print(f"components: {job.name} FAILED after {took:.0f} s (exit {finished.returncode}; "
                  f"python {' '.join(job.argv)} says why above)", file=sys.stderr, flush=True)
    wall = time.monotonic() - started_all
    if failed or pending:
        never = [job.name for job in pending]
        print(f"components: failed: {', '.join(failed)}" + (f"; not started: {', '.join(never)}" if never else ""),
              file=sys.stderr, flush=True)
        return 1
    print(f"components ready in {wall:.0f} s ({slots} at a time)", flush=True)
    return 0


def _wait_any(running: Iterable[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    while True:
        for proc in running:
            if proc.poll() is not None:
                return proc
        time.sleep(0.5)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m components", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3, help="builds at once (default 3)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    return build_all(JOBS, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
