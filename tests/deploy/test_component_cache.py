"""The component cache: a finished folder is reused, and a component keyed by the repository's own files keeps only
its newest versions (the agent image is 345 MB per change of agent/)."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from components.cache import cached


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NRA_COMPONENT_CACHE", str(tmp_path))
    return tmp_path


def _build(marker: str):
    def build(out):
        (out / "payload").write_text(marker)
    return build


def test_a_finished_folder_is_reused_without_building_again(cache):
    first = cached("thing", "v1", _build("one"))
    calls = []
    again = cached("thing", "v1", lambda out: calls.append(out))
    assert again == first and calls == [] and (again / "payload").read_text() == "one"


def test_keep_removes_the_least_recently_built_versions_and_only_those(cache):
    for i in range(4):
        cached("image", f"d{i}", _build(str(i)))
        os.utime(cache / "image" / f"d{i}" / ".complete", (time.time() - 100 + i, time.time() - 100 + i))
    newest = cached("image", "d4", _build("4"), keep=3)
    assert sorted(p.name for p in (cache / "image").iterdir() if p.is_dir()) == ["d2", "d3", "d4"]
    assert (newest / "payload").read_text() == "4"
    # an unrelated component is untouched
    other = cached("other", "x", _build("x"))
    cached("image", "d5", _build("5"), keep=3)
    assert other.exists()
    assert sorted(p.name for p in (cache / "image").iterdir() if p.is_dir()) == ["d3", "d4", "d5"]


def test_keep_within_a_family_leaves_the_other_families_alone(cache):
    """One program built per release (the autoscaler oracle): a new build of one release keeps ``keep`` of that
    release and removes nothing of another, even one whose name extends it."""
    for i, version in enumerate(["1.31.1-a", "1.31.1-b", "1.31.1-neon-a", "1.31.1-neon-b", "1.36.1-a"]):
        cached("oracle", version, _build(version))
        os.utime(cache / "oracle" / version / ".complete", (time.time() - 100 + i, time.time() - 100 + i))
    cached("oracle", "1.31.1-neon-c", _build("c"), keep=2, family="1.31.1-neon")
    assert sorted(p.name for p in (cache / "oracle").iterdir() if p.is_dir()) == [
        "1.31.1-a", "1.31.1-b", "1.31.1-neon-b", "1.31.1-neon-c", "1.36.1-a"]
    cached("oracle", "1.31.1-c", _build("c"), keep=1, family="1.31.1")
    assert sorted(p.name for p in (cache / "oracle").iterdir() if p.is_dir()) == [
        "1.31.1-c", "1.31.1-neon-b", "1.31.1-neon-c", "1.36.1-a"]


def test_a_version_being_built_elsewhere_is_not_removed(cache):
    cached("image", "old", _build("old"))
    os.utime(cache / "image" / "old" / ".complete", (time.time() - 100, time.time() - 100))
    with open(cache / "image" / ".old.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        cached("image", "new", _build("new"), keep=1)
    assert (cache / "image" / "old" / "payload").read_text() == "old"
    cached("image", "newer", _build("newer"), keep=1)
    assert sorted(p.name for p in (cache / "image").iterdir() if p.is_dir()) == ["newer"]


# Every component's folder in the cache, as the cold build of main made them: CI's cache holds these, so a changed
# name or key rebuilds it from scratch (up to half an hour). Changing one here must be a deliberate act.
PINNED_GO_TOOLS = {
    "helm": "helm/v4.3.1/bin",
    "krew": "krew/v0.4.3/bin",
    "kwok": "kwok/v0.8.0/bin",
    "registry": "registry/v0.22.1/bin",
    "prometheus": "prometheus3/v0.316.0-k8s-sd",
    "otelcol-builder": "otelcol-builder/v0.165.0",
    "etcd": "etcd/3.6.16/bin",
    "prometheus-operator": "prometheus-operator/v0.85.0/bin",
}


def _accessors(tmp_path):
    """(folder in the cache, what returns it) for every component outside the table; the Collector's distribution
    from a manifest of known content, since its key is that content's digest."""
    from components.collector import otelcol_bin
    from components.image import base_rootfs, coredns_image, tiny_image
    from components.kubernetes import etcd_bin, kubernetes_bin
    from components.node import coredns_bin, node_bin, tiny_bin

    manifest = tmp_path / "config" / "builder-config.yaml"
    (manifest.parent / "nodeidentityprocessor").mkdir(parents=True)
    manifest.write_text("dist: {}\n")
    (manifest.parent / "nodeidentityprocessor" / "go.mod").write_text("module x\n")
    return [
        ("kubernetes/1.37.2/bin", lambda: kubernetes_bin("1.37.2")),
        ("kubernetes/1.36.3/bin", lambda: kubernetes_bin("1.36.3")),
        ("etcd/3.6.16/bin", etcd_bin),
        ("kubernetes-node/1.37.2/bin", node_bin),
        ("coredns/1.15.0/bin/coredns", coredns_bin),
        ("nra-tiny/1/nra-tiny", tiny_bin),
        ("image-base/bookworm-9386509bc85d/rootfs.tar", base_rootfs),
        ("otelcol-nra/v0.165.0-8b9a70118f6c8726/otelcol-nra/otelcol-nra", lambda: otelcol_bin(manifest)),
        # the single-binary images are keyed by their binary's digest (here of b"coredns" and b"tiny")
        ("image-coredns/nra-coredns-1.15.0-8a32e516d7415be5/image.tar", lambda: coredns_image().archive),
        ("image-tiny/nra-tiny-1-8950abfda7b72763/image.tar", lambda: tiny_image().archive),
    ]


def _finished(cache, folder: str) -> None:
    """A finished cache entry with the folder that holds ``folder``'s last part."""
    name, key, *rest = folder.split("/")
    (cache / name / key).mkdir(parents=True, exist_ok=True)
    (cache / name / key / ".complete").write_text("pinned\n")
    if rest:
        (cache / name / key / "/".join(rest)).parent.mkdir(parents=True, exist_ok=True)


def test_every_component_is_found_under_its_pinned_name_and_key(cache, tmp_path, monkeypatch):
    from components.gotools import GO_TOOLS, tool_bin

    assert set(PINNED_GO_TOOLS) == set(GO_TOOLS), "a Go tool without a pinned cache folder, or a pin without its row"
    accessors = [(folder, lambda name=name: tool_bin(name)) for name, folder in PINNED_GO_TOOLS.items()]
    accessors += _accessors(tmp_path)
    for folder, _ in accessors:
        _finished(cache, folder)
    (cache / "coredns/1.15.0/bin/coredns").write_bytes(b"coredns")
    (cache / "nra-tiny/1/nra-tiny").write_bytes(b"tiny")
    # A changed name or key finds nothing and starts a build: with no go, nice or apt-get on PATH it fails at once.
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    for folder, accessor in accessors:
        assert accessor() == cache / folder, folder
