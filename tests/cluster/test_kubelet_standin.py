"""The rules the kubelet stand-in applies (testkit/image.py, testkit/kubelet.py), checked against the documented
behaviour they copy."""

from __future__ import annotations

import pytest

from testkit.image import container_argv, expand
from testkit.kubelet import ImageConfig, container_env, image_config

IMAGE = (["node-requests-agent"], ["run"])


@pytest.mark.parametrize("container,argv", [
    ({}, ["node-requests-agent", "run"]),                                     # image ENTRYPOINT + CMD
    ({"args": []}, ["node-requests-agent", "run"]),                           # an empty list counts as absent
    ({"args": ["explain", "-o", "json"]}, ["node-requests-agent", "explain", "-o", "json"]),  # args replace CMD
    ({"command": ["python3", "-m", "agent"]}, ["python3", "-m", "agent"]),    # command drops ENTRYPOINT and CMD
    ({"command": ["sh"], "args": ["-c", "x"]}, ["sh", "-c", "x"]),
    ({"args": ["--node-name", "$(NODE_NAME)", "$$(NODE_NAME)"]}, ["node-requests-agent", "--node-name", "n1", "$(NODE_NAME)"]),
])
def test_command_line_follows_the_runtime_rule(container, argv):
    assert container_argv(*IMAGE, container, {"NODE_NAME": "n1"}) == argv


def test_the_old_image_and_daemonset_pair_gives_run_run():
    """The defect this stand-in guards against: ENTRYPOINT [agent, run] plus args [run]."""
    assert container_argv(["node-requests-agent", "run"], [], {"args": ["run"]}) == ["node-requests-agent", "run", "run"]


@pytest.mark.parametrize("text,expanded", [
    ("$(A)-$(B)", "1-$(B)"), ("$$(A)", "$(A)"), ("$$", "$"), ("$(A", "$(A"), ("a$", "a$"), ("$x", "$x"),
    ("$(A)$(A)", "11"),
])
def test_variable_expansion_matches_kubernetes(text, expanded):
    assert expand(text, {"A": "1"}) == expanded


def test_env_expands_against_earlier_variables_and_resolves_the_downward_api():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "a"}},
           "spec": {"nodeName": "n1"}, "status": {"hostIP": "10.0.0.1"}}
    container = {"env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                         {"name": "URL", "value": "http://$(NODE):$(KUBERNETES_SERVICE_PORT)/$(LATER)"},
                         {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                         {"name": "LATER", "value": "x"}]}
    env = container_env(container, pod, {"KUBERNETES_SERVICE_PORT": "443"})
    assert env == {"NODE": "n1", "URL": "http://n1:443/$(LATER)", "APP": "a", "LATER": "x"}
    with pytest.raises(NotImplementedError, match="secretKeyRef"):
        container_env({"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, pod, {})


def test_image_config_reads_the_final_stage(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text('ARG BASE=python:3\nFROM ${BASE} AS build\nENTRYPOINT ["builder"]\nCMD ["x"]\n'
                          "FROM ${BASE}\n# comment\nENV A=1 \\\n    B=$A-2\nENTRYPOINT agent --flag\n")
    assert image_config(dockerfile) == ImageConfig(["/bin/sh", "-c", "agent --flag"], [], {"A": "1", "B": "1-2"})
    dockerfile.write_text("FROM python:3\nCMD [\"python3\"]\n")
    with pytest.raises(ValueError, match="no ENTRYPOINT"):
        image_config(dockerfile)

