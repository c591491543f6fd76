"""``explain --node N``: "why is this node not scaled down?" on a dump and live, in text and in JSON.

One node with a pod of every kind the autoscaler's drain rules tell apart; every expected outcome is written by
hand from the rules (docs/operations.md's table), not from the code. The upstream cases themselves are the
model's tests (tests/model/); these check what the command makes of them: the schema, the flags, the PDBs of a
dump and of a live cluster, the time of asking, bad input.
"""

from __future__ import annotations

import json
import time

import pytest

from testkit.cli import run
from testkit.factory import container, node, pod

NOW = time.time()


def _stamp(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - seconds_ago))


def owned(kind: str, name: str, api: str = "apps/v1") -> list[dict]:
    return [{"apiVersion": api, "kind": kind, "name": name, "uid": f"uid-{kind}-{name}", "controller": True}]


def small(name: str, namespace: str = "default", **kw) -> dict:
    """A 100m / 128Mi pod on node-a (created 10 min ago unless said otherwise)."""
    created = kw.pop("created", _stamp(600))
    volumes = kw.pop("volumes", None)
    p = pod(name, namespace=namespace, containers=[container("c", "100m", "128Mi")], **kw)
    p["metadata"]["creationTimestamp"] = created
    if volumes:
        p["spec"]["volumes"] = volumes
    return p


def pdb(name: str, namespace: str, labels: dict[str, str], allowed: int) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "uid": f"pdb-{namespace}-{name}"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
            "status": {"disruptionsAllowed": allowed}}


RS = owned("ReplicaSet", "rs-1")
# (pod, the reason it blocks or None), by hand from the rules in their order.
PODS = [
    (small("kube-proxy-a", "kube-system", owner_references=owned("DaemonSet", "kube-proxy")), None),  # DaemonSet
    (small("coredns-1", "kube-system", owner_references=RS), "unmovable_kube_system"),  # young, no PDB
    (small("old-system", "kube-system", owner_references=RS, created=_stamp(2 * 86400)), None),  # past the 1 h timeout
    (small("metrics-server-1", "kube-system", owner_references=RS, labels={"app": "metrics"}), None),  # PDB allows 1
    (small("bare"), "not_replicated"),  # no controller
    (small("custom", owner_references=owned("Rollout", "r", "argoproj.io/v1alpha1")), "not_replicated"),
    (small("pinned", owner_references=RS, annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
     "not_safe_to_evict"),
    (small("scratch", owner_references=RS, volumes=[{"name": "s", "emptyDir": {}}]), "local_storage"),
    (small("host", owner_references=RS, volumes=[{"name": "h", "hostPath": {"path": "/var/x"}}]), "local_storage"),
    (small("ram-disk", owner_references=RS, volumes=[{"name": "r", "emptyDir": {"medium": "Memory"}}]), None),
    (small("named-safe", owner_references=RS, volumes=[{"name": "cache", "emptyDir": {}}],
           annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "cache"}), None),
    (small("guarded", owner_references=RS, labels={"app": "guarded"}), "not_enough_pdb"),  # its PDB allows 0
    (small("evictable", annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}), None),
    (small("maybe", owner_references=RS, annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "maybe"}),
     None),  # neither "true" nor "false": read as absent, and said
]
DONE = small("done", phase="Succeeded")  # terminal: not judged, not counted
PDBS = [pdb("metrics", "kube-system", {"app": "metrics"}, 1), pdb("guarded", "default", {"app": "guarded"}, 0)]
BLOCKING = {p["metadata"]["name"]: reason for p, reason in PODS if reason}
# 14 pods of 100m / 128Mi on 4 cores / 16Gi: cpu 1.4 / 4 = 0.35 decides (memory 1.75Gi / 16Gi = 0.109375).
CPU, MEMORY = 1.4 / 4, 14 * 128 / (16 * 1024)


