"""Two test runs on one machine take turns at the node session instead of tearing down each other's pod network
namespaces (a session's clean-up removes the sandboxes pinned since it started, whoever's they are)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from testkit.node_cluster import exclusive_node_session
from testkit.repo import REPO

HOLDER = """
import sys, time
from pathlib import Path
from testkit.node_cluster import exclusive_node_session
with exclusive_node_session(Path(sys.argv[1]), say=lambda line: None):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_second_session_waits_for_the_first_and_names_it(tmp_path: Path) -> None:
    lock = tmp_path / "lock" / "node-session.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "1.5"], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said: list[str] = []
        started = time.monotonic()
        with exclusive_node_session(lock, say=said.append):
            waited = time.monotonic() - started
        # The holder keeps the lock 1.5 s after saying so: the second session began only after it let go.
        assert waited >= 1.0, waited
        assert len(said) == 1 and f"pid {holder.pid}" in said[0], said
    finally:
        holder.kill()
        holder.wait()


def test_a_session_whose_process_died_leaves_the_lock_free(tmp_path: Path) -> None:
    lock = tmp_path / "node-session.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "60"], cwd=REPO, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    said: list[str] = []
    with exclusive_node_session(lock, say=said.append):
        pass
    assert said == []
