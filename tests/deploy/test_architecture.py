"""The folder layout is the data flow; these tests keep it that way by reading the import graph.

model/ is the pure core (no I/O, clock, threads, network or telemetry
library); decode/ turns API objects into its records; pipeline/ carries
events to the state and holds only those data stages; telemetry/ is the
agent's own signals beside the flow; source/ feeds the pipeline; export/ (OTLP, Prometheus
text) reads it; report/ renders model values for people; debug/, explain/
and run/ are a room per command or endpoint, and only run/ (the running
agent's wiring) sees every folder. config is a leaf every room may read;
cli only parses and hands over.

Beside the agent: testkit/ is the kit tests and benchmarks both stand on (factories, the control planes, fixtures);
tests/ mirrors agent/'s rooms (plus the lanes that run real components) and reaches the agent through public names
only; bench/ imports the kit, never tests/, and the suite never imports bench/.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agent"

# What each folder may import from the agent itself.
ALLOWED = {
    "model": {"model"},
    "decode": {"model", "decode"},
    "pipeline": {"model", "pipeline"},
    # The agent's own telemetry, beside the flow: it implements the pipeline's metrics interfaces and reads its state.
    "telemetry": {"model", "pipeline", "telemetry"},
    "source": {"model", "decode", "pipeline", "telemetry", "source"},
    "export": {"model", "pipeline", "telemetry", "export", "config"},
    "report": {"model", "pipeline", "telemetry", "report"},
    "debug": {"model", "pipeline", "telemetry", "export", "report", "debug", "config"},
    "explain": {"model", "decode", "pipeline", "source", "report", "explain", "config"},
    "run": {"model", "decode", "pipeline", "telemetry", "source", "export", "report", "debug", "explain", "run",
            "config"},
}
# Top-level modules and what they may import: config is a leaf, cli hands over to a room.
TOP_LEVEL = {
    "__init__.py": {"telemetry"},  # re-exports the agent's own signals as its public API
    "__main__.py": {"cli"},
    "config.py": {"model"},
    "cli.py": {"config", "model", "run", "explain"},
}
# The standard library's computational modules: what a pure function may use.
PURE_STDLIB = {
    "__future__", "abc", "bisect", "calendar", "collections", "dataclasses", "msgspec", "decimal", "enum", "fractions", "functools",
    "difflib", "heapq", "itertools", "json", "math", "operator", "re", "types", "typing", "numbers", "string",
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
            if module == "agent" or (module.startswith("agent.") and (PACKAGE.parent / module.replace(".", "/")).is_dir()):
                # ``from agent.decode import spec``: what is imported is the module agent.decode.spec
                found.update(f"{module}.{alias.name}" for alias in node.names)
            else:
                found.add(module)
    return found


def folder_of(module: str) -> str | None:
    """The room a module belongs to: a folder of ALLOWED, or a top-level module's stem (``config``)."""
    parts = module.split(".")
    if parts[0] != "agent" or len(parts) < 2:
        return None
    if parts[1] in ALLOWED and len(parts) > 2:
        return parts[1]
    return parts[1] if f"{parts[1]}.py" in TOP_LEVEL else None