def dump(*extra: dict, pdbs: list[dict] | None = PDBS) -> str:
    items = [node("node-a", "4", "16Gi"), node("node-b", "2", "8Gi"), *(p for p, _ in PODS), DONE,
             small("elsewhere", node="node-b"), *(pdbs or []), *extra]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def verdict(*args: str, text: str | None = None) -> dict:
    result = run("explain", "--node", "node-a", "-o", "json", *args, input=text or dump())
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["autoscaler"] == out["node"]["autoscaler"] == out["nodes"][0]["autoscaler"]
    return out["autoscaler"]


def test_every_kind_of_pod_gets_the_rules_answer_and_the_schema_is_complete():
    v = verdict()
    assert set(v) == {"node", "state", "headline", "scale_down_candidate", "removable", "utilization", "threshold",
                      "blockers", "blocking_pods", "differing", "pdbs_known", "controllers_known", "pdb_risks", "pdb_risks_more",
                      "pdb_risk", "release",
                      "problems", "cannot_see"}
    assert v["pdb_risks"] == [] and v["pdb_risk"] is None  # the one PDB allows 1 and covers the one metrics-server pod
    # Underutilized: a scale-down candidate, as the autoscaler says; blocked, so not removable.
    assert (v["node"], v["state"], v["scale_down_candidate"], v["removable"], v["threshold"]) == (
        "node-a", "underutilized", True, False, 0.5)
    assert v["headline"] == ("underutilized: cpu 35% < threshold 50%, a scale-down candidate, not removable: 7 pods "
                             "block its removal")
    assert v["utilization"] == {"cpu": pytest.approx(CPU), "memory": pytest.approx(MEMORY), "gpu": None,
                                "value": pytest.approx(CPU), "resource": "cpu"}
    assert {b["name"]: b["reason"] for b in v["blockers"]} == BLOCKING
    assert all(set(b) == {"namespace", "name", "uid", "reason", "detail"} and b["detail"] for b in v["blockers"])
    # In the drain rules' order of the reasons, then by namespace and name: as the text and the page list them.
    order = {reason: i for i, reason in enumerate(v["blocking_pods"])}
    assert [(b["namespace"], b["name"]) for b in v["blockers"]] == [
        (b["namespace"], b["name"]) for b in sorted(v["blockers"], key=lambda b: (order[b["reason"]], b["namespace"],
                                                                                 b["name"]))]
    assert v["blocking_pods"] == {"controller_not_found": 0, "min_replicas_reached": 0, "on_completion": 0,
                                  "not_replicated": 2, "unmovable_kube_system": 1, "kube_system_pdb_unknown": 0,
                                  "not_safe_to_evict": 1, "local_storage": 2, "not_enough_pdb": 1,
                                  "pdb_unknown": 0}
    assert v["pdbs_known"] is True and v["release"] == "1.36" and v["differing"] == []
    assert any("maybe" in p for p in v["problems"])
    assert any("minimum size" in s for s in v["cannot_see"])


