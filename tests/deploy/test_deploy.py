"""Deployment files: schema validation, rendering, policy, the image's install and command, promtool, and every
PromQL query against real data.

Not executed here (nothing of the kind runs on these machines): kubectl/kustomize against a cluster with a kubelet,
a container build. The kustomizations are rendered by a small stand-in that follows kustomize's documented semantics
for the features used (resources, namespace, configMapGenerator from files, replacements); the Dockerfile's steps run here, with
the image's paths under a temporary folder. The Collector and Prometheus themselves run the shipped config, rules
and dashboard queries in the ``collector`` tests (tests/collector/test_e2e_collector.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.parse
import uuid
from pathlib import Path
from typing import NamedTuple

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from testkit.cluster import ApiError
from testkit.waiting import wait_until
from testkit.image import container_argv, dockerfile_stages, image_entrypoint_and_cmd, image_env
from testkit.factory import container, pod, vm_pod
from components.kubernetes import kubernetes_bin
from testkit.cluster import NEWEST
from testkit.manifests import (AUTHORIZATION, CLUSTER_SCOPED, assert_restriction_follows_the_service_account,
                                     render, restricted_user)
from testkit.repo import REPO as ROOT
from testkit.shipped_queries import alerts, dashboard_queries, dashboard_variables, left_side, recording_rules

K8S_VERSION = "1.36"
@pytest.fixture(scope="module")
def agent_objects():
    return {(o["kind"], o["metadata"]["name"]): o for o in render(ROOT / "daemonset")}


@pytest.fixture(scope="module")
def collector_objects():
    return {(o["kind"], o["metadata"]["name"]): o for o in render(ROOT / "otel-config")}


def test_every_manifest_validates_against_the_kubernetes_schemas(agent_objects, collector_objects):
    for obj in [*agent_objects.values(), *collector_objects.values()]:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def workload(objects: dict, kind: str) -> dict:
    (found,) = [o for o in objects.values() if o["kind"] == kind]
    return found


def namespace_of(objects: dict) -> dict:
    return workload(objects, "Namespace")


def test_kustomizations_render_complete_sets(agent_objects, collector_objects):
    assert set(agent_objects) == {("Namespace", "node-requests-agent"), ("ServiceAccount", "node-requests-agent"),
                                  ("ClusterRole", "node-requests-agent"), ("ClusterRoleBinding", "node-requests-agent"),
                                  ("DaemonSet", "node-requests-agent"), ("NetworkPolicy", "node-requests-agent"),
                                  ("ConfigMap", "node-requests-agent-apiserver"),
                                  ("ValidatingAdmissionPolicy", "node-requests-agent-autoscaler-release"),
                                  ("ValidatingAdmissionPolicyBinding", "node-requests-agent-autoscaler-release")}
    assert set(collector_objects) == {("Namespace", "node-requests-collector"), ("Deployment", "otel-collector"),
                                      ("Service", "otel-collector"), ("NetworkPolicy", "otel-collector"),
                                      ("ConfigMap", "otel-collector-config"), ("ServiceAccount", "otel-collector"),
                                      ("PodDisruptionBudget", "otel-collector"),
                                      ("ClusterRoleBinding", "node-requests-collector-oidc-discovery")}
    binding = agent_objects[("ClusterRoleBinding", "node-requests-agent")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "node-requests-agent", "namespace": "node-requests-agent"}]
    # Each set lives in its own Namespace, created by the same kustomization.
    for objects in (agent_objects, collector_objects):
        name = namespace_of(objects)["metadata"]["name"]
        assert {o["metadata"].get("namespace", name) for o in objects.values() if o["kind"] not in CLUSTER_SCOPED} == {name}
    assert namespace_of(agent_objects)["metadata"]["name"] != namespace_of(collector_objects)["metadata"]["name"]
    config = collector_objects[("ConfigMap", "otel-collector-config")]["data"]["collector.yaml"]
    assert yaml.safe_load(config)["exporters"]["prometheus_remote_write"]["translation_strategy"] == \
        "UnderscoreEscapingWithoutSuffixes"
    collector = collector_objects[("Deployment", "otel-collector")]["spec"]["template"]["spec"]
    assert collector["volumes"][0]["configMap"]["name"] == "otel-collector-config"
    # The agents' OTLP endpoint is this Service, by its DNS name in the Collector's namespace.
    ds_env = {e["name"]: e.get("value") for e in agent_objects[("DaemonSet", "node-requests-agent")]
              ["spec"]["template"]["spec"]["containers"][0]["env"]}
    service = collector_objects[("Service", "otel-collector")]
    (http,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-http"]
    assert ds_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == \
        f"https://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{http}"


def mounted_secret(pod_spec: dict, container: dict, path: str) -> tuple[str, str]:
    """(Secret name, key) a file ``path`` of ``container`` comes from; fails unless a required Secret volume holds it."""
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    for mount in container["volumeMounts"]:
        if path.startswith(mount["mountPath"].rstrip("/") + "/"):
            secret = volumes[mount["name"]]["secret"]
            assert not secret.get("optional") and mount.get("readOnly"), (secret, mount)
            return secret["secretName"], path[len(mount["mountPath"].rstrip("/")) + 1:]
    raise AssertionError(f"{path} is on no mounted volume of {container['name']}")


def test_the_push_path_is_tls_verified_against_the_collectors_ca(agent_objects, collector_objects, tmp_path):
    """Issue 29 item 6: the token never travels in clear. The agent pushes to https and verifies the Collector with
    the CA of a required Secret; the Collector's OTLP/HTTP receiver serves the certificate of a required Secret;
    otel-config/tls/make-secrets.sh makes both, for the name the agent dials; the token lives 10 minutes."""
    ds = agent_objects[("DaemonSet", "node-requests-agent")]["spec"]["template"]["spec"]
    (agent,) = ds["containers"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"]
    assert endpoint.startswith("https://") and "OTEL_EXPORTER_OTLP_INSECURE" not in env
    assert mounted_secret(ds, agent, env["OTEL_EXPORTER_OTLP_CERTIFICATE"]) == ("otel-collector-ca", "ca.crt")
    (token,) = [s["serviceAccountToken"] for v in ds["volumes"] for s in v.get("projected", {}).get("sources", [])]
    assert token["expirationSeconds"] == 600  # the API server's minimum

    deployment = collector_objects[("Deployment", "otel-collector")]["spec"]["template"]["spec"]
    (collector,) = deployment["containers"]
    config = yaml.safe_load(collector_objects[("ConfigMap", "otel-collector-config")]["data"]["collector.yaml"])
    tls = config["receivers"]["otlp"]["protocols"]["http"]["tls"]
    default = lambda value: re.fullmatch(r"\$\{env:\w+:-(.+)\}", value).group(1)  # noqa: E731
    assert mounted_secret(deployment, collector, default(tls["cert_file"])) == ("otel-collector-tls", "tls.crt")
    assert mounted_secret(deployment, collector, default(tls["key_file"])) == ("otel-collector-tls", "tls.key")
    assert "ca_file" not in tls and "client_ca_file" not in tls  # the token authenticates the agent, not a cert

    script = ROOT / "otel-config" / "tls" / "make-secrets.sh"
    made = subprocess.run([str(script), "--no-apply", str(tmp_path / "tls")], capture_output=True, text=True,
                          timeout=60)
    assert made.returncode == 0, made.stderr
    host = endpoint.split("//", 1)[1].rsplit(":", 1)[0]
    text = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "tls" / "tls.crt"), "-noout", "-ext",
                           "subjectAltName,extendedKeyUsage"], capture_output=True, text=True, check=True).stdout
    assert f"DNS:{host}," in text.replace(" ", "") + "," and "TLS Web Server Authentication" in text, text
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "tls" / "ca.crt"),
                               str(tmp_path / "tls" / "tls.crt")], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    script_text = script.read_text()
    assert "secret tls otel-collector-tls" in script_text and "secret generic otel-collector-ca" in script_text


def test_rbac_is_exactly_list_and_watch_of_pods_nodes_and_pdbs(agent_objects):
    rules = agent_objects[("ClusterRole", "node-requests-agent")]["rules"]
    granted = {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    # No get: the agent only lists and watches (pods and its Node with field selectors, PDBs cluster-wide), never
    # reads one object by name.
    assert granted == {(g, r, v) for g, r in (("", "pods"), ("", "nodes"), ("policy", "poddisruptionbudgets"))
                       for v in ("list", "watch")}


def test_the_daemonset_carries_the_autoscaler_settings_the_agent_reads(agent_objects):
    """The shipped env names the autoscaler's settings, empty: the agent then follows the autoscaler's defaults."""
    from agent.config import SETTINGS, from_sources
    from agent.model.autoscaler_settings import DEFAULT_AUTOSCALER

    (c,) = agent_objects[("DaemonSet", "node-requests-agent")]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    for name in ("autoscaler_args", "autoscaler_release"):
        assert env[SETTINGS[name].env[0]] == ""
    config = from_sources({}, {**{k: v for k, v in env.items() if v is not None}, "NODE_NAME": "n"})
    assert config.autoscaler == DEFAULT_AUTOSCALER and config.watch_pdbs is True


def test_collector_replicas_survive_a_drain(collector_objects):
    deployment = collector_objects[("Deployment", "otel-collector")]
    assert deployment["spec"]["replicas"] >= 2
    pdb = collector_objects[("PodDisruptionBudget", "otel-collector")]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    spread = {c["topologyKey"]: c for c in deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert "topology.kubernetes.io/zone" in spread


def test_daemonset_policy(agent_objects):
    ds = agent_objects[("DaemonSet", "node-requests-agent")]
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["priorityClassName"] == "system-node-critical"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "10%"
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # Every variable set is one the agent reads (issue 29: HOST_IP was set and read by nobody).
    from agent.config import SETTINGS

    assert set(env) <= {name for setting in SETTINGS.values() for name in setting.env}, set(env)
    assert {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_COMPRESSION"} <= set(env)
    # Nothing from the host: `used` comes from the container's own /proc (host-wide stat and meminfo).
    # The volumes are the Collector's projected token, read by the agent from NRA_OTLP_TOKEN_FILE, and the
    # Collector's CA (a Secret, test_the_push_path_is_tls_verified_against_the_collectors_ca): nothing else.
    assert "HOST_PROC" not in env
    volume, ca = spec["volumes"]
    assert set(volume) == {"name", "projected"} and set(ca) == {"name", "secret"}
    mount, _ = c["volumeMounts"]
    assert env["NRA_OTLP_TOKEN_FILE"]["value"] == f"{mount['mountPath']}/{volume['projected']['sources'][0]['serviceAccountToken']['path']}"
    assert restricted_violations(spec) == []
    # Probes on the debug port.
    (port,) = c["ports"]
    assert port["containerPort"] == 9808 and port["name"] == "debug"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "debug"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "debug"}
    # Sized from the measured footprint: docs/benchmarks.md#memory.
    assert c["resources"]["requests"]["memory"] == "80Mi" and c["resources"]["limits"]["memory"] == "160Mi"
    assert "cpu" not in c["resources"]["limits"]  # no CPU throttling of the watch


# --------------------------------------------------------------------------- Pod Security "restricted"

#: The volume types "restricted" allows (kubernetes.io, Pod Security Standards).
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def restricted_violations(spec: dict) -> list[str]:
    """The Pod Security Standard "restricted" (baseline included) as checks on a pod spec, by the published table.

    kube-apiserver's own PodSecurity admission judges the same specs in the cluster test below.
    """
    out = [f"{key} is set" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    out += [f"volume {v['name']} is {sorted(set(v) - {'name'})}" for v in spec.get("volumes", [])
            if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    pod_sc = spec.get("securityContext", {})
    if pod_sc.get("runAsUser") == 0:
        out.append("the pod runs as uid 0")
    for c in [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]:
        sc, name = c.get("securityContext", {}), c["name"]
        caps = sc.get("capabilities", {})
        checks = {
            "is privileged": sc.get("privileged") is True,
            "may escalate privileges (allowPrivilegeEscalation must be false)": sc.get("allowPrivilegeEscalation") is not False,
            "does not drop ALL capabilities": "ALL" not in caps.get("drop", []),
            "adds capabilities other than NET_BIND_SERVICE": bool(set(caps.get("add", [])) - {"NET_BIND_SERVICE"}),
            "may run as root (runAsNonRoot must be true)": sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True,
            "runs as uid 0": sc.get("runAsUser") == 0,
            "has no RuntimeDefault or Localhost seccomp profile":
                sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type") not in ("RuntimeDefault", "Localhost"),
            "uses a host port": any(p.get("hostPort") for p in c.get("ports", [])),
            "mounts an unmasked /proc": sc.get("procMount", "Default") != "Default",
        }
        out += [f"container {name} {what}" for what, failed in checks.items() if failed]
    return out


HOST_PROC_VOLUME = {"name": "host-proc", "hostPath": {"path": "/proc", "type": "Directory"}}


def with_host_proc(spec: dict) -> dict:
    """The agent's previous pod spec: the host's /proc mounted read-only at /host/proc."""
    old = json.loads(json.dumps(spec))
    old["volumes"] = [HOST_PROC_VOLUME]
    old["containers"][0]["volumeMounts"] = [{"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}]
    return old


def test_both_namespaces_enforce_restricted_and_both_pods_meet_it(agent_objects, collector_objects):
    for objects in (agent_objects, collector_objects):
        labels = namespace_of(objects)["metadata"]["labels"]
        assert {mode: labels[f"pod-security.kubernetes.io/{mode}"] for mode in ("enforce", "audit", "warn")} == \
            dict.fromkeys(("enforce", "audit", "warn"), "restricted")
        # Enforcement pinned to the tested Kubernetes version; audit and warn at the newest policy.
        assert labels["pod-security.kubernetes.io/enforce-version"] == f"v{K8S_VERSION}"
        assert labels["pod-security.kubernetes.io/audit-version"] == labels["pod-security.kubernetes.io/warn-version"] == "latest"
    for objects, kind in ((agent_objects, "DaemonSet"), (collector_objects, "Deployment")):
        assert restricted_violations(workload(objects, kind)["spec"]["template"]["spec"]) == []


@pytest.mark.parametrize(("change", "violation"), [
    (with_host_proc, "volume host-proc is ['hostPath']"),
    (lambda s: {**s, "hostPID": True}, "hostPID is set"),
    (lambda s: {**s, "securityContext": {**s["securityContext"], "runAsNonRoot": False}}, "may run as root"),
    (lambda s: {**s, "securityContext": {k: v for k, v in s["securityContext"].items() if k != "seccompProfile"}},
     "no RuntimeDefault or Localhost seccomp"),
    (lambda s: {**s, "containers": [{**s["containers"][0], "securityContext": {
        **s["containers"][0]["securityContext"], "capabilities": {"drop": ["NET_RAW"]}}}]}, "does not drop ALL"),
    (lambda s: {**s, "containers": [{**s["containers"][0], "securityContext": {
        k: v for k, v in s["containers"][0]["securityContext"].items() if k != "allowPrivilegeEscalation"}}]},
     "may escalate privileges"),
])
def test_restricted_checks_catch_each_rule(agent_objects, change, violation):
    spec = agent_objects[("DaemonSet", "node-requests-agent")]["spec"]["template"]["spec"]
    assert [v for v in restricted_violations(change(spec)) if violation in v], restricted_violations(change(spec))


@pytest.mark.cluster
def test_kube_apiserver_pod_security_admits_both_pods_and_refuses_a_host_proc_mount(cluster, agent_objects,
                                                                                    collector_objects):
    """The real PodSecurity admission (kube-apiserver 1.37) in namespaces labelled as shipped: each workload applies
    without a PodSecurity warning and its pod is admitted (server-side dry run); the old hostPath pod is refused."""

    def pod_from(template: dict) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pod-security", **template["metadata"]},
                "spec": template["spec"]}

    for objects, kind in ((agent_objects, "DaemonSet"), (collector_objects, "Deployment")):
        name = f"psa-{uuid.uuid4().hex[:8]}"
        shipped = namespace_of(objects)
        cluster.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": name, "labels": shipped["metadata"]["labels"]}})
        try:
            wait_until(lambda: cluster.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 60,
                       interval=0.25, message=f"default ServiceAccount in {name}")
            for account in (o for o in objects.values() if o["kind"] == "ServiceAccount"):
                cluster.api("POST", f"/api/v1/namespaces/{name}/serviceaccounts",
                            {**account, "metadata": {"name": account["metadata"]["name"]}})
            work = workload(objects, kind)
            work = {**work, "metadata": {**work["metadata"], "namespace": name}}
            applied = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(work))
            assert applied.returncode == 0 and "PodSecurity" not in applied.stderr, applied.stderr
            template = work["spec"]["template"]
            cluster.api("POST", f"/api/v1/namespaces/{name}/pods?dryRun=All", pod_from(template))
            if kind == "DaemonSet":
                old = {**template, "spec": with_host_proc(template["spec"])}
                warned = cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                                         input=json.dumps({**work, "spec": {**work["spec"], "template": old}}))
                assert warned.returncode == 0 and "would violate PodSecurity" in warned.stderr, warned.stderr
                with pytest.raises(ApiError) as refused:
                    cluster.api("POST", f"/api/v1/namespaces/{name}/pods?dryRun=All", pod_from(old))
                assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body
                assert "hostPath" in refused.value.body
        finally:
            cluster.api("DELETE", f"/api/v1/namespaces/{name}")


# --------------------------------------------------------------------------- the API server's own-node restriction

def renamed_kustomization(tmp_path: Path, namespace: str, extra: str = "") -> Path:
    """A copy of daemonset/ whose kustomization.yaml names another namespace (its one place), plus ``extra`` lines."""
    base = tmp_path / "daemonset"
    shutil.copytree(ROOT / "daemonset", base)
    kustomization = base / "kustomization.yaml"
    text = kustomization.read_text()
    assert "\nnamespace: node-requests-agent\n" in text
    kustomization.write_text(text.replace("\nnamespace: node-requests-agent\n", f"\nnamespace: {namespace}\n") + extra)
    return base


def test_the_shipped_authorization_file_restricts_the_default_service_account(agent_objects):
    user = assert_restriction_follows_the_service_account(list(agent_objects.values()))
    assert user == restricted_user((AUTHORIZATION / "authorization-config.yaml").read_text())


@pytest.mark.parametrize("namespace", ["monitoring", "team-a-observability"])
def test_renaming_the_namespace_in_the_kustomization_moves_the_restriction_with_it(tmp_path, namespace):
    """Issue 29 item 5: with the namespace renamed in kustomization.yaml (the one place it is named), the binding
    and the API server's restriction name the renamed ServiceAccount, not the default one."""
    objects = render(renamed_kustomization(tmp_path, namespace))
    assert assert_restriction_follows_the_service_account(objects) == \
        f"system:serviceaccount:{namespace}:node-requests-agent"


