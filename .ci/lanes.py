"""The suite as independent lanes side by side, then one combined count and the slowest tests across lanes.

A lane is one pytest session over a marker group. The `node` tests run in a lane of their own: they mostly wait
on a real kubelet (its token rotation alone holds them 8 minutes), and they must stay one session, as a second node
session would remove the pod network namespaces the first made; the `autoscaler` tests join them there. Everything
else is the other lane. Each lane has
its own basetemp and JUnit XML; the first lane's output goes to the console as it runs, the others' follow it when
it ends. The last lines are the combined figures: the 40 slowest tests of every lane (setup, call and teardown
together), then ``N passed, N failed, N skipped`` alone on the last line (errors count as failed). The exit
status is non-zero when a lane failed, collected no test or wrote no report.

    python .ci/lanes.py [pytest arguments given to every lane]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

SLOWEST = 40


@dataclass(frozen=True, kw_only=True)
class Lane:
    name: str
    marker: str


# The first lane runs in the foreground (its output live); the others beside it. The autoscaler's tests (its own
# code on generated nodes, the running autoscaler) ride with the node lane, which mostly waits on the kubelet.
LANES = (Lane(name="rest", marker="not node and not autoscaler"),
         Lane(name="node+autoscaler", marker="node or autoscaler"))


@dataclass(frozen=True, kw_only=True)
class Outcome:
    lane: str
    code: int
    seconds: float
    passed: int
    failed: int
    skipped: int
    durations: list[tuple[float, str]]


def command(lane: Lane, workdir: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-m", lane.marker, "-p", "no:cacheprovider",
            "--basetemp", str(workdir / lane.name / "tmp"), "--junitxml", str(report(workdir, lane)),
            "--durations=10", *extra]


def report(workdir: Path, lane: Lane) -> Path:
    return workdir / f"{lane.name}.xml"


def read_report(lane: Lane, path: Path, code: int, seconds: float) -> Outcome:
    """The lane's counts, session time and per-test times from its JUnit XML (pytest's default: a test's time is its
    setup, call and teardown together); ``seconds`` when it has none. A missing or broken report counts as one
    failure."""
    try:
        root = ET.parse(path).getroot()
        cases = list(root.iter("testcase"))
        seconds = float(next(root.iter("testsuite")).get("time") or seconds)
    except (OSError, ET.ParseError, StopIteration, ValueError) as error:
        print(f"lanes: {lane.name}: no readable report ({error})", file=sys.stderr)
        return Outcome(lane=lane.name, code=code or 1, seconds=seconds, passed=0, failed=1, skipped=0, durations=[])
    passed = failed = skipped = 0
    durations = []
    for case in cases:
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            failed += 1
        elif "skipped" in tags:
            skipped += 1
        else:
            passed += 1
        name = f"{case.get('classname')}::{case.get('name')}"
        durations.append((float(case.get("time") or 0.0), name))
    return Outcome(lane=lane.name, code=code, seconds=seconds, passed=passed, failed=failed, skipped=skipped,
                   durations=durations)


def run(extra: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="nra-lanes-") as tmp:
        workdir = Path(tmp)
        started = time.monotonic()
        background = []
        for lane in LANES[1:]:
            (workdir / lane.name).mkdir()
            log = (workdir / f"{lane.name}.log").open("w")
            background.append((lane, log, subprocess.Popen(command(lane, workdir, extra), stdout=log,
                                                           stderr=subprocess.STDOUT), time.monotonic()))
        first = LANES[0]
        (workdir / first.name).mkdir()
        print(f"=== lane {first.name} (pytest -m {first.marker!r}); beside it: "
              + ", ".join(f"{lane.name} (pytest -m {lane.marker!r})" for lane, *_ in background), flush=True)
        try:
            code = subprocess.call(command(first, workdir, extra))
        except BaseException:  # interrupted: no lane outlives the run
            for _, _, proc, _ in background:
                proc.terminate()
            raise
        outcomes = [read_report(first, report(workdir, first), code, time.monotonic() - started)]
        for lane, log, proc, began in background:
            code = proc.wait()
            log.close()
            print(f"\n=== lane {lane.name} (pytest -m {lane.marker!r}), run beside the above ===", flush=True)
            sys.stdout.write((workdir / f"{lane.name}.log").read_text(errors="replace"))
            outcomes.append(read_report(lane, report(workdir, lane), code, time.monotonic() - began))
        return summarise(outcomes, time.monotonic() - started)


def summarise(outcomes: list[Outcome], seconds: float) -> int:
    slowest = sorted(((t, o.lane, name) for o in outcomes for t, name in o.durations), reverse=True)[:SLOWEST]
    print(f"\n=== {SLOWEST} slowest tests across lanes (setup + call + teardown) ===")
    for t, lane, name in slowest:
        print(f"{t:9.2f}s  {lane:<5} {name}")
    bad = []
    for o in outcomes:
        empty = o.passed + o.failed + o.skipped == 0
        if o.code != 0 or o.failed or empty:
            bad.append(o.lane)
        print(f"lane {o.lane}: {o.passed} passed, {o.failed} failed, {o.skipped} skipped in {o.seconds:.0f} s "
              f"(pytest exit {o.code}{', no test collected' if empty else ''})")
    print(f"lanes: {len(outcomes)} side by side in {seconds:.0f} s; "
          + (f"failed: {', '.join(bad)}" if bad else "all passed"))
    total = {k: sum(getattr(o, k) for o in outcomes) for k in ("passed", "failed", "skipped")}
    print(f"{total['passed']} passed, {total['failed']} failed"
          + (f", {total['skipped']} skipped" if total["skipped"] else ""), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
