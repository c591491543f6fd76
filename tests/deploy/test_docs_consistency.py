"""One answer per question (issue 39): a fact the documents state in more than one place (a default, the supported
releases, a limit, the RBAC) is checked against the code, the manifest or the chart value it describes.

Issue 39 found ten such disagreements: an empty autoscaler release was "the newest" (1.38) in three places while
the code uses 1.36, the supported autoscaler releases were 1.28-1.38 in one place and 1.31-1.36 in another, the
README's RBAC left out the PDBs the manifests grant, a registry pull was "not run" while a node test runs it, ...
Each statement below is found by a pattern whose groups are the stated value; a statement that is no longer found
fails too (reworded, it must be found again), so the check cannot pass by losing what it reads. The measured
figures are test_docs_figures.py's: they live in docs/benchmarks.md and docs/testing.md only.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from agent.config import SETTINGS
from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER, RELEASES
from agent.model.rules import OLDEST
from agent.model.rules import RELEASES as KUBERNETES_RELEASES
from components.gotools import GO_TOOLS
from testkit.repo import REPO


def manifest(path: str, kind: str) -> dict:
    (found,) = [o for o in yaml.safe_load_all((REPO / path).read_text()) if o and o["kind"] == kind]
    return found


def _mebibytes(quantity: str) -> str:
    assert quantity.endswith("Mi"), quantity
    return f"{quantity[:-2]} MiB"


def _rbac() -> str:
    """The ClusterRole's resources and verbs, sorted, as the documents name them (words)."""
    rules = manifest("daemonset/rbac.yaml", "ClusterRole")["rules"]
    return " ".join(sorted({w for rule in rules for w in (*rule["resources"], *rule["verbs"])}))


_RBAC_WORDS = {"pods", "nodes", "poddisruptionbudgets", "secrets", "configmaps", "events", "replicasets",
               "deployments", "statefulsets", "list", "watch", "get", "create", "update", "patch", "delete"}


def _rbac_words(stated: str) -> str:
    return " ".join(sorted(set(re.findall(r"[a-z]+", stated)) & _RBAC_WORDS))


