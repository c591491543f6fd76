"""A release as users receive it, the upgrade to it and its removal (issue 39, items 3 and 4), on the real node.

`python -m pytest -m node tests/node/test_node_release.py`. The node of node_cluster.py runs the shipped Collector
and Prometheus 3 (testkit/node_rollout.py) and a registry (``crane registry serve``, testkit/registry.py) on the
node's address. Then:

* ``python -m release`` (release/) cuts two releases into the registry: this tree at its own version, and "the
  previous release", the tree main was at when issue 39 started (PREVIOUS_COMMIT, taken with ``git archive`` from
  this repository's history into a tmp folder; nothing is committed) at PREVIOUS_VERSION, its agent image and chart
  only (the Collector is not part of the upgrade under test). Its image is built before the node's network
  namespace is entered, as the node's own images are: the build's pip reads the machine's index.
* ``helm install oci://REGISTRY/charts/node-requests-agent --version X`` with the chart's defaults (what the shipped
  rollout needs: the Collector's Service and CA Secret are where the defaults say); the chart and the image come
  from the registry (its request log) and the kubelet pulled the image (its events).
* the upgrade, with Helm (``helm upgrade`` from the registry) and with kustomize (``kubectl apply -k`` of the previous
  tree's daemonset/, then of this one's, each with its image renamed into the registry): the largest gap between
  consecutive samples of the node's series in Prometheus across the rollout, against one export interval plus the
  rollout's own budget (``gap_budget``), and the count of (node, pod) pairs with two series at one instant.
* ``helm uninstall`` and ``kubectl delete -k``: every object the manifests made is gone, cluster-scoped ones
  included, and so are the pods, the DaemonSet's revisions and Helm's own release records.

The figures (gap per node, duplicates, the cost of building the previous release) are printed; docs/testing.md
keeps the measured ones.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from components.image import COLLECTOR_IMAGE
from release.publish import staged
from release.version import source_version
from testkit.helm import Helm, built_helm
from testkit.new_node import trust_registry
from testkit.node_cluster import NODE_IP, Node, running_node
from testkit.node_rollout import (
    AGENT_NS,
    AGENT_SELECTOR,
    SHIPPED_DAEMONSET,
    roll_out_collector,
    shipped_export_interval,
)
from testkit.registry import Registry
from testkit.repo import REPO
from testkit.waiting import wait_until

pytestmark = pytest.mark.node

#: main when issue 39 started: the previous release until a release exists.
PREVIOUS_COMMIT = "291f010"
#: The version that tree is released at here (its own files say 0.1.0, the version this tree releases).
PREVIOUS_VERSION = "0.0.1"
VERSION = source_version(REPO)
CHART, RELEASE = "node-requests-agent", "node-requests-agent"
#: The registry path the releases go under (a path exercises REGISTRY/PATH, as an operator's registry has).
PATH = "nra"
SERIES = "pod_or_vm_cpu_requests"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def previous_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PREVIOUS_COMMIT's tree, and its agent image built (components/image.py, cached by content) before the node
    starts: how long that took is printed (the cold figure on a first run, the warm one after). This tree's own
    release stages the very files the node's image is built from, so the release finds that image cached."""
    tree = tmp_path_factory.mktemp("previous-tree")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_COMMIT],
                             capture_output=True, timeout=120)
    if archive.returncode != 0:
        pytest.fail(f"git archive {PREVIOUS_COMMIT}: {archive.stderr.decode().strip()} (a full clone has it)",
                    pytrace=False)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    from components.image import agent_image

    started = time.monotonic()
    with staged(tree, PREVIOUS_VERSION) as stage:
        image = agent_image(root=stage)
    print(f"\nprevious release's agent image ({PREVIOUS_COMMIT} at {PREVIOUS_VERSION}): {image.archive.parent.name}, "
          f"{time.monotonic() - started:.1f} s")
    with staged(REPO, VERSION) as stage:
        assert agent_image(root=stage) == agent_image(), "this tree at its own version is not the suite's image"
    return tree


