"""Choosing the request rules from a Kubernetes version, and reading versions as users and API servers write them."""

from __future__ import annotations

import pytest

from agent.decode.reader import POD
from agent.model.rules import (NEWEST, OLDEST, RULES_1_36, RULES_1_37, VersionError, parse_version,
                               parse_version_info, rules_for)
from testkit.factory import container, pod


@pytest.mark.parametrize("text,major,minor", [
    ("1.37", 1, 37), ("1.37.2", 1, 37), ("v1.37.2", 1, 37), ("v1.37.2-gke.1", 1, 37), ("v1.36.3+k3s1", 1, 36),
    ("v1.38.0-alpha.1", 1, 38), ("1.35", 1, 35), (" 1.37 ", 1, 37), ("v1.37.2-eks-0a1b2c3", 1, 37),
])
def test_versions_as_written(text, major, minor):
    v = parse_version(text)
    assert (v.major, v.minor, v.text) == (major, minor, text.strip())


@pytest.mark.parametrize("text", ["", "1", "37", "1.x", "v1", "latest", "1.37.2 and more", "1..37", "one.two", "v1.37.2\n3"])
def test_unparsable_versions_are_a_clear_error(text):
    with pytest.raises(VersionError, match="not a Kubernetes version"):
        parse_version(text)


@pytest.mark.parametrize("info,minor", [
    ({"major": "1", "minor": "37", "gitVersion": "v1.37.2"}, 37),
    ({"major": "1", "minor": "37+", "gitVersion": "v1.37.2-gke.1200"}, 37),
    ({"major": "1", "minor": "36+"}, 36),  # some distributions leave gitVersion empty
    ({"major": "1", "minor": "36", "gitVersion": ""}, 36),
])
def test_the_api_servers_version_info(info, minor):
    assert parse_version_info(info).minor == minor


@pytest.mark.parametrize("info", [[], "v1.37.2", {}, {"gitVersion": 137}, {"gitVersion": "next"}])
def test_a_broken_version_info_is_a_version_error(info):
    with pytest.raises(VersionError):
        parse_version_info(info)


def test_each_supported_release_has_its_own_rules():
    assert rules_for(parse_version("v1.36.3")) == (RULES_1_36, None)
    assert rules_for(parse_version("1.37")) == (RULES_1_37, None)
    assert (OLDEST, NEWEST) == (RULES_1_36, RULES_1_37)


@pytest.mark.parametrize("text", ["1.38", "v1.38.0-beta.0", "v1.38.0-rc.0", "v1.38.0", "v1.38.1-gke.1", "1.38+"])
def test_1_38_computes_as_1_37_without_a_warning(text):
    """component-helpers v0.38.0-beta.0 changed PodRequests only behind alpha DRA (tests/model/test_requests.py)."""
    assert rules_for(parse_version(text)) == (RULES_1_37, None)


def test_outside_the_supported_releases_the_nearest_rules_apply_with_a_warning():
    rules, warning = rules_for(parse_version("v1.34.1"))
    assert rules is RULES_1_36 and "older than the oldest supported" in warning and "1.36" in warning
    rules, warning = rules_for(parse_version("1.39.0-alpha.1"))
    assert rules is RULES_1_37 and "newer than the newest supported release 1.38" in warning
    assert "1.39.0-alpha.1" in warning and "using the 1.37 rules" in warning
    assert rules_for(parse_version("2.0"))[0] is RULES_1_37


def test_the_pods_own_status_is_decoded_and_part_of_the_value_inputs():
    base = pod("p", containers=[container("a", "1")])
    resized = pod("p", containers=[container("a", "1")])
    resized["status"]["allocatedResources"] = {"cpu": "2", "ephemeral-storage": "1Gi"}
    resized["status"]["resources"] = {"requests": {"cpu": "2"}}
    record = POD.record(resized)
    assert record.pod_status == ("", {"cpu": "2"}, True, {"cpu": "2"})
    assert POD.record(base).pod_status is None
    assert POD.record(base).value_inputs != record.value_inputs


def test_init_container_statuses_are_kept_and_a_broken_status_is_a_problem():
    p = pod("p", init_containers=[container("i", "1")])
    p["status"]["initContainerStatuses"] = [{"name": "i", "allocatedResources": {"cpu": "3"}}]
    p["status"]["resources"] = ["not", "an", "object"]
    record = POD.record(p)
    assert [(s.name, s.allocated, s.resources) for s in record.statuses] == [("i", {"cpu": "3"}, False)]
    assert record.pod_status == ("", None, True, None)
    assert any("status.resources" in problem for problem in record.problems)