def test_the_text_answer_has_every_blocker_and_what_the_verdict_cannot_see():
    result = run("explain", "--node", "node-a", input=dump(), env={"COLUMNS": "120"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert ("AUTOSCALER  underutilized: cpu 35% < threshold 50%, a scale-down candidate, not removable: 7 pods block "
            "its removal") in out
    assert "  UTILIZATION  cpu 35% (decides), memory 11%; threshold 50%; as cluster-autoscaler 1.36 computes it" in out
    assert ("  BLOCKING  7 pods: not_replicated 2, unmovable_kube_system 1, not_safe_to_evict 1, local_storage 2, "
            "not_enough_pdb 1") in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()
            if line.startswith("  ") and "/" in line.split()[0] and len(line.split()) > 1}
    assert {name.split("/")[1]: reason for name, reason in rows.items() if reason in BLOCKING.values()} == BLOCKING
    assert "CANNOT SEE" in out and "minimum size" in out
    assert max(len(line) for line in out.splitlines()) <= 120


def test_the_autoscalers_flags_change_the_verdict():
    busy = verdict("--scale-down-utilization-threshold=0.3")
    assert busy["state"] == "not_underutilized" and busy["threshold"] == 0.3
    relaxed = verdict("--skip-nodes-with-local-storage=false", "--skip-nodes-with-custom-controller-pods=false",
                      "--skip-nodes-with-system-pods=false")
    assert {b["name"]: b["reason"] for b in relaxed["blockers"]} == {
        "bare": "not_replicated", "pinned": "not_safe_to_evict", "guarded": "not_enough_pdb"}
    old = verdict("--autoscaler-release", "1.31")
    assert old["release"] == "1.31"
    # Before the timeout existed (1.33), a kube-system pod without a PDB blocks at any age.
    assert {b["name"] for b in old["blockers"] if b["reason"] == "unmovable_kube_system"} == {"coredns-1", "old-system"}


def test_without_pdbs_in_the_dump_kube_system_pods_are_not_silently_free():
    v = verdict(text=dump(pdbs=None))
    assert v["pdbs_known"] is False
    unknown = {b["name"] for b in v["blockers"] if b["reason"] == "kube_system_pdb_unknown"}
    assert unknown == {"coredns-1", "metrics-server-1"}  # its PDB is not in the dump
    assert "guarded" not in {b["name"] for b in v["blockers"]}  # a PDB not known blocks nothing
    text = run("explain", "--node", "node-a", input=dump(pdbs=None)).stdout
    assert "PDBS  not known" in text


def test_nodes_among_many_get_a_line_each():
    result = run("explain", input=dump())
    assert result.returncode == 0, result.stderr
    heads = [line for line in result.stdout.splitlines() if line.startswith("AUTOSCALER")]
    assert len(heads) == 2 and "CANNOT SEE" not in result.stdout
    out = json.loads(run("explain", "-o", "json", input=dump()).stdout)
    assert "autoscaler" not in out and {n["node"]: n["autoscaler"]["state"] for n in out["nodes"]} == {
        "node-a": "underutilized", "node-b": "underutilized"}


@pytest.mark.parametrize("args,words", [
    (["--node", "node-x"], ["no Node 'node-x'", "node-a, node-b"]),
    (["--output", "yaml"], ["--output", "invalid choice: 'yaml'"]),
    (["--scale-down-utilization-threshold=2"], ["scale-down-utilization-threshold"]),
    (["--autoscaler-release", "9.99"], ["9.99"]),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    result = run("explain", *args, input=dump())
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert all(w in result.stderr for w in words), result.stderr


def test_live_lists_the_pdbs_and_agrees_with_the_dump(apiserver, tmp_path):
    for item in json.loads(dump())["items"]:
        kind = {"Node": "nodes", "PodDisruptionBudget": "poddisruptionbudgets"}.get(item["kind"])
        if kind:
            apiserver.create(item, kind=kind)
        else:
            apiserver.create(item)
    kubeconfig = apiserver.kubeconfig(tmp_path / "kubeconfig")
    result = run("explain", "--live", "--node", "node-a", "--kubeconfig", kubeconfig, "-o", "json")
    assert result.returncode == 0, result.stderr
    live = json.loads(result.stdout)["autoscaler"]
    # This API server serves no ReplicationControllers (404): the controllers stay unknown, said once, as in the dump
    # (which holds none).
    *problems, unknown = live["problems"]
    assert {**live, "problems": problems} == verdict() and not live["controllers_known"]
    assert unknown.startswith("cannot list ReplicationControllers") and "controllers are unknown" in unknown
    assert apiserver.requests_to("/apis/policy/v1/poddisruptionbudgets")
    assert apiserver.requests_to("/api/v1/replicationcontrollers")


def test_a_pod_the_autoscalers_release_counts_differently_is_shown_with_both_values_and_why():
    """cluster-autoscaler before 1.33 ignores pod-level resources: 100m by its containers, 1 core for the scheduler."""
    level = pod("pod-level", containers=[container("c", "100m", "128Mi")], pod_requests={"cpu": "1", "memory": "1Gi"})
    text = json.dumps({"kind": "List", "items": [node("node-a", "4", "16Gi"), level]})
    v = verdict("--autoscaler-release", "1.31", text=text)
    (d,) = v["differing"]
    assert (d["name"], d["cpu_cores"], d["memory_bytes"], d["scheduler_cpu_cores"], d["scheduler_memory_bytes"]) == (
        "pod-level", 0.1, 128 * 2**20, 1.0, 2**30)
    assert "pod-level" in d["why"] and "1.31" in d["why"]
    assert v["utilization"]["cpu"] == pytest.approx(0.1 / 4)  # the autoscaler's number, not the scheduler's
    assert verdict(text=text)["differing"] == []  # 1.36 counts pod-level resources as the scheduler does
    out = run("explain", "--node", "node-a", "--autoscaler-release", "1.31", input=text, env={"COLUMNS": "100"}).stdout
    assert "DIFFERING  1 pod counted differently by cluster-autoscaler 1.31" in out
    lines = out.splitlines()
    answer = lines[lines.index(next(l for l in lines if l.startswith("AUTOSCALER"))):
                   lines.index(next(l for l in lines if l.startswith("POD ")))]
    assert "100m / 128Mi" in "\n".join(answer) and "pod-level" in "\n".join(answer)
    assert not any("…" in line for line in answer) and max(len(line) for line in answer) <= 100  # wrapped, not cut


def test_at_judges_the_dump_as_of_that_time():
    """A kube-system pod created 10 minutes before NOW blocks at NOW and is past the 1 h timeout two hours later."""
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW + 7200))
    assert "coredns-1" in {b["name"] for b in verdict("--at", _stamp(0))["blockers"]}
    assert "coredns-1" not in {b["name"] for b in verdict("--at", later)["blockers"]}


def test_at_that_is_not_a_time_is_one_line():
    result = run("explain", "--at", "yesterday", input=dump())
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == ("node-requests-agent explain: --at 'yesterday' is not an RFC 3339 time "
                                     "(e.g. 2026-12-05T10:00:00Z)")


# -- controllers that are gone: seen where the input holds controller objects (the autoscaler's listers) --------

def owned_by(name: str, kind: str, owner: str, api_version: str = "apps/v1") -> dict:
    return pod(name, node="node-a", containers=[container("c", "100m", "64Mi")],
               owner_references=[{"apiVersion": api_version, "kind": kind, "name": owner, "controller": True}])


def replica_set(name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 1}}


