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


def test_a_version_being_built_elsewhere_is_not_removed(cache):
    cached("image", "old", _build("old"))
    os.utime(cache / "image" / "old" / ".complete", (time.time() - 100, time.time() - 100))
    with open(cache / "image" / ".old.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        cached("image", "new", _build("new"), keep=1)
    assert (cache / "image" / "old" / "payload").read_text() == "old"
    cached("image", "newer", _build("newer"), keep=1)
    assert sorted(p.name for p in (cache / "image").iterdir() if p.is_dir()) == ["newer"]