@pytest.fixture(scope="module")
def node_cluster(previous_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """The suite's node (testkit/node_cluster.py), started after the previous release's image is built."""
    with running_node(tmp_path_factory.mktemp("node")) as node:
        yield node


@pytest.fixture(scope="module")
def registry(node_cluster: Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    running = Registry(NODE_IP, tmp_path_factory.mktemp("registry")).start()
    try:
        trust_registry(node_cluster, running)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def collector(node_cluster: Node, prometheus, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """Both Namespaces, the TLS Secrets and the Collector as the shipped rollout has them; no agent yet."""
    return roll_out_collector(node_cluster, prometheus, tmp_path_factory.mktemp)[0]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return built_helm(tmp_path_factory.mktemp("helm-home"))


@dataclass(frozen=True)
class Cut:
    """One run of ``python -m release``: its notes, the registry requests it made, how long it took."""

    version: str
    notes: str
    requests: list[tuple[str, str]]
    seconds: float


def cut(registry: Registry, helm: Helm, out: Path, version: str, *args: str) -> Cut:
    """``python -m release`` into the registry, as an operator runs it (helm with the test's own folders)."""
    before = len(registry.requests())
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "release", "--registry", f"{registry.address}/{PATH}",
                             "--version", version, "--plain-http", "--out", str(out), *args], cwd=REPO, env=helm.env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return Cut(version, (out / "notes.md").read_text(), registry.requests()[before:], time.monotonic() - started)


@pytest.fixture(scope="module")
def releases(previous_tree: Path, registry: Registry, collector: list[dict], helm: Helm,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Cut]:
    previous = cut(registry, helm, tmp_path_factory.mktemp("previous-out"), PREVIOUS_VERSION,
                   "--source", str(previous_tree), "--parts", "agent,chart")
    current = cut(registry, helm, tmp_path_factory.mktemp("current-out"), VERSION)
    print(f"\nrelease cuts: previous {previous.seconds:.1f} s, current {current.seconds:.1f} s")
    return {"previous": previous, "current": current}


# --------------------------------------------------------------------------- helpers


def manifest(registry: Registry, repository: str, reference: str) -> tuple[str, dict]:
    """The digest and content of the manifest ``repository:reference`` in the registry."""
    accept = ("application/vnd.oci.image.manifest.v1+json, "
              "application/vnd.docker.distribution.manifest.v2+json")
    request = urllib.request.Request(f"http://{registry.address}/v2/{repository}/manifests/{reference}",
                                     headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return f"sha256:{hashlib.sha256(body).hexdigest()}", json.loads(body)


def blobs(content: dict) -> list[str]:
    return [content["config"]["digest"], *(layer["digest"] for layer in content["layers"])]


def chart_ref(registry: Registry) -> str:
    return f"oci://{registry.address}/{PATH}/charts/{CHART}"


def helm_run(helm: Helm, node: Node, *args: str) -> str:
    result = helm(*args, "--namespace", AGENT_NS, kubeconfig=node.cluster.admin_kubeconfig, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def agent_pod(node: Node, image: str, timeout: float = 180) -> dict:
    """The one agent pod, Ready, running ``image`` (the old one gone)."""
    def ready() -> dict | None:
        pods = [p for p in node.pods(AGENT_NS, AGENT_SELECTOR) if not p["metadata"].get("deletionTimestamp")]
        good = [p for p in pods if p["spec"]["containers"][0]["image"] == image and any(
            c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", []))]
        return good[0] if len(pods) == len(good) == 1 else None
    try:
        return wait_until(ready, timeout, interval=0.5, message=f"the agent's pod Ready with {image}")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{node.describe(AGENT_NS, AGENT_SELECTOR)}") from None


def started_at(pod: dict) -> float:
    """When the agent's container started (unix seconds)."""
    from datetime import datetime

    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "agent")
    return datetime.fromisoformat(status["state"]["running"]["startedAt"].replace("Z", "+00:00")).timestamp()


def samples(prometheus, selector: str, since: float, at: float) -> dict[tuple, list[float]]:
    """Sample times per series of ``selector`` between ``since`` and ``at``."""
    rows = prometheus.api("query", {"query": f"{selector}[{int(at - since) + 1}s]", "time": f"{at:.3f}"})["result"]
    return {tuple(sorted(r["metric"].items())): [float(t) for t, _ in r["values"]] for r in rows}


def exported_by(prometheus, node: Node, pod: dict, interval: float) -> None:
    """Until ``pod``'s agent has exported twice (two samples of the node's series after it started)."""
    since = started_at(pod)
    selector = f'{SERIES}{{k8s_node_name="{node.name}"}}'

    def twice() -> bool:
        times = {t for ts in samples(prometheus, selector, since, time.time()).values() for t in ts if t >= since}
        return len(times) >= 2
    wait_until(twice, 4 * interval + 30, interval=1, message=f"two exports of {pod['metadata']['name']}")


def gap_budget(interval: float) -> tuple[float, str]:
    """The longest a node's series may go without a sample across a rollout, and why, from the DaemonSet.

    maxUnavailable (10 %, at least one pod) and no maxSurge: on each node the controller deletes the old pod, and
    creates the new one once the old is gone. The old agent exports a last time on SIGTERM and has
    terminationGracePeriodSeconds to be gone; the new one exports as soon as it has read its pods and Node, the
    same condition its readiness probe reports, which the kubelet first asks at start and then every periodSeconds;
    the liveness probe's initialDelaySeconds is the start the manifest grants before anyone checks it. A sample due
    in between adds at most one export interval."""
    spec = SHIPPED_DAEMONSET["spec"]
    container = spec["template"]["spec"]["containers"][0]
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    readiness = container["readinessProbe"]["periodSeconds"]
    start = container["livenessProbe"]["initialDelaySeconds"]
    assert spec.get("minReadySeconds", 0) == 0 and "maxSurge" not in spec["updateStrategy"]["rollingUpdate"]
    said = (f"export interval {interval:g} s + terminationGracePeriodSeconds {grace} s + readiness periodSeconds "
            f"{readiness} s + liveness initialDelaySeconds {start} s")
    return interval + grace + readiness + start, said


@dataclass(frozen=True)
class Rollout:
    """What one upgrade did to the node's series: the largest gap and the (node, pod) pairs seen twice at once."""

    gap: float
    duplicates: list[dict]
    pod_seconds: float  # from the upgrade's command to the new pod Ready


def across(node: Node, prometheus, interval: float, old: dict, upgrade, new_image: str) -> Rollout:
    """Run ``upgrade()`` and follow the node's series through it, from the ``old`` agent's start (or three intervals
    before, if later) to two exports of the new one."""
    begun = time.time()
    since = max(started_at(old), begun - 3 * interval)
    upgrade()
    pod = agent_pod(node, new_image)
    ready = time.time() - begun
    exported_by(prometheus, node, pod, interval)
    end = time.time() + 1
    window = end - since
    # The node's series of pods that live through the rollout (the agents' own pods change names).
    series = samples(prometheus, f'{SERIES}{{k8s_node_name="{node.name}", k8s_namespace_name!="{AGENT_NS}"}}',
                     end - window, end)
    assert series, "no series of the node's other pods"
    gap = max(b - a for times in series.values() for a, b in itertools.pairwise(times))
    counted = prometheus.api("query", {
        "query": f"max_over_time((count by (k8s_node_name, k8s_namespace_name, k8s_pod_name) ({SERIES}))"
                 f"[{int(window)}s:1s]) > 1", "time": f"{end:.3f}"})["result"]
    return Rollout(gap, [r["metric"] for r in counted], ready)


def assert_no_gap_nor_duplicate(rollout: Rollout, node: Node, interval: float, how: str) -> None:
    """No pod of the node had two series at once, and its series paused no longer than ``gap_budget``; the
    figures printed for docs/testing.md."""
    budget, why = gap_budget(interval)
    print(f"\n{how}: node {node.name} largest gap {rollout.gap:.1f} s (budget {budget:g} s: {why}); new pod Ready "
          f"{rollout.pod_seconds:.1f} s after the command; (node, pod) pairs with two series at once: "
          f"{len(rollout.duplicates)}")
    assert rollout.duplicates == []
    assert rollout.gap <= budget, (rollout.gap, why)


def objects_in(rendered: str) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of every object a rendered manifest holds."""
    return [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
            for o in yaml.safe_load_all(rendered) if o]


def assert_nothing_left(node: Node, rendered: str, workdir: Path) -> list[str]:
    """Every object of ``rendered`` gone (``kubectl get -f`` finds none), and what the controllers and Helm made
    beside them: the agent's pods, the DaemonSet's ControllerRevisions, Helm's release Secrets. Returns the kinds."""
    path = workdir / "rendered.yaml"
    path.write_text(rendered)

    def left() -> str:
        found = node.cluster.kubectl("get", "-f", str(path), "-n", AGENT_NS, "--ignore-not-found", "-o", "name")
        assert found.returncode == 0, found.stderr
        extra = node.cluster.kubectl("get", "pods,controllerrevisions,secrets", "-A", "-o", "name", "-l",
                                     "app.kubernetes.io/name=node-requests-agent")
        helm_records = node.cluster.kubectl("get", "secrets", "-A", "-o", "name", "-l", f"owner=helm,name={RELEASE}")
        return (found.stdout + extra.stdout + helm_records.stdout).strip()
    try:
        wait_until(lambda: not left(), 120, interval=1, message="every object of the release gone")
    except AssertionError:
        raise AssertionError(f"left behind:\n{left()}") from None
    return sorted({kind for kind, _, _ in objects_in(rendered)})


def kustomize_overlay(workdir: Path, daemonset: Path, registry: Registry, version: str) -> Path:
    """``daemonset`` (a tree's daemonset/) with the agent's image in the registry at ``version``, by kustomize's
    ``images:`` as an operator would."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "kustomization.yaml").write_text(json.dumps({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(daemonset, workdir)],
        "images": [{"name": CHART, "newName": f"{registry.address}/{PATH}/{CHART}", "newTag": version}]}, indent=1))
    return workdir


# --------------------------------------------------------------------------- tests


def test_the_release_pushes_its_images_and_chart_at_one_version(registry: Registry, releases: dict[str, Cut]) -> None:
    for name, parts in (("previous", (CHART,)), ("current", (CHART, "otelcol-nra"))):
        release = releases[name]
        pushed = {(m, p) for m, p in release.requests if m == "PUT"}
        for repository in (*(f"{PATH}/{p}" for p in parts), f"{PATH}/charts/{CHART}"):
            assert ("PUT", f"/v2/{repository}/manifests/{release.version}") in pushed, (name, sorted(pushed))
            digest, _ = manifest(registry, repository, release.version)
            assert f"`{digest}`" in release.notes, (repository, release.notes)
        # the chart is at the release's version, appVersion too, and names the agent's image by its digest
        _, chart = manifest(registry, f"{PATH}/charts/{CHART}", release.version)
        config = chart["config"]
        with urllib.request.urlopen(f"http://{registry.address}/v2/{PATH}/charts/{CHART}/blobs/{config['digest']}",
                                    timeout=10) as response:
            meta = json.loads(response.read())
        assert (meta["version"], meta["appVersion"]) == (release.version, release.version), meta
    # The Collector also at its distribution's tag, the one otel-config/'s Deployment names.
    distribution = COLLECTOR_IMAGE.partition(":")[2]
    assert ("PUT", f"/v2/{PATH}/otelcol-nra/manifests/{distribution}") in releases["current"].requests
    assert "CHANGELOG.md" in releases["current"].notes
    assert f"--version {VERSION}" in releases["current"].notes


def test_helm_installs_the_release_from_the_registry_and_containerd_pulls_its_image(
        node_cluster: Node, registry: Registry, releases: dict[str, Cut], helm: Helm, prometheus,
        tmp_path: Path) -> None:
    node, interval = node_cluster, shipped_export_interval()
    image_repository = f"{PATH}/{CHART}"
    digest, content = manifest(registry, image_repository, VERSION)
    image = f"{registry.address}/{image_repository}:{VERSION}@{digest}"
    before = len(registry.requests())
    installed = time.monotonic()
    helm_run(helm, node, "install", RELEASE, chart_ref(registry), "--version", VERSION, "--plain-http")
    pod = agent_pod(node, image)
    ready = time.monotonic() - installed
    exported_by(prometheus, node, pod, interval)
    requests = registry.requests()[before:]
    fetched = {path for method, path in requests if method == "GET"}
    # helm pulled the chart: its manifest by the version's tag, then its blobs
    chart_digest, chart = manifest(registry, f"{PATH}/charts/{CHART}", VERSION)
    assert any(p in fetched for p in (f"/v2/{PATH}/charts/{CHART}/manifests/{VERSION}",
                                      f"/v2/{PATH}/charts/{CHART}/manifests/{chart_digest}")), requests
    assert {f"/v2/{PATH}/charts/{CHART}/blobs/{b}" for b in blobs(chart)} <= fetched, requests
    # containerd pulled the image by the digest the chart names: the manifest, then only the blobs it lacked (none
    # here: the node's preloaded copy of this very build has them; the previous release's pull fetches its own)
    assert f"/v2/{image_repository}/manifests/{digest}" in fetched, requests
    pulled = [b for b in blobs(content) if f"/v2/{image_repository}/blobs/{b}" in fetched]
    # ...as the kubelet says
    name = pod["metadata"]["name"]
    said = [(e["reason"], e.get("message", "")) for e in node.cluster.events_of(AGENT_NS, name)]
    assert any(r == "Pulling" and f'"{image}"' in m for r, m in said), said
    assert any(r == "Pulled" and f'Successfully pulled image "{image}"' in m for r, m in said), said
    assert not any("already present" in m for _, m in said), said
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "agent")
    assert status["imageID"].endswith(digest), status
    print(f"\nhelm install from the registry to the agent Ready: {ready:.1f} s; blobs fetched {len(pulled)} of "
          f"{len(blobs(content))}; {[m for r, m in said if r == 'Pulled']}")
    rendered = helm_run(helm, node, "get", "manifest", RELEASE)
    helm_run(helm, node, "uninstall", RELEASE)
    assert_nothing_left(node, rendered, tmp_path)


def test_helm_upgrade_from_the_previous_release_keeps_each_series_and_uninstall_leaves_nothing(
        node_cluster: Node, registry: Registry, releases: dict[str, Cut], helm: Helm, prometheus,
        tmp_path: Path) -> None:
    node, interval = node_cluster, shipped_export_interval()
    old_digest, old_content = manifest(registry, f"{PATH}/{CHART}", PREVIOUS_VERSION)
    new_digest, new_content = manifest(registry, f"{PATH}/{CHART}", VERSION)
    before = len(registry.requests())
    helm_run(helm, node, "install", RELEASE, chart_ref(registry), "--version", PREVIOUS_VERSION, "--plain-http")
    old = agent_pod(node, f"{registry.address}/{PATH}/{CHART}:{PREVIOUS_VERSION}@{old_digest}")
    # The previous release's image is new to the node: containerd fetched every blob it does not share with this
    # release's image (which the node has), from the registry.
    fetched = {path for method, path in registry.requests()[before:] if method == "GET"}
    own = set(blobs(old_content)) - set(blobs(new_content))
    assert own and {f"/v2/{PATH}/{CHART}/blobs/{b}" for b in own} <= fetched, (own, sorted(fetched))
    exported_by(prometheus, node, old, interval)
    rollout = across(node, prometheus, interval, old, lambda: helm_run(
        helm, node, "upgrade", RELEASE, chart_ref(registry), "--version", VERSION, "--plain-http"),
        f"{registry.address}/{PATH}/{CHART}:{VERSION}@{new_digest}")
    assert_no_gap_nor_duplicate(rollout, node, interval, f"helm upgrade {PREVIOUS_VERSION} -> {VERSION}")
    rendered = helm_run(helm, node, "get", "manifest", RELEASE)
    helm_run(helm, node, "uninstall", RELEASE)
    kinds = assert_nothing_left(node, rendered, tmp_path)
    print(f"helm uninstall left nothing of: {kinds}")
    assert {"ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"} <= set(kinds), kinds


def test_kustomize_upgrade_from_the_previous_release_keeps_each_series_and_delete_leaves_nothing(
        node_cluster: Node, registry: Registry, releases: dict[str, Cut], previous_tree: Path, prometheus,
        tmp_path: Path) -> None:
    node, interval = node_cluster, shipped_export_interval()
    before = kustomize_overlay(tmp_path / "old", previous_tree / "daemonset", registry, PREVIOUS_VERSION)
    new = kustomize_overlay(tmp_path / "new", REPO / "daemonset", registry, VERSION)

    def apply(overlay: Path) -> None:
        result = node.cluster.kubectl("apply", "-k", str(overlay))
        assert result.returncode == 0, result.stderr

    apply(before)
    pod = agent_pod(node, f"{registry.address}/{PATH}/{CHART}:{PREVIOUS_VERSION}")
    exported_by(prometheus, node, pod, interval)
    rollout = across(node, prometheus, interval, pod, lambda: apply(new),
                     f"{registry.address}/{PATH}/{CHART}:{VERSION}")
    assert_no_gap_nor_duplicate(rollout, node, interval, f"kubectl apply -k {PREVIOUS_VERSION} -> {VERSION}")
    # what either release made (an object the new one dropped would outlive `kubectl apply -k`, which prunes nothing)
    rendered = [node.cluster.kubectl("kustomize", str(overlay)) for overlay in (before, new)]
    assert all(r.returncode == 0 for r in rendered), [r.stderr for r in rendered]
    deleted = node.cluster.kubectl("delete", "-k", str(new), timeout=180)
    assert deleted.returncode == 0, deleted.stderr
    kinds = assert_nothing_left(node, "\n---\n".join(r.stdout for r in rendered), tmp_path)
    print(f"kubectl delete -k left nothing of: {kinds}")
    assert {"Namespace", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"} <= set(kinds), kinds