@pytest.mark.cluster  # kubectl is built by components/ (no control plane is started)
def test_kubectls_kustomize_renders_the_renamed_restriction(tmp_path):
    """The same with the real kustomize (kubectl 1.37's), which the stand-in follows, and a namePrefix on top."""
    base = renamed_kustomization(tmp_path, "monitoring", "namePrefix: nra-\n")
    built = subprocess.run([str(kubernetes_bin(NEWEST) / "kubectl"), "kustomize", str(base)],
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    objects = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert assert_restriction_follows_the_service_account(objects) == \
        "system:serviceaccount:monitoring:nra-node-requests-agent"
    without_prefix = renamed_kustomization(tmp_path / "plain", "monitoring")
    built = subprocess.run([str(kubernetes_bin(NEWEST) / "kubectl"), "kustomize", str(without_prefix)],
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr

    def key(o: dict) -> tuple[str, str]:
        return o["kind"], o["metadata"]["name"]

    assert sorted((d for d in yaml.safe_load_all(built.stdout) if d), key=key) == \
        sorted(render(without_prefix), key=key)


# --------------------------------------------------------------------------- who may reach the Collector



@pytest.mark.cluster
def test_the_cert_manager_component_keeps_the_secret_the_collector_mounts(collector_objects, agent_objects, tmp_path):
    """otel-config/cert-manager/, rendered by the real kubectl's kustomize in an overlay as its header says: a CA
    chain ending in a server certificate for every name the agent may dial, in the Secret the Deployment mounts.
    Static only: no cert-manager runs here (docs/deployment.md says so)."""
    from components.kubernetes import kubernetes_bin
    from testkit.cluster import NEWEST

    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "otel-config", tmp_path)],
        "components": [os.path.relpath(ROOT / "otel-config" / "cert-manager", tmp_path)]}))
    rendered = subprocess.run([str(kubernetes_bin(NEWEST) / "kubectl"), "kustomize", str(tmp_path)],
                              capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(rendered.stdout) if o}
    assert set(collector_objects) < set(objects)
    (tls,) = [v["secret"]["secretName"] for v in workload(collector_objects, "Deployment")["spec"]["template"]["spec"]
              ["volumes"] if "secret" in v]
    serving = next(o for o in objects.values() if o["kind"] == "Certificate" and o["spec"]["secretName"] == tls)
    namespace = namespace_of(collector_objects)["metadata"]["name"]
    assert serving["metadata"]["namespace"] == namespace and "server auth" in serving["spec"]["usages"]
    env = {e["name"]: e.get("value") for e in workload(agent_objects, "DaemonSet")["spec"]["template"]["spec"]
           ["containers"][0]["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].split("//")[1].rsplit(":", 1)[0] in serving["spec"]["dnsNames"]
    # The chain: serving <- CA Issuer <- CA Certificate (isCA) <- self-signed Issuer, all in the Collector's namespace.
    ca_issuer = objects[("Issuer", serving["spec"]["issuerRef"]["name"])]
    ca = next(o for o in objects.values() if o["kind"] == "Certificate"
              and o["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"])
    assert ca["spec"]["isCA"] is True and "selfSigned" in objects[("Issuer", ca["spec"]["issuerRef"]["name"])]["spec"]
    assert {o["metadata"]["namespace"] for o in objects.values() if o["kind"] in ("Issuer", "Certificate")} == {namespace}


def port_of(endpoint: str) -> int:
    """The port of a Collector endpoint setting (``0.0.0.0:4317``, ``${env:POD_IP}:13133``, or the default of
    ``${env:OTLP_GRPC_ENDPOINT:-0.0.0.0:4317}``)."""
    return int(endpoint.rstrip("}").rsplit(":", 1)[1])


def admitted(policy: dict, port: int) -> list[dict]:
    """The peers a NetworkPolicy's ingress rules admit to a TCP ``port``; a rule without ports or peers admits all."""
    peers: list[dict] = []
    for rule in policy["spec"].get("ingress", []):
        ports = rule.get("ports")
        if ports is None or any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports):
            peers += rule.get("from") or [{}]
    return peers


def test_network_policy_admits_only_agents_to_otlp_and_only_prometheus_to_metrics(agent_objects, collector_objects):
    policy = collector_objects[("NetworkPolicy", "otel-collector")]
    deployment = collector_objects[("Deployment", "otel-collector")]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    for rule in policy["spec"]["ingress"]:  # a rule without peers or ports would admit every source or port
        assert rule.get("from") and rule.get("ports") and all(isinstance(p["port"], int) for p in rule["ports"])
    config = yaml.safe_load((ROOT / "otel-config" / "collector.yaml").read_text())
    otlp_ports = {port_of(p["endpoint"]) for p in config["receivers"]["otlp"]["protocols"].values()}
    # The Collector's own metrics (the telemetry reader), scraped by Prometheus for the otel-collector alerts.
    reader = config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    metrics_port = int(re.search(r":-(\d+)\}", str(reader["port"])).group(1))
    # The health_check extension's port; 13133 is its documented default.
    health_port = port_of(config.get("extensions", {}).get("health_check", {}).get("endpoint", ":13133"))
    assert otlp_ports == {4318}  # only OTLP/HTTP, the protocol the shipped agent pushes
    # OTLP: only the agent's pods in the agent's namespace, both selectors in one peer (AND, not OR).
    ds = agent_objects[("DaemonSet", "node-requests-agent")]
    agent_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ds["metadata"]["namespace"]}},
                  "podSelector": {"matchLabels": ds["spec"]["template"]["metadata"]["labels"]}}
    for port in otlp_ports:
        assert admitted(policy, port) == [agent_peer]
    # Metrics: only Prometheus pods, by a pod label and a namespace name the operator adapts.
    (prometheus,) = admitted(policy, metrics_port)
    assert prometheus["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    assert set(prometheus["namespaceSelector"]["matchLabels"]) == {"kubernetes.io/metadata.name"}
    # Health: any pod in the cluster (kubelet's probes come from the node, README says why).
    assert admitted(policy, health_port) == [{"namespaceSelector": {}}]
    # Every port the Collector's pod declares has its rule; any other port admits nobody.
    declared = {p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    assert declared <= otlp_ports | {metrics_port, health_port}
    assert admitted(policy, 9808) == []


def test_prometheus_network_policy_admits_only_the_collector_and_named_readers_to_its_write_port(collector_objects):
    """Issue 29: Prometheus' remote-write receiver writes whatever any peer POSTs, around the Collector's token check.
    The shipped policy beside it admits to the port of PROMETHEUS_REMOTE_WRITE_URL only the Collector's pods (in the
    Collector's namespace, both selectors in one peer) and the readers it names; no other port. Rendered as
    ``kubectl apply -k otel-config/prometheus`` would (no CNI enforcing it runs here: docs/testing.md says so)."""
    objects = render(ROOT / "otel-config" / "prometheus")
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert policy["metadata"]["namespace"] == "monitoring"  # Prometheus' namespace, not the Collector's
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    deployment = collector_objects[("Deployment", "otel-collector")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    url = next(e["value"] for e in container["env"] if e["name"] == "PROMETHEUS_REMOTE_WRITE_URL")
    config = (ROOT / "otel-config" / "collector.yaml").read_text()
    default = re.search(r"PROMETHEUS_REMOTE_WRITE_URL:-([^}]+)\}", config).group(1)
    write_port = {urllib.parse.urlsplit(u).port for u in (url, default)}
    assert write_port == {9090}
    collector_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": deployment["metadata"]["namespace"]}},
                      "podSelector": {"matchLabels": deployment["spec"]["template"]["metadata"]["labels"]}}
    peers = admitted(policy, 9090)
    assert peers[0] == collector_peer
    # The readers: each one named by namespace and pod label in one peer, never a whole namespace or everyone.
    assert peers[1:] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "grafana"}}}]
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from") and [p["port"] for p in rule["ports"]] == [9090]
        for peer in rule["from"]:
            assert set(peer) == {"namespaceSelector", "podSelector"} and peer["podSelector"]["matchLabels"]
    # The agents' pods and any other pod: not admitted.
    agent_peer_labels = {"app.kubernetes.io/name": "node-requests-agent"}
    assert all(p["podSelector"]["matchLabels"] != agent_peer_labels for p in peers)
    assert admitted(policy, 9091) == [] and admitted(policy, 8080) == []