def modules_in(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


@pytest.mark.parametrize("path", modules_in("model"), ids=lambda p: p.name)
def test_model_is_pure(path):
    outside = {m for m in imports_of(path)
               if not m.startswith("agent.model") and m.split(".")[0] not in PURE_STDLIB}
    assert not outside, f"agent/model/{path.name} imports {sorted(outside)}: the model must stay pure"


@pytest.mark.parametrize("path", [p for folder in ALLOWED for p in modules_in(folder)],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_import_against_the_flow(path):
    folder = path.relative_to(PACKAGE).parts[0]
    wrong = set()
    for module in imports_of(path):
        if module in ("agent", "agent.__version__"):
            continue  # the version string, read for user agents and resource attributes
        if module == "agent" or (module.startswith("agent.") and folder_of(module) is None):
            wrong.add(module)  # a module outside every room
        elif (target := folder_of(module)) is not None and target not in ALLOWED[folder]:
            wrong.add(module)
    assert not wrong, f"{path.relative_to(PACKAGE)} imports {sorted(wrong)} against the data flow"


@pytest.mark.parametrize("name", sorted(TOP_LEVEL))
def test_top_level_modules_import_only_their_leaves(name):
    wrong = {m for m in imports_of(PACKAGE / name)
             if m.startswith("agent.") and m != "agent.__version__" and folder_of(m) not in TOP_LEVEL[name]}
    assert not wrong, f"agent/{name} imports {sorted(wrong)}: config is a leaf and cli only hands over"


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
    assert top == set(TOP_LEVEL), f"new modules belong in one of {', '.join(sorted(ALLOWED))}/"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(ALLOWED), f"every package is a room of the map: {sorted(folders ^ set(ALLOWED))}"


def test_the_benchmarks_call_only_kit_methods_that_exist(tmp_path):
    """bench/ runs only when someone measures, never in the suite: a kit method it calls that a change
    removed (the cluster fixture's node simulation when KWOK replaced it) would only show up as a crash at
    measurement time. Every ``cluster.X``/``kwok.X`` a benchmark names, held in a variable or an attribute
    (``scene.cluster.X``), in any module under bench/, exists on a Cluster/Kwok."""
    from testkit.kwok import Kwok
    from testkit.trust import TrustCluster

    bench = Path(__file__).resolve().parents[2] / "bench"
    # The scale benchmark's cluster is a TrustCluster (the shipped RBAC and authorization), a Cluster with more.
    objects = {"cluster": TrustCluster(tmp_path), "kwok": Kwok(TrustCluster(tmp_path), workdir=tmp_path)}
    missing, seen = [], set()
    for path in sorted(bench.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute):
                continue
            holder = node.value
            name = holder.id if isinstance(holder, ast.Name) else holder.attr if isinstance(holder, ast.Attribute) else None
            if name not in objects:
                continue
            seen.add(name)
            # On the class (methods, properties: a property of an unstarted cluster would raise) or set by __init__.
            if not hasattr(type(objects[name]), node.attr) and node.attr not in vars(objects[name]):
                missing.append(f"{path.relative_to(bench)}:{node.lineno} {name}.{node.attr}")
    assert seen == set(objects), f"no benchmark names {sorted(set(objects) - seen)}: the check read nothing"
    assert not missing, missing


REPO = PACKAGE.parent
#: Folders of tests/ that are no room of agent/: the lanes that run real components (pytest markers of the same
#: name) and the deployment's files (manifests, chart, image, docs, and this map).
LANES = {"cluster", "collector", "node", "deploy", "autoscaler"}


def imported(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every import in a file: name None for ``import module``."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found += [(node.lineno, node.module or "", alias.name) for alias in node.names]
    return found


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def python_files(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def import_violations(paths: list[Path], rule) -> list[str]:
    """``path:line module[.name]`` for each import ``rule(module, name)`` refuses."""
    return [f"{path.relative_to(REPO)}:{line} {module}{'.' + name if name else ''}"
            for path in paths for line, module, name in imported(path) if not rule(module, name)]


def suite_import(module: str, name: str | None) -> bool:
    """What a test or the kit may import: never bench/, and the agent only by public names."""
    if under(module, "bench") or (module == "" and name == "bench"):
        return False
    if under(module, "agent"):
        return not any(private(part) for part in [*module.split("."), *([name] if name else [])])
    return True


def bench_import(module: str, name: str | None) -> bool:
    """What a benchmark may import besides itself and the agent: the kit, never the suite."""
    return not under(module, "tests")


def test_tests_and_the_kit_import_no_benchmark_and_no_private_name_of_the_agent():
    wrong = import_violations(python_files("tests") + python_files("testkit"), suite_import)
    assert not wrong, f"tests import the agent by public names only and never bench/: {wrong}"


def test_the_benchmarks_import_the_kit_not_the_tests():
    wrong = import_violations(python_files("bench"), bench_import)
    assert not wrong, f"bench/ imports testkit/, never tests/: {wrong}"
    # The kit is no test module: it does not import the suite either.
    assert not import_violations(python_files("testkit"), bench_import)


def test_the_import_rules_see_a_violation(tmp_path):
    """The rules refuse what they are for: a private agent name, a benchmark in a test, the suite in a benchmark."""
    bad = tmp_path / "bad.py"
    bad.write_text("from agent.cli import _parser\nimport agent.source._x\nfrom bench.common import realistic_pod\n"
                   "from bench import worst_node\nfrom tests.conftest import x\nfrom agent import __version__\n")
    refused = [(module, name) for _, module, name in imported(bad) if not suite_import(module, name)]
    assert refused == [("agent.cli", "_parser"), ("agent.source._x", None), ("bench.common", "realistic_pod"),
                       ("bench", "worst_node")]
    assert [(m, n) for _, m, n in imported(bad) if not bench_import(m, n)] == [("tests.conftest", "x")]


#: Underscored attributes a test may read, none of them the agent's or the kit's: the public API of the standard
#: library's named tuples (underscored so as not to clash with field names), and two with no public equivalent.
PUBLIC_UNDERSCORED = {
    "_fields": "a named tuple's field names",
    "_replace": "a named tuple's copy with fields changed",
    "_asdict": "a named tuple as a dict",
    "_base_executable": "sys: the interpreter a virtual environment was made from",
    "_actions": "argparse: a parser's options (it lists them nowhere else)",
}


def own_private_names(tree: ast.AST) -> set[str]:
    """The underscored names a file defines itself (its helpers, its classes' attributes and methods): reading
    those is no reach into another module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {name for name in names if private(name)}


def private_attribute_reads(paths: list[Path]) -> list[str]:
    """``path:line expression`` for each underscored attribute a file reads that it does not define itself and
    that is not in PUBLIC_UNDERSCORED: an agent's or the kit's private state (``agent._threads``)."""
    wrong = []
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        own = own_private_names(tree) | set(PUBLIC_UNDERSCORED)
        wrong += [f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{node.lineno} {ast.unparse(node)}"
                  for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and private(node.attr) and node.attr not in own]
    return wrong


def test_tests_read_no_private_attribute_of_the_agent_or_the_kit():
    """A test asserts through public names: a test reading ``reflector._settings`` breaks when the agent renames
    it, and passes whatever the behaviour. A file's own helpers and classes are its own business."""
    wrong = private_attribute_reads(python_files("tests"))
    assert not wrong, f"tests read public names only (or add a seam to the kit or the agent): {wrong}"


def test_the_private_attribute_check_sees_a_violation(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("class Proxy:\n    def __init__(self):\n        self._open = set()\n\n"
                   "def _helper(agent, cluster, proxy, row):\n"
                   "    return agent._threads, cluster._bins['kubectl'], proxy._open, row._replace(a=1), agent.__dict__\n")
    assert private_attribute_reads([bad]) == [f"{bad}:6 agent._threads", f"{bad}:6 cluster._bins"]


def test_the_benchmarks_override_no_private_method_of_the_kit():
    """A benchmark that needs the kit to behave differently passes a constructor argument (the control plane's
    ``*_flags``); a subclass overriding an underscored method breaks silently when the kit renames it."""
    wrong = []
    for path in python_files("bench"):
        tree = ast.parse(path.read_text(), filename=str(path))
        kit = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and under(node.module or "", "testkit") for alias in node.names}
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            if {b.id for b in cls.bases if isinstance(b, ast.Name)} & kit:
                wrong += [f"{path.relative_to(REPO)}:{f.lineno} {cls.name}.{f.name}" for f in cls.body
                          if isinstance(f, ast.FunctionDef) and private(f.name)]
    assert not wrong, wrong


def test_tests_mirror_the_agents_rooms():
    """A unit test sits in the folder of the room it tests (tests/source/ for agent/source/); a test of a top-level
    module sits at tests/'s top and names it first (test_config_autoscaler.py). The other folders are the lanes."""
    tests = REPO / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(ALLOWED) | LANES, sorted(folders - set(ALLOWED) - LANES)
    modules = {name.removesuffix(".py") for name in TOP_LEVEL if not name.startswith("__")}
    loose = [p.name for p in tests.glob("test_*.py") if p.stem.removeprefix("test_").split("_")[0] not in modules]
    assert not loose, f"{loose}: a test at tests/'s top tests one of agent/'s top-level modules {sorted(modules)}"


def test_the_documented_map_names_every_module_of_every_room():
    """docs/architecture.md's "What each folder holds" lists each room's modules; one added, moved or removed without
    the map (it once left out three of model/'s) fails here."""
    import re

    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    section = doc.split("## What each folder holds", 1)[1]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z_]+)/` \| (.+?) \| ", section, re.M)}
    assert set(rows) == set(ALLOWED), sorted(set(rows) ^ set(ALLOWED))
    for folder, cell in rows.items():
        # `otlp/` (`exporter`, ...) and `prometheus/exposition` name modules of a subfolder.
        documented = set()
        for sub, inner in re.findall(r"`([a-z_]+)/` \(([^)]*)\)", cell):
            documented |= {f"{sub}/{name}" for name in re.findall(r"`([a-z_]+)`", inner)}
        cell = re.sub(r"`[a-z_]+/` \([^)]*\)", "", cell)
        documented |= set(re.findall(r"`([a-z_/]+)`", cell))
        actual = {str(p.relative_to(PACKAGE / folder).with_suffix("")) for p in modules_in(folder)
                  if p.name != "__init__.py"}
        assert documented == actual, (folder, sorted(documented ^ actual))
