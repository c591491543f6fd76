"""The folder layout is the data flow; these tests keep it that way by reading the import graph.

model/ is the pure core (no I/O, clock, threads, network or telemetry
library); pipeline/ carries events to the state; source/ feeds the pipeline;
export/ reads it. Nothing imports against that direction, and only the
top-level modules (cli, config, explain) may see every folder.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "agent"

# What each folder may import from the agent itself.
ALLOWED = {
    "model": {"model"},
    "pipeline": {"model", "pipeline"},
    "source": {"model", "pipeline", "source"},
    "export": {"model", "pipeline", "export"},
}
# The standard library's computational modules: what a pure function may use.
PURE_STDLIB = {
    "__future__", "abc", "bisect", "collections", "dataclasses", "decimal", "enum", "fractions", "functools",
    "heapq", "itertools", "json", "math", "operator", "re", "types", "typing", "numbers", "string",
}


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, as absolute dotted names (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names if module == "agent")
    return found


def folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "agent" and parts[1] in ALLOWED else None


def modules_in(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).glob("*.py"))


@pytest.mark.parametrize("path", modules_in("model"), ids=lambda p: p.name)
def test_model_is_pure(path):
    outside = {m for m in imports_of(path)
               if not m.startswith("agent.model") and m.split(".")[0] not in PURE_STDLIB}
    assert not outside, f"agent/model/{path.name} imports {sorted(outside)}: the model must stay pure"


@pytest.mark.parametrize("path", [p for folder in ALLOWED for p in modules_in(folder)],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_import_against_the_flow(path):
    folder = path.parent.name
    wrong = set()
    for module in imports_of(path):
        if module == "agent" or (module.startswith("agent.") and folder_of(module) is None):
            wrong.add(module)  # the top level (cli, config, explain, __init__) is wiring, never a dependency
        elif (target := folder_of(module)) is not None and target not in ALLOWED[folder]:
            wrong.add(module)
    assert not wrong, f"agent/{folder}/{path.name} imports {sorted(wrong)} against the data flow"


def test_the_checks_see_a_violation(tmp_path, monkeypatch):
    """The graph reader resolves relative imports, so a hidden upward import cannot slip through."""
    fake = tmp_path / "agent" / "model"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("from ..pipeline.state import NodeState\nimport socket\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "agent")
    found = imports_of(fake / "bad.py")
    assert "agent.pipeline.state" in found and "socket" in found


def test_every_module_lives_in_a_folder_that_says_what_it_is():
    top = {p.name for p in PACKAGE.glob("*.py")}
    assert top == {"__init__.py", "__main__.py", "cli.py", "config.py", "explain.py"}, \
        "new modules belong in model/, pipeline/, source/ or export/"
