"""daemonset/autoscaler-release-policy.yaml, the kustomize path's refusal of a release the agent does not know: its
list is the agent's (agent/model/autoscaler_settings.py RELEASES, and "" for the default) and the chart's schema's,
and its binding selects the DaemonSet the kustomization ships. The real API server runs it in
tests/cluster/test_cluster_release_policy.py."""

from __future__ import annotations

import json

import yaml

from agent.model.autoscaler_settings import RELEASES
from testkit.manifests import render
from testkit.repo import REPO

POLICY = REPO / "daemonset" / "autoscaler-release-policy.yaml"
SCHEMA = REPO / "charts" / "node-requests-agent" / "values.schema.json"


def policy_objects() -> dict[str, dict]:
    return {d["kind"]: d for d in yaml.safe_load_all(POLICY.read_text()) if d}


def policy_releases(policy: dict) -> list[str]:
    """The policy's ``releases`` variable: a CEL list of string literals, written as JSON reads it."""
    (variable,) = [v for v in policy["spec"]["variables"] if v["name"] == "releases"]
    return json.loads(variable["expression"])


def test_the_policy_takes_exactly_the_releases_the_agent_and_the_chart_take():
    releases = policy_releases(policy_objects()["ValidatingAdmissionPolicy"])
    schema = json.loads(SCHEMA.read_text())["properties"]["autoscaler"]["properties"]["release"]["enum"]
    assert releases == ["", *RELEASES] == schema


def test_a_broken_copy_of_the_list_is_seen(tmp_path):
    """The comparison above reads the list it claims to: a release dropped from a copy of the policy differs."""
    broken = POLICY.read_text().replace('"1.38", ', "")
    (policy,) = [d for d in yaml.safe_load_all(broken) if d and d["kind"] == "ValidatingAdmissionPolicy"]
    assert policy_releases(policy) != ["", *RELEASES]


def test_the_binding_denies_and_selects_the_shipped_daemonset_and_the_kustomization_ships_both():
    objects = policy_objects()
    policy, binding = objects["ValidatingAdmissionPolicy"], objects["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    rendered = render(REPO / "daemonset")
    (daemonset,) = [o for o in rendered if o["kind"] == "DaemonSet"]
    selector = binding["spec"]["matchResources"]["objectSelector"]["matchLabels"]
    assert selector.items() <= daemonset["metadata"]["labels"].items()
    kinds = {o["kind"] for o in rendered}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["apps"], ["daemonsets"])