def controllers_dump() -> str:
    items = [node("node-a", "4", "16Gi"), owned_by("alive", "ReplicaSet", "web-1"),
             owned_by("orphan", "ReplicaSet", "web-0"), owned_by("job-orphan", "Job", "nightly", "batch/v1")]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [*items, replica_set("web-1")]})


def test_a_dump_with_controllers_shows_the_pods_whose_controller_is_gone():
    """One controller object of any of the five kinds makes the dump's controllers known (kubectl get
    nodes,pods,pdb,rs,jobs,sts,rc,ds -A -o json lists them all): the Job and the ReplicaSet it lacks are gone."""
    v = verdict(text=controllers_dump())
    assert {b["name"]: b["reason"] for b in v["blockers"]} == {"orphan": "controller_not_found",
                                                               "job-orphan": "controller_not_found"}
    assert v["controllers_known"] and not any("controllers" in s for s in v["cannot_see"])
    without = json.loads(controllers_dump())
    without["items"] = [i for i in without["items"] if i["kind"] != "ReplicaSet"]
    unknown = verdict(text=json.dumps(without))
    assert unknown["blockers"] == [] and not unknown["controllers_known"]
    assert "whether the pods' controllers still exist" in unknown["cannot_see"]


def test_live_lists_the_controllers_and_agrees_with_the_dump(apiserver, tmp_path):
    apiserver.serve_controllers = True
    for item in json.loads(controllers_dump())["items"]:
        apiserver.create(item, kind={"Node": "nodes", "ReplicaSet": "replicasets"}.get(item["kind"], "pods"))
    kubeconfig = apiserver.kubeconfig(tmp_path / "kubeconfig")
    result = run("explain", "--live", "--node", "node-a", "--kubeconfig", kubeconfig, "-o", "json")
    assert result.returncode == 0, result.stderr
    live = json.loads(result.stdout)["autoscaler"]
    assert {b["name"]: b["reason"] for b in live["blockers"]} == {"orphan": "controller_not_found",
                                                                  "job-orphan": "controller_not_found"}
    assert live["controllers_known"] and "controllers" not in result.stderr
    assert all(apiserver.requests_to(path) for path in ("/apis/apps/v1/replicasets", "/apis/batch/v1/jobs",
                                                        "/api/v1/replicationcontrollers", "/apis/apps/v1/statefulsets",
                                                        "/apis/apps/v1/daemonsets"))