def test_agent_network_policy_admits_nobody_over_the_pod_network(agent_objects):
    """Issue 29: any pod could flood the agents' debug port. The shipped policy selects the agents' pods and admits
    no peer on any port: the kubelet's probes come from the node, which NetworkPolicy always admits, and kubectl
    port-forward arrives on the pod's loopback. (No CNI enforcing it runs here: docs/testing.md says so.)"""
    policy = agent_objects[("NetworkPolicy", "node-requests-agent")]
    ds = agent_objects[("DaemonSet", "node-requests-agent")]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert policy["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert policy["spec"]["podSelector"] == {"matchLabels": pod_labels}  # exactly the agents' pods
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open: the agent connects out
    assert policy["spec"]["ingress"] == []
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    for port in [p["containerPort"] for p in container["ports"]] + [4317, 4318, 8888]:
        assert admitted(policy, port) == [], port
    # The probes use the debug port by name, with no host: from the kubelet on the pod's node, not from a pod.
    assert all("host" not in container[probe]["httpGet"] for probe in ("livenessProbe", "readinessProbe"))


# --------------------------------------------------------------------------- the image


class Image(NamedTuple):
    root: Path
    env: dict[str, str]
    entrypoint: list[str]
    cmd: list[str]


def on_root(root: Path, text: str) -> str:
    """A Dockerfile argument with the image's absolute paths moved under ``root``."""
    return re.sub(r"(?:^|(?<=[\s=:]))/(?=\w)", f"{root}/", text)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Image:
    """The Dockerfile's stages, run here: COPY from the build context, WORKDIR, ENV and RUN (``sh -c``) of the build
    stage with the image's paths under a temporary root, then the final stage's copy of the build stage's venv, ENV,
    ENTRYPOINT and CMD. Not reproduced: the base image itself and the runtime root filesystem assembled from it
    (this machine's Python 3.11 stands in for both) and USER; tests/deploy/test_image.py reads the real image.
    """
    stages = dockerfile_stages((ROOT / "Dockerfile").read_text())
    root = tmp_path_factory.mktemp("image")
    shim = tmp_path_factory.mktemp("shim")
    (shim / "python").symlink_to(sys.executable)  # the base image's `python`
    env = dict(os.environ, PATH=f"{shim}:{os.environ['PATH']}")
    env.pop("VIRTUAL_ENV", None)
    (build, final) = stages
    workdir = root
    for op, arg in build[1:]:
        if op == "WORKDIR":
            workdir = Path(on_root(root, arg))
            workdir.mkdir(parents=True, exist_ok=True)
        elif op == "COPY":
            *sources, dest = shlex.split(arg)
            target = Path(on_root(root, dest)) if dest.startswith("/") else workdir / dest
            for source in sources:
                if (ROOT / source).is_dir():
                    shutil.copytree(ROOT / source, target, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__"))  # as .dockerignore
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy(ROOT / source, target)
        elif op == "RUN":
            done = subprocess.run(["sh", "-c", on_root(root, arg)], cwd=workdir, env=env, capture_output=True,
                                  text=True, timeout=900)
            assert done.returncode == 0, f"RUN {arg}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        else:
            raise AssertionError(f"the build stage uses {op}, which this test does not reproduce")
    for op, arg in final[1:]:
        if op == "COPY" and arg == "--from=build /rootfs /":
            # The interpreter and its libraries (image/runtime.py): this machine's Python stands in for them.
            assert (root / "rootfs" / "etc" / "passwd").is_file()
        elif op == "COPY":
            # The venv's scripts name their interpreter by absolute path: it must land where it was built.
            assert re.fullmatch(r"--from=build (\S+) \1", arg), arg
        else:
            assert op in ("USER", "EXPOSE", "ENV", "ENTRYPOINT", "CMD"), f"the final stage uses {op}, not reproduced here"
    # The base image's PATH, then the final stage's ENV with the image's paths under the temporary root.
    return Image(root, image_env(final, {"PATH": os.environ["PATH"]}, lambda value: on_root(root, value)),
                 *image_entrypoint_and_cmd(final))


def test_dockerfile_pins_its_base_and_user():
    text = (ROOT / "Dockerfile").read_text()
    # The build stage on a fully pinned patch release of the slim image (a digest is added at build time); the
    # final stage on nothing: it holds only what the build stage copied out (image/runtime.py).
    (default,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-[a-z]+(?:@sha256:[0-9a-f]{64})?", default), default
    assert [stage[0].arg.split()[0] for stage in dockerfile_stages(text)] == [default, "scratch"]
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${PYTHON_IMAGE}", "scratch"]
    assert re.search(r"^USER 65532:65532$", text, re.M)


def read_lock(path: Path) -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, hashes) from a requirements file written with --generate-hashes."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    for line in path.read_text().replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        assert not line.startswith("-"), f"{path.name}: option line {line!r} (a lock names no index or links)"
        spec, *hashes = line.split(" --hash=")
        requirement = Requirement(spec)
        (pin,) = requirement.specifier
        assert pin.operator == "==" and hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h.strip()) for h in hashes), line
        entries[canonicalize_name(requirement.name)] = (Version(pin.version), [h.strip() for h in hashes])
    return entries


