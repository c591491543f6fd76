"""Lint and types, run by the README's test command (so by CI): ruff and mypy over agent/, components/, bench/, release/,
both configured in pyproject.toml (rule set, scope, per-module exceptions), and every suppression says why.

A finding fails the test with the tool's own report. mypy keeps its cache in .mypy_cache under the repository (git
ignores it), so a warm run checks only what changed.
"""

from __future__ import annotations

import re
import subprocess
import sys

from testkit.repo import REPO

SCOPE = ("agent", "components", "bench", "release")
# A suppression (noqa with its codes, or type: ignore with its codes), then what must follow it on the line: why.
MARKER = re.compile(r"#\s*(noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(?:\[[a-z-, ]+\])?)(.*)$")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-fix", "--output-format", "concise", *SCOPE)
    assert done.returncode == 0, f"ruff check {' '.join(SCOPE)}:\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing():
    done = _run("mypy")  # files, settings and the few per-module exceptions: pyproject.toml's [tool.mypy]
    assert done.returncode == 0, f"mypy:\n{done.stdout}{done.stderr}"


def unexplained(line: str) -> str | None:
    """The marker of a suppression on ``line`` that gives no reason after it, else None."""
    found = MARKER.search(line)
    if found is None:
        return None
    reason = found.group(2).strip(" -#:()")
    return None if len(re.findall(r"[A-Za-z]{3,}", reason)) >= 2 else found.group(1)


def test_unexplained_is_what_a_bare_marker_is():
    assert unexplained("x = f()  # type: ignore[arg-type]") == "type: ignore[arg-type]"
    assert unexplained("import x  # noqa: F401") == "noqa: F401"
    assert unexplained("x = f()  # type: ignore[arg-type]  # msgspec's stubs miss the field") is None
    assert unexplained("except Exception:  # noqa: BLE001 - the loop outlives any one connection") is None
    assert unexplained("x = 1  # a plain comment") is None


def test_every_suppression_says_why():
    bare = [f"{path.relative_to(REPO)}:{number}: {marker}"
            for folder in SCOPE for path in sorted((REPO / folder).rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if (marker := unexplained(line)) is not None]
    assert not bare, "a noqa or type: ignore without its reason:\n" + "\n".join(bare)
