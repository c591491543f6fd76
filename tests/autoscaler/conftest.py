"""The oracles (one process per autoscaler build for the whole module), and explain called in-process."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from testkit.autoscaler_oracle import ORACLE_RELEASES, AutoscalerOracle


@pytest.fixture(scope="session")
def oracles() -> Iterator[dict[str, AutoscalerOracle]]:
    """An oracle per build of components.autoscaler (1.36.1, neon), each built on first use."""
    started = {name: AutoscalerOracle.start(name) for name in ORACLE_RELEASES}
    try:
        yield started
    finally:
        for oracle in started.values():
            oracle.close()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """explain reads the agent's variables (NRA_AUTOSCALER_ARGS...): none may leak in from the runner."""
    for name in list(os.environ):
        if name.startswith("NRA_"):
            monkeypatch.delenv(name)


def explain(path: Path, *, release: str, flags: Sequence[str], at: str) -> dict[str, Any]:
    """``node-requests-agent explain PATH --output json --at AT --autoscaler-release RELEASE FLAGS...`` in this
    process (agent.cli.main, its output captured): the verdict per node name. A non-zero exit fails with its
    stderr."""
    from agent.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["explain", str(path), "--output", "json", "--at", at, "--autoscaler-release", release, *flags])
    assert code == 0, f"explain exited {code}: {err.getvalue()}"
    return {n["autoscaler"]["node"]: n["autoscaler"] for n in json.loads(out.getvalue())["nodes"]}