#: The image's interpreter and platform, for the markers of pyproject's requirements.
IMAGE_MARKERS = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
                 "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                 "implementation_name": "cpython", "platform_python_implementation": "CPython"}


@pytest.mark.parametrize(("lock", "requires"), [
    ("requirements.lock", lambda p: p["project"]["dependencies"]),
    ("requirements-build.lock", lambda p: p["build-system"]["requires"]),
])
def test_lock_satisfies_pyproject(lock, requires):
    """Every requirement of pyproject is pinned in its lock at a version its specifier allows, with hashes;
    completeness (every dependency of every pin) is what --require-hashes checks in the image test."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    text = (ROOT / lock).read_text()
    assert "://" not in text  # no index or host written into the repo
    entries = read_lock(ROOT / lock)
    for line in requires(pyproject):
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_MARKERS):
            continue
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{lock} lacks {line}: regenerate it (README, Dependencies)"
        assert requirement.specifier.contains(entries[name][0], prereleases=True), \
            f"{lock} pins {name}=={entries[name][0]}, pyproject asks {line}: regenerate it (README, Dependencies)"


def test_image_holds_exactly_the_locked_packages(image):
    """The build stage installs the locks with --require-hashes (so every dependency is pinned and hashed) and the
    project with --no-deps: the venv holds the runtime lock and the agent, nothing else, and the agent runs."""
    venv_python = image.root / "opt" / "agent" / "bin" / "python"
    listed = subprocess.run([str(venv_python), "-c", "import importlib.metadata as m, json; print(json.dumps("
                             "[(d.metadata['Name'], d.version) for d in m.distributions()]))"],
                            capture_output=True, text=True, timeout=60, check=True)
    installed = {canonicalize_name(n): Version(v) for n, v in json.loads(listed.stdout)}
    locked = {name: version for name, (version, _) in read_lock(ROOT / "requirements.lock").items()}
    assert installed == {**locked, "node-requests-agent": Version("0.1.0")}
    script = shutil.which("node-requests-agent", path=image.env["PATH"])
    assert script and Path(script).is_relative_to(image.root)
    version = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60, env=image.env)
    assert version.returncode == 0 and "0.1.0" in version.stdout
    # The kubectl plugin is installed beside it: `kubectl node-requests ...` finds it on PATH.
    plugin = shutil.which("kubectl-node_requests", path=image.env["PATH"])
    assert plugin and Path(plugin).is_relative_to(image.root)
    usage = subprocess.run([plugin, "--help"], capture_output=True, text=True, timeout=60, env=image.env)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: kubectl node-requests")


def test_daemonset_container_command_runs_the_agent(image, agent_objects):
    """The DaemonSet's command/args against the image's ENTRYPOINT/CMD, combined as the kubelet does, parse as a run
    of the agent: with a dry replay appended and NODE_NAME from the (stand-in) downward API it exports and exits 0."""
    (c,) = agent_objects[("DaemonSet", "node-requests-agent")]["spec"]["template"]["spec"]["containers"]
    argv = container_argv(image.entrypoint, image.cmd, c)
    assert not [a for a in argv if "$(" in a], "variable references in command/args: expand them here first"
    program = shutil.which(argv[0], path=image.env["PATH"])
    assert program and Path(program).is_relative_to(image.root)
    env = {**os.environ, **image.env, **{e["name"]: e["value"] for e in c["env"] if "value" in e},
           "NODE_NAME": "sample-node"}
    done = subprocess.run([program, *argv[1:], "--replay", "sample", "--once", "--exporter", "table"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "pod_or_vm_cpu_requests" in done.stdout
    # Without NODE_NAME the same command is refused with the documented one-line error.
    env.pop("NODE_NAME")
    missing = subprocess.run([program, *argv[1:]], capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 2 and "NODE_NAME" in missing.stderr


def test_prometheus_scrape_config_targets_the_collector(collector_objects):
    scrape = yaml.safe_load((ROOT / "otel-config" / "prometheus" / "scrape.yaml").read_text())
    (job,) = scrape["scrape_configs"]
    assert job["job_name"] == "otel-collector"
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "endpoints"  # one target per replica
    assert sd["namespaces"]["names"] == [collector_objects[("Service", "otel-collector")]["metadata"]["namespace"]]
    service_ports = {p["name"] for p in collector_objects[("Service", "otel-collector")]["spec"]["ports"]}
    service, port = job["relabel_configs"][0]["regex"].split(";")
    assert service == "otel-collector" and port in service_ports
    assert scrape["rule_files"] == ["rules.yaml"]


@pytest.mark.collector  # promtool comes with the Prometheus 3 build (components.gotools, Go)
def test_rules_pass_promtool():
    from components.gotools import tool_bin

    promtool = tool_bin("prometheus") / "promtool"
    rules = ROOT / "otel-config" / "prometheus" / "rules.yaml"
    result = subprocess.run([str(promtool), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # promtool read every rule the file holds (a count written here went stale when a rule was added)
    shipped = sum(len(group["rules"]) for group in yaml.safe_load(rules.read_text())["groups"])
    assert shipped >= 19 and f"SUCCESS: {shipped} rules found" in result.stdout, (shipped, result.stdout)


def _expressions() -> list[tuple[str, str]]:
    """Every shipped query that has data while nothing is wrong (an alert's left-hand side)."""
    out = list(recording_rules().items())
    # The otel-collector alerts read the Collector's own metrics: tests/collector/test_collector_alerts.py drives them.
    out += [(name, left_side(rule["expr"])) for name, rule in alerts().items() if not name.startswith("OtelCollector")]
    out += dashboard_queries()
    out += [(f"${v.name}", f"count by ({v.label}) ({v.metric})") for v in dashboard_variables()]
    return out


def test_every_promql_expression_returns_data_from_the_real_agent(apiserver, make_agent, tmp_path, monkeypatch):
    """VictoriaMetrics fed by the real agent, with labels sanitised as the shipped Collector config does."""
    from testkit.victoriametrics import VictoriaMetrics

    relabel = tmp_path / "relabel.yaml"
    relabel.write_text(yaml.safe_dump([{"action": "labelmap_all", "regex": r"\.", "replacement": "_"}]))
    vm = VictoriaMetrics(tmp_path / "vm", (f"-relabelConfig={relabel}",))
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", vm.otlp_endpoint)
        apiserver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "namespace": ""},
                          "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                                     "allocatable": {"cpu": "2", "memory": "15Gi", "pods": "110"}}}, kind="nodes")
        apiserver.create(pod("web", containers=[container("a", "1", "1Gi")]))
        apiserver.create(vm_pod("vm-src", "vm-1", "2", "4Gi", role="source", node="node-a"))
        apiserver.create(vm_pod("vm-dst", "vm-1", "2", "4Gi", role="target", node="node-a"))
        make_agent(exporter="otlp", export_interval=0.5, procfs="/proc")
        time.sleep(1)
        apiserver.fail_next(1, 500)  # one failed watch: the restarts panel and alert have data
        apiserver.drop_watches()
        for i in range(8):  # keep events flowing so rate() windows hold changes
            apiserver.create(pod(f"extra-{i}"))
            time.sleep(0.5)
        expressions = _expressions()
        assert len(expressions) >= 18

        def empty() -> list[str]:
            return [name for name, expr in expressions if not vm.query(expr)]

        wait_until(lambda: not empty(), timeout=40, message="every dashboard and rule query returns data")
    finally:
        vm.stop()
