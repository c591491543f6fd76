"""components.go writes every wrapper module and the build flags in one place; the texts are the ones the cached
builds were made from (a changed text is a different build, though it keeps its cache key)."""

from __future__ import annotations

from components.go import GO_VERSION, build_flags, wrapper_gomod, wrapper_module


def test_a_wrapper_module_requires_one_module_on_its_line_and_several_in_a_block(tmp_path):
    assert wrapper_gomod("tiny") == f"module nra.invalid/tiny\n\ngo {GO_VERSION}\n"
    assert wrapper_gomod("etcd", {"go.etcd.io/etcd/server/v3": "v3.6.16"}) == (
        "module nra.invalid/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v3.6.16\n")
    src = wrapper_module(tmp_path / "src", "two", {"a.example/x": "v1.0.0", "a.example/y": "v0.2.0"},
                         godebug=["godebug default=go1.26"], replace={"a.example/y": "a.example/y v0.3.0"})
    assert (src / "go.mod").read_text() == (
        "module nra.invalid/two\n\ngo 1.26.0\n\ngodebug default=go1.26\n\n"
        "require (\n\ta.example/x v1.0.0\n\ta.example/y v0.2.0\n)\n\nreplace a.example/y => a.example/y v0.3.0\n")


def test_every_build_is_trimmed_and_stripped_and_stamps_follow():
    assert build_flags() == ["-trimpath", "-ldflags=-s -w"]
    assert build_flags({"p.V": "1", "p.W": "2"}, ("a", "b")) == [
        "-trimpath", "-ldflags=-s -w -X p.V=1 -X p.W=2", "-tags", "a,b"]
