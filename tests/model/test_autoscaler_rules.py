"""Each supported cluster-autoscaler release's rules record: which drainability rules run, in which order, and the
cut-offs that move between releases. The expectations are written out by hand, release by release, so moving a
release point (at or below the threshold from 1.32, the kube-system timeout from 1.33, 1.28's local storage first)
fails here."""

from __future__ import annotations

import pytest

from agent.model.autoscaler_requests import requests_of_release
from agent.model.autoscaler_rules import RULES_BY_RELEASE, rules_of_release
from agent.model.autoscaler_settings import RELEASES, AutoscalerSettings
from agent.model.drainability import REASONS, Clock

OLD_ORDER = ("mirror", "longterminating", "replicacount", "daemonset", "safetoevict", "replicated", "system",
             "localstorage", "notsafetoevict", "pdb")
ORDER = ("mirror", "longterminating", "replicacount", "daemonset", "safetoevict", "replicated", "system",
         "notsafetoevict", "localstorage", "pdb")
# From 1.36 (read in 1.36.1's rules.go; not in 1.31.1's): oncompletion after safetoevict (terminal, between them
# upstream, never sees a pod here).
NEW_ORDER = ("mirror", "longterminating", "replicacount", "daemonset", "safetoevict", "oncompletion", "replicated",
             "system", "notsafetoevict", "localstorage", "pdb")

# release: (minor, chain order, at or below the threshold, kube-system timeout)
EXPECTED = {
    "1.28": (28, OLD_ORDER, False, False),
    "1.29": (29, ORDER, False, False),
    "1.30": (30, ORDER, False, False),
    "1.31": (31, ORDER, False, False),
    "neon": (31, ORDER, False, False),
    "1.32": (32, ORDER, True, False),
    "1.33": (33, ORDER, True, True),
    "1.34": (34, ORDER, True, True),
    "1.35": (35, ORDER, True, True),
    "1.36": (36, NEW_ORDER, True, True),
    "1.37": (37, NEW_ORDER, True, True),
    "1.38": (38, NEW_ORDER, True, True),
}


def test_every_supported_release_has_its_record():
    assert set(EXPECTED) == set(RELEASES) == set(RULES_BY_RELEASE)


@pytest.mark.parametrize("release", sorted(EXPECTED))
def test_each_release_record(release):
    minor, order, at_or_below, timeout = EXPECTED[release]
    rules = rules_of_release(release)
    assert rules.release == release and rules.minor == minor
    assert tuple(rule.name for rule in rules.drain) == order
    assert (rules.at_or_below, rules.system_pod_timeout) == (at_or_below, timeout)
    assert rules.long_terminating_extra == 30.0  # drain.PodLongTerminatingExtraThreshold
    assert rules.requests == requests_of_release(release)
    # The threshold comparison the record stands for: exactly at it counts only where at_or_below holds.
    assert rules.underutilized(0.5, 0.5) is at_or_below
    assert rules.underutilized(0.4999, 0.5) and not rules.underutilized(0.5001, 0.5)


@pytest.mark.parametrize("release", ["1.28", "1.32", "1.33", "neon"])
def test_the_system_timeout_reaches_the_rules_only_where_the_release_has_it(release):
    rules = rules_of_release(release)
    context = rules.context(AutoscalerSettings(release=release, blocking_system_pod_distruption_timeout=90.0),
                            clock=Clock(0.0), problems=[])
    assert context.system_pod_timeout == (90.0 if EXPECTED[release][3] else None)


def test_the_settings_leave_rules_out_as_rules_default_skips_them():
    rules = rules_of_release("1.36")
    assert tuple(r.name for r in rules.chain(AutoscalerSettings())) == NEW_ORDER
    off = AutoscalerSettings(skip_nodes_with_system_pods=False, skip_nodes_with_local_storage=False)
    assert tuple(r.name for r in rules.chain(off)) == tuple(n for n in NEW_ORDER if n not in ("system", "localstorage"))
    custom_off = AutoscalerSettings(skip_nodes_with_custom_controller_pods=False)
    assert tuple(r.name for r in rules.chain(custom_off)) == tuple(n for n in NEW_ORDER if n != "replicacount")


def test_each_rule_names_its_upstream_file_and_reasons():
    rules = rules_of_release("1.36").drain
    fields = set(AutoscalerSettings.__struct_fields__)
    for rule in rules:
        assert rule.upstream == f"cluster-autoscaler/simulator/drainability/rules/{rule.name}/rule.go"
        assert rule.enabled_by is None or rule.enabled_by in fields
        assert set(rule.reasons) <= set(REASONS)
    assert sorted(r for rule in rules for r in rule.reasons) == sorted(REASONS)  # each reason has one rule


def test_before_the_rules_were_split_out_each_names_drain_go():
    """1.28 checked every rule in one function of utils/drain/drain.go; 1.29 has rules/ files of their own."""
    assert {rule.upstream for rule in rules_of_release("1.28").drain} == {"cluster-autoscaler/utils/drain/drain.go"}
    assert [r.name for r in rules_of_release("1.28").drain] == [r.name for r in rules_of_release("1.29").drain][:7] \
        + ["localstorage", "notsafetoevict", "pdb"]
    assert all(rule.upstream.endswith(f"rules/{rule.name}/rule.go") for rule in rules_of_release("1.29").drain)


def test_an_unknown_release_is_a_one_line_error():
    with pytest.raises(ValueError, match="unknown cluster-autoscaler release '1.27'"):
        rules_of_release("1.27")