_CONTAINER = manifest("daemonset/daemonset.yaml", "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
_PROCESSOR = (REPO / "otel-config/nodeidentityprocessor/processor.go").read_text()
_BUILDER = yaml.safe_load((REPO / "otel-config/builder-config.yaml").read_text())


class Statement(NamedTuple):
    doc: str  # from the repository's root
    pattern: str  # its groups are the stated value


class Fact(NamedTuple):
    name: str
    truth: str  # what the code, manifest or chart says, written as the documents write it
    source: str  # where the truth is
    statements: tuple[Statement, ...]
    stated: Callable[[tuple[str, ...]], str] = lambda groups: " ".join(g.replace(",", "") for g in groups)


def _release_order(release: str) -> tuple[int, ...]:
    """neon after the numbered releases, those by minor."""
    return (1, 0) if release == "neon" else (0, int(release.split(".")[1]))


def _major_minor(version: str) -> str:
    return ".".join(version.lstrip("v").split(".")[:2])


FACTS = (
    Fact("the default autoscaler release (an empty release)", DEFAULT_AUTOSCALER.release,
         "agent/model/autoscaler_settings.py AutoscalerSettings.release", (
             Statement("docs/configuration.md", r"`NRA_AUTOSCALER_RELEASE` \| (1\.\d+|neon) \|"),
             Statement("docs/deployment.md", r"empty \(the agent's default, (1\.\d+|neon)\)"),
             Statement("charts/node-requests-agent/values.yaml", r"Empty: the agent's default, (1\.\d+|neon) \("),
             Statement("charts/node-requests-agent/templates/NOTES.txt",
                       r"follows upstream cluster-autoscaler (1\.\d+|neon) \(the agent's default\)"),
             Statement("daemonset/daemonset.yaml", r"empty: the autoscaler's defaults and release (1\.\d+|neon)\."),
             Statement("README.md", r"its default flags and release (1\.\d+|neon) here"),
             Statement("README.md", r"`neon` \(neon's patched 1\.31\.1\); empty: (1\.\d+|neon) \|"),
         )),
    Fact("the autoscaler releases the agent takes", f"{RELEASES[0]} {RELEASES[-2]} neon",
         "agent/model/autoscaler_settings.py RELEASES", (
             Statement("docs/configuration.md", r"\(`(1\.\d+)` to `(1\.\d+)`: before 1\.33.*?`(neon)`: neon's"),
             Statement("docs/autoscaler.md", r"The \*\*release\*\* is `(1\.\d+)` to `(1\.\d+)`, or `(neon)`"),
             Statement("docs/deployment.md", r"\(`(1\.\d+)` to `(1\.\d+)`, `(neon)`\)"),
             Statement("daemonset/daemonset.yaml", r'\("(1\.\d+)" \.\.\. "(1\.\d+)", or "(neon)"\)'),
             Statement("charts/node-requests-agent/templates/NOTES.txt",
                       r'"(neon)" where .*? else "1\.<minor>" of (1\.\d+) to (1\.\d+)'),
             Statement("docs/troubleshooting.md", r"supported: (1\.\d+) to (1\.\d+) and '(neon)'"),
             Statement("README.md", r"\| (1\.\d+) to (1\.\d+), and `(neon)`"),
         ), stated=lambda groups: " ".join(sorted(groups, key=_release_order))),
    Fact("the Kubernetes releases with request rules",
         ", ".join(f"{major}.{minor}" for major, minor in sorted(KUBERNETES_RELEASES)),
         "agent/model/rules.py RELEASES", (
             Statement("README.md", r"a cluster running Kubernetes (1\.\d+), (1\.\d+) or (1\.\d+)"),
             Statement("docs/deployment.md", r"a cluster running Kubernetes (1\.\d+), (1\.\d+) or (1\.\d+)"),
             Statement("README.md", r"whose request rules to use \(`(1\.\d+)`, `(1\.\d+)`, `(1\.\d+)`\)"),
             Statement("docs/configuration.md", r"whose request rules to use \(`(1\.\d+)`, `(1\.\d+)`, `(1\.\d+)`;"),
             Statement("docs/requests.md",
                       r"the Kubernetes release the cluster runs \((1\.\d+), (1\.\d+) or (1\.\d+)\)"),
             Statement("README.md", r"\| Kubernetes \| (1\.\d+), (1\.\d+), (1\.\d+) \("),
         ), stated=", ".join),
    Fact("the oldest Kubernetes release (the chart's kubeVersion)", f"{OLDEST.major}.{OLDEST.minor}",
         "agent/model/rules.py OLDEST", (
             Statement("charts/node-requests-agent/Chart.yaml", r'kubeVersion: ">=(1\.\d+)\.0-0"'),
             Statement("README.md", r"the chart's `kubeVersion` is `>=(1\.\d+)\.0-0`"),
             Statement("docs/troubleshooting.md", r"requires kubeVersion: >=(1\.\d+)\.0-0"),
             Statement("docs/troubleshooting.md", r"the agent's rules start at (1\.\d+)"),
         )),
    Fact("the agent's RBAC", _rbac(), "daemonset/rbac.yaml ClusterRole", (
        Statement("README.md", r"The agent's RBAC is ([^;]+);"),
        Statement("docs/deployment.md", r"RBAC is exactly ([^(]+)\("),
        Statement("docs/testing.md", r"adds exactly ([^(]+)\(no `get`"),
    ), stated=lambda groups: _rbac_words(groups[0])),
    Fact("the agent's memory limit", _mebibytes(_CONTAINER["resources"]["limits"]["memory"]),
         "daemonset/daemonset.yaml resources", (
             Statement("docs/deployment.md", r"with a (\d+ MiB) limit"),
             Statement("docs/operations.md", r"memory limit \((\d+ MiB), in daemonset"),
             Statement("docs/metrics.md", r"a (\d+ MiB) memory limit"),
             Statement("docs/benchmarks.md", r"The DaemonSet's memory limit is\s+(\d+ MiB) \("),
             Statement("docs/benchmarks.md", r"% of the (\d+ MiB) limit"),
             Statement("README.md", r"\| memory \| request \d+ MiB, limit (\d+ MiB) \|"),
         )),
    Fact("the agent's memory request", _mebibytes(_CONTAINER["resources"]["requests"]["memory"]),
         "daemonset/daemonset.yaml resources", (
             Statement("docs/deployment.md", r"requests \S+ CPU / (\d+ MiB) with"),
             Statement("docs/benchmarks.md", r"request (\d+ MiB)\)"),
             Statement("README.md", r"\| memory \| request (\d+ MiB), limit"),
         )),
    Fact("the agent's CPU request", _CONTAINER["resources"]["requests"]["cpu"], "daemonset/daemonset.yaml resources", (
        Statement("docs/deployment.md", r"requests (\S+) CPU / "),
        Statement("README.md", r"\| CPU \| request (\S+), no limit \|"),
    )),
    Fact("the most PDBs an agent keeps", str(SETTINGS["max_pdbs"].default), "agent/config.py SETTINGS max_pdbs", (
        Statement("docs/configuration.md", r"`NRA_MAX_PDBS` \| (\S+) \|"),
        Statement("docs/deployment.md", r"null \(the agent's ([\d,]+)\)"),
        Statement("charts/node-requests-agent/values.yaml", r"null: the agent's ([\d,]+)\."),
        Statement("docs/operations.md", r"\(`NRA_MAX_PDBS`, ([\d,]+)\)"),
        Statement("docs/benchmarks.md", r"the default maximum, ([\d,]+) PDBs"),
    )),
    Fact("the default export interval (s)", f"{SETTINGS['export_interval'].default:g}",
         "agent/config.py SETTINGS export_interval", (
             Statement("README.md", r"`OTEL_METRIC_EXPORT_INTERVAL` \(ms\) \| (\d+) s \|"),
             Statement("docs/configuration.md", r"`OTEL_METRIC_EXPORT_INTERVAL` \(ms\) \| (\d+) s \|"),
         )),
    Fact("the debug port", str(SETTINGS["debug_address"].default.port), "agent/config.py SETTINGS debug_address", (
        Statement("README.md", r"`DEBUG_ADDRESS` \| `:(\d+)`"),
        Statement("docs/configuration.md", r"`DEBUG_ADDRESS` \| `:(\d+)`"),
        Statement("charts/node-requests-agent/values.yaml", r"\ndebug:\n(?:  [^\n]*\n)*?  port: (\d+)"),
        Statement("docs/deployment.md", r"`true`, `(\d+)` \| `DEBUG_ADDRESS`"),
        Statement("docs/deployment.md", r"declared `debug` port (\d+)"),
    )),
    Fact("the Collector's pod budget per node", re.search(r"DefaultMaxPodsPerNode = (\d+)", _PROCESSOR)[1],
         "otel-config/nodeidentityprocessor/processor.go DefaultMaxPodsPerNode", (
             Statement("otel-config/collector.yaml", r"NODEIDENTITY_MAX_PODS_PER_NODE:-(\d+)\}"),
             Statement("docs/deployment.md", r"within `pod_window` \(default (\d+) in"),
             Statement("docs/deployment.md", r"at most 2 x (\d+) pod series"),
             Statement("docs/deployment.md", r"nodes x (\d+) uids"),
         )),
    Fact("the Collector's series budget per node", re.search(r"DefaultMaxSeriesPerNode = (\d+)", _PROCESSOR)[1],
         "otel-config/nodeidentityprocessor/processor.go DefaultMaxSeriesPerNode", (
             Statement("otel-config/collector.yaml", r"NODEIDENTITY_MAX_SERIES_PER_NODE:-(\d+)\}"),
             Statement("docs/deployment.md", r"within `pod_window` \(default ([\d,]+): [\d.]+ times"),
             Statement("docs/deployment.md", r"and 2 x ([\d,]+) series in all per minute"),
             Statement("docs/deployment.md", r"nodes x ([\d,]+) series, as keys"),
         )),
    Fact("the Collector distribution's release", _major_minor(_BUILDER["dist"]["version"]),
         "otel-config/builder-config.yaml dist.version", (
             Statement("README.md", r"repository's Collector (\d+\.\d+) distribution"),
             Statement("README.md", r"this repository's (\d+\.\d+) distribution"),
         )),
    Fact("the Prometheus the suite runs", _major_minor(GO_TOOLS["prometheus"].reports),
         "components/gotools.py prometheus", (
             Statement("README.md", r"\| Prometheus (\d+\.\d+), VictoriaMetrics"),
             Statement("docs/testing.md", r"\*\*Prometheus (\d+\.\d+)\*\*"),
         )),
    Fact("the helm the suite runs", GO_TOOLS["helm"].version.lstrip("v"), "components/gotools.py helm", (
        Statement("README.md", r"\| helm (\d+\.\d+\.\d+) \|"),
    )),
    Fact("the agent's version", tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"],
         "pyproject.toml project.version", (
             Statement("charts/node-requests-agent/Chart.yaml", r'appVersion: "([^"]+)"'),
             Statement("README.md", r"docker build -t node-requests-agent:(\S+) \."),
         )),
)


class Refuted(NamedTuple):
    """A claim the code or the suite contradicts, in any document."""

    name: str
    pattern: str
    why: str


REFUTED = (
    Refuted("an empty autoscaler release is the newest", r"(?i)empty[^.|]{0,40}?\bnewest\s+release",
            f"an empty release is {DEFAULT_AUTOSCALER.release} (agent/model/autoscaler_settings.py)"),
    *([Refuted("a registry pull is not tested", r"(?is)\bnot\s+(?:run|executed)\b[^.]*?\ban\s+image\s+registry\b",
               "tests/node/test_node_registry.py pulls the agent from a registry")]
      if (REPO / "tests/node/test_node_registry.py").exists() else []),
)


def documents(root: Path) -> Iterator[Path]:
    """Every file a statement or a refuted claim is looked for in."""
    named = {statement.doc for fact in FACTS for statement in fact.statements}
    yield from sorted({root / doc for doc in named} | {root / "README.md", *(root / "docs").glob("*.md")})


def contradictions(root: Path) -> list[str]:
    """``doc:line: what`` for each statement under ``root`` that disagrees with the truth or is not found, each
    refuted claim made, and a values schema that takes another autoscaler release than the agent."""
    found = []
    for fact in FACTS:
        for statement in fact.statements:
            path = root / statement.doc
            text = path.read_text(encoding="utf-8") if path.exists() else ""
            matches = list(re.finditer(statement.pattern, text, re.S))
            if not matches:
                found.append(f"{statement.doc}: {fact.name}: no statement matches {statement.pattern!r}")
            for match in matches:
                stated = fact.stated(match.groups())
                if stated != fact.truth:
                    line = text.count("\n", 0, match.start()) + 1
                    found.append(f"{statement.doc}:{line}: {fact.name}: says {stated!r}, {fact.source} says "
                                 f"{fact.truth!r}")
    for path in filter(Path.exists, documents(root)):
        text = path.read_text(encoding="utf-8")
        for claim in REFUTED:
            for match in re.finditer(claim.pattern, text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(root)}:{line}: {claim.name}, but {claim.why}")
    schema = json.loads((root / "charts/node-requests-agent/values.schema.json").read_text())
    allowed = schema["properties"]["autoscaler"]["properties"]["release"].get("enum")
    if allowed != ["", *RELEASES]:
        found.append(f"charts/node-requests-agent/values.schema.json: autoscaler.release takes {allowed}, the agent "
                     f"{['', *RELEASES]}")
    return found


def test_the_documents_give_one_answer_per_question():
    assert contradictions(REPO) == []


def copy_documents(root: Path) -> None:
    for path in [*documents(REPO), REPO / "charts/node-requests-agent/values.schema.json"]:
        target = root / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


#: (document, text in it, the text put in its place, words the checker's answer must hold)
BREAKS = [
    pytest.param("docs/deployment.md", "empty (the agent's default, 1.36)",
                 "empty (the newest release the agent knows)",
                 ["docs/deployment.md", "the default autoscaler release", "no statement matches",
                  "an empty autoscaler release is the newest"], id="an empty release said to be the newest"),
    pytest.param("daemonset/daemonset.yaml", '("1.28" ... "1.38", or "neon")', '("1.31" ... "1.36", or "neon")',
                 ["daemonset/daemonset.yaml:", "says '1.31 1.36 neon'"], id="supported releases narrowed"),
    pytest.param("README.md", "`list/watch` on pods, nodes and poddisruptionbudgets;",
                 "`list/watch` on pods and nodes;",
                 ["README.md:", "the agent's RBAC", "says 'list nodes pods watch'"], id="RBAC without the PDBs"),
    pytest.param("docs/operations.md", "(`NRA_MAX_PDBS`, 10,000)", "(`NRA_MAX_PDBS`, 5,000)",
                 ["docs/operations.md:", "the most PDBs an agent keeps", "says '5000'"], id="max PDBs"),
    pytest.param("docs/metrics.md", "a 160 MiB memory limit", "a 200 MiB memory limit",
                 ["docs/metrics.md:", "the agent's memory limit", "says '200 MiB'"], id="memory limit"),
    pytest.param("docs/testing.md", "(buildah builds the same Dockerfile on a Debian base), a registry with TLS",
                 "(buildah builds the same Dockerfile on a Debian base), an image registry, a registry with TLS",
                 ["docs/testing.md:", "a registry pull is not tested"], id="registry pull said not run"),
    pytest.param("charts/node-requests-agent/values.schema.json", '"1.38", "neon"]', '"1.38", "1.40", "neon"]',
                 ["values.schema.json", "1.40"], id="schema takes a release the agent refuses"),
]


@pytest.mark.parametrize("doc,old,new,named", BREAKS)
def test_a_broken_copy_is_named_where_it_disagrees(tmp_path: Path, doc: str, old: str, new: str, named: list[str]):
    """The checker on a copy of the documents: clean as copied, then with one statement changed it names the
    document, the line and the fact."""
    copy_documents(tmp_path)
    assert contradictions(tmp_path) == []
    text = (tmp_path / doc).read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    (tmp_path / doc).write_text(text.replace(old, new), encoding="utf-8")
    said = "\n".join(contradictions(tmp_path))
    assert said and all(word in said for word in named), said


def test_the_license_file_is_the_license_pyproject_names():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    head = " ".join((REPO / "LICENSE").read_text(encoding="utf-8").split()[:4])
    assert project["license"] == {"text": "Apache-2.0"} and head == "Apache License Version 2.0,"
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "[Keep a Changelog]" in changelog and "\n## [Unreleased]\n" in changelog
