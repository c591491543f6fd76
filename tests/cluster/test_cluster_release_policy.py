"""daemonset/autoscaler-release-policy.yaml against the real kube-apiserver (issue 39): the kustomization applied as
``kubectl apply -k`` applies it; once the policy is in force, a node-requests-agent DaemonSet whose
NRA_AUTOSCALER_RELEASE the agent does not know is refused at apply time with the policy's one line, one it knows is
admitted, and another application's DaemonSet is none of its business.

The ordering problem, shown rather than assumed: the policy and its binding take effect asynchronously (the
admission plugin's informers see them, then compile them), so the one ``apply`` that creates them may create the
DaemonSet before they are in force. The first apply here carries a bad release on purpose: either outcome is
allowed (admitted, or refused with the policy's line), which is why the agent's own fallback (the verdict off, one
line, no crash loop: tests/run/test_bad_settings.py) is required whatever the policy does.
"""

from __future__ import annotations

import time

import pytest
import yaml

from testkit.cluster import Cluster
from testkit.repo import REPO
from testkit.waiting import wait_until

pytestmark = pytest.mark.cluster

REFUSED = "is not a cluster-autoscaler release the agent knows"


def rendered(cluster: Cluster) -> list[dict]:
    """``kubectl kustomize daemonset/`` with the built kubectl: what ``kubectl apply -k daemonset/`` applies."""
    result = cluster.kubectl("kustomize", str(REPO / "daemonset"))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def with_release(objects: list[dict], release: str) -> list[dict]:
    """A copy of ``objects`` with the DaemonSet's NRA_AUTOSCALER_RELEASE set to ``release``."""
    out = yaml.safe_load(yaml.safe_dump(objects))
    for obj in out:
        if obj["kind"] == "DaemonSet":
            for env in obj["spec"]["template"]["spec"]["containers"][0]["env"]:
                if env["name"] == "NRA_AUTOSCALER_RELEASE":
                    env["value"] = release
    return out


def apply(cluster: Cluster, objects: list[dict], *flags: str):
    return cluster.kubectl("apply", *flags, "-f", "-", input=yaml.safe_dump_all(objects))


def daemonset_only(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] == "DaemonSet"]


def test_the_policy_refuses_a_release_the_agent_does_not_know_once_it_is_in_force(cluster: Cluster) -> None:
    objects = rendered(cluster)
    kinds = [o["kind"] for o in objects]
    assert kinds.index("ValidatingAdmissionPolicyBinding") < kinds.index("DaemonSet"), kinds

    # One apply, as `kubectl apply -k`, with a bad release: admitted (the policy not yet in force) or refused by it.
    started = time.monotonic()
    first = apply(cluster, with_release(objects, "1.40"))
    assert first.returncode == 0 or REFUSED in first.stderr, first.stdout + first.stderr
    stored = cluster.api("GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
                                "node-requests-agent-autoscaler-release")
    assert "namespace" not in stored["metadata"]  # kustomize writes one on it; the API server drops it
    print(f"\nfirst apply with 1.40: {'admitted, policy not yet in force' if first.returncode == 0 else 'refused'}")

    def refused() -> str | None:
        result = apply(cluster, daemonset_only(with_release(objects, "1.40")), "--dry-run=server")
        return result.stderr if result.returncode != 0 else None

    said = wait_until(refused, 60, interval=0.5, message="the policy in force: a 1.40 DaemonSet refused")
    print(f"policy in force {time.monotonic() - started:.1f} s after the first apply: {said.strip()}")
    (line,) = [line for line in said.strip().splitlines() if REFUSED in line]
    assert "NRA_AUTOSCALER_RELEASE '1.40' is not" in line and "1.28, 1.29" in line and "1.38, neon" in line, line
    assert "ValidatingAdmissionPolicy 'node-requests-agent-autoscaler-release'" in line, line
    status = cluster.api("GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/"
                                "node-requests-agent-autoscaler-release").get("status", {})
    assert not status.get("typeChecking", {}).get("expressionWarnings"), status

    for good in ("", "1.28", "1.38", "neon", " 1.31 "):
        result = apply(cluster, daemonset_only(with_release(objects, good)))
        assert result.returncode == 0, (good, result.stderr)
    for bad in ("1.27", "1.39", "latest", "Neon"):
        result = apply(cluster, daemonset_only(with_release(objects, bad)))
        assert result.returncode != 0 and f"NRA_AUTOSCALER_RELEASE '{bad}' is not" in result.stderr, (bad, result)
    stored = cluster.api("GET", "/apis/apps/v1/namespaces/node-requests-agent/daemonsets/node-requests-agent")
    (env,) = [e for e in stored["spec"]["template"]["spec"]["containers"][0]["env"]
              if e["name"] == "NRA_AUTOSCALER_RELEASE"]
    assert env["value"] == " 1.31 ", env  # the last good one; no bad one got in

    # Another application's DaemonSet that happens to set the variable is not the policy's to judge.
    other = daemonset_only(with_release(objects, "1.40"))
    for obj in other:
        obj["metadata"]["name"] = "someone-else"
        obj["metadata"]["labels"] = {"app.kubernetes.io/name": "someone-else"}
        obj["spec"]["selector"]["matchLabels"] = {"app.kubernetes.io/name": "someone-else"}
        obj["spec"]["template"]["metadata"]["labels"] = {"app.kubernetes.io/name": "someone-else"}
    result = apply(cluster, other, "--dry-run=server")
    assert result.returncode == 0, result.stderr
