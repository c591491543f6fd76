"""``python -m components``: every component built, several at a time, each after the builds it reuses."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from components.__main__ import JOBS, Job, build_all
from components.gotools import GO_TOOLS
from components.kubernetes import KUBERNETES

ROOT = Path(__file__).resolve().parents[2]
#: Modules of components/ that build nothing by themselves: the cache, how Go runs, the generic Debian package fetcher.
LIBRARIES = {"__init__", "__main__", "cache", "go", "debian"}


def _job(name: str, log: Path, seconds: float = 0.3, exit_code: int = 0, after: tuple[str, ...] = ()) -> Job:
    script = (f"import time, sys; open({str(log)!r}, 'a').write('start {name} %f\\n' % time.monotonic()); "
              f"time.sleep({seconds}); open({str(log)!r}, 'a').write('end {name} %f\\n' % time.monotonic()); "
              f"sys.exit({exit_code})")
    return Job(name=name, argv=("-c", script), after=after)


def _events(log: Path) -> list[tuple[str, str, float]]:
    rows = [line.split() for line in log.read_text().splitlines()]
    return sorted(((kind, name, float(t)) for kind, name, t in rows), key=lambda e: e[2])


def test_independent_builds_overlap_up_to_the_slots_and_dependents_wait(tmp_path: Path, capsys) -> None:
    log = tmp_path / "log"
    jobs = [_job("a", log), _job("b", log), _job("c", log), _job("d", log, after=("a", "b"))]
    assert build_all(jobs, slots=2) == 0
    events = _events(log)
    running, most = 0, 0
    for kind, _, _ in events:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most == 2  # two at once, never three
    when = {(kind, name): t for kind, name, t in events}
    assert when[("start", "d")] >= max(when[("end", "a")], when[("end", "b")])
    assert "components ready in" in capsys.readouterr().out


def test_a_failed_build_is_named_and_nothing_that_needs_it_starts(tmp_path: Path, capsys) -> None:
    log = tmp_path / "log"
    jobs = [_job("broken", log, seconds=0.05, exit_code=3), _job("needs-broken", log, after=("broken",))]
    assert build_all(jobs, slots=2) == 1
    assert {name for _, name, _ in _events(log)} == {"broken"}
    err = capsys.readouterr().err
    assert "broken FAILED" in err and "exit 3" in err and "not started: needs-broken" in err


def test_every_component_module_and_go_tool_is_built_and_every_dependency_exists() -> None:
    built = {job.argv[1].removeprefix("components.") for job in JOBS if job.argv[0] == "-m"}
    modules = {path.stem for path in (ROOT / "components").glob("*.py")} - LIBRARIES
    with_main = {m for m in modules
                 if any(isinstance(node, ast.FunctionDef) and node.name == "main"
                        for node in ast.parse((ROOT / "components" / f"{m}.py").read_text()).body)}
    assert with_main == modules, "a component module python -m components.<name> cannot run"
    assert with_main - built == set(), "a component python -m components never builds"
    targets = {job.argv[1:] for job in JOBS}
    assert {("components.gotools", name) for name in GO_TOOLS} <= targets, "a Go tool python -m components never builds"
    assert {("components.kubernetes", version) for version in KUBERNETES} <= targets
    names = [job.name for job in JOBS]
    assert len(names) == len(set(names))
    assert all(dep in names and names.index(dep) < names.index(job.name) for job in JOBS for dep in job.after)
    assert all(job.argv[0] == "-m" for job in JOBS)


def test_a_failed_image_build_prints_the_tail_of_its_output(tmp_path: Path) -> None:
    """buildah and mmdebstrap say why at the end of a long output: the command's last 40 lines are printed."""
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "mmdebstrap"  # found before any real one on PATH; prints 100 lines and fails as a build would
    fake.write_text("#!/bin/sh\nfor i in $(seq 1 100); do echo \"line $i\"; done\nexit 7\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}", NRA_COMPONENT_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "components.image", "base"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "exit 7" in proc.stderr and "mmdebstrap" in proc.stderr
    printed = [line for line in proc.stderr.splitlines() if line.startswith("line ")]
    assert printed == [f"line {i}" for i in range(61, 101)], proc.stderr
    assert "Traceback" not in proc.stderr