# -- the release's own arithmetic through the command: neon's patch, upstream without the usage, Go's ratio ----------

def vm_runner(name: str, usage: str, overcommit: str | None = None) -> dict:
    annotations = {"vm.neon.tech/usage": usage, **({"vm.neon.tech/overcommit": overcommit} if overcommit else {})}
    return pod(name, namespace="neon", node="node-a", containers=[container("neonvm-runner", "250m", "256Mi")],
               annotations=annotations, owner_references=[{"apiVersion": "vm.neon.tech/v1", "kind": "VirtualMachine",
                                                           "name": name, "controller": True}])


def one_node(*pods: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [node("node-a", "4", "16Gi"), *pods]})


def test_neon_counts_the_usage_as_its_go_code_does_and_upstream_not_at_all():
    text = one_node(vm_runner("numeric", '{"cpu": 0.5, "memory": "1Gi"}'),
                    vm_runner("truncated", '{"cpu": "2", "memory": "1Gi"}', '{"cpu": "3"}'))
    neon = verdict("--autoscaler-release", "neon", text=text)
    rows = {d["name"]: d for d in neon["differing"]}
    assert rows["numeric"]["cpu_cores"] == 0.5 and rows["numeric"]["scheduler_cpu_cores"] == 0.25
    assert rows["truncated"]["cpu_cores"] == 0.666 and rows["truncated"]["scheduler_cpu_cores"] == 0.666666667
    assert neon["utilization"]["cpu"] == pytest.approx((500 + 666) / 4000)
    upstream = verdict("--autoscaler-release", "1.36", text=text)
    assert [d["name"] for d in upstream["differing"]] == ["truncated"]  # the exported value applied its usage
    assert "does not read vm.neon.tech/usage" in upstream["differing"][0]["why"]
    assert upstream["utilization"]["cpu"] == pytest.approx(500 / 4000)


def test_a_zero_overcommit_factor_is_named_as_the_crash_it_is():
    text = one_node(vm_runner("zero", '{"cpu": "2", "memory": "1Gi"}', '{"cpu": "0"}'))
    v = verdict("--autoscaler-release", "neon", text=text)
    assert v["state"] == "autoscaler_crash" and v["utilization"]["value"] is None
    assert any("neon/zero" in p and "divide by zero" in p for p in v["problems"])


def test_daemonset_pods_over_the_allocatable_are_go_s_ratio_in_valid_json():
    ds = pod("ds", node="node-a", containers=[container("c", "4", "1Gi")],
             owner_references=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": True}])
    app = pod("app", node="node-a", containers=[container("c", "1", "1Gi")])
    result = run("explain", "--node", "node-a", "-o", "json", "--ignore-daemonsets-utilization=true",
                 input=one_node(ds, app))
    assert result.returncode == 0, result.stderr
    v = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))["autoscaler"]
    assert v["utilization"]["cpu"] == "+Inf" == v["utilization"]["value"] and v["state"] == "not_underutilized"
