"""The README's install blocks, checked without a cluster (issue 39); tests/node/test_readme_install.py runs them.

The blocks must exist, parse (``bash -n``) and read every variable the node test sets. Then each install path runs
with bash as written, with kubectl and helm replaced by recorders that render instead of applying (the real
``kubectl kustomize``, ``kubectl create --dry-run=client``, ``helm template``) and the real openssl: what the README
would apply must be a whole install, every Secret its pods mount made by the blocks (the Collector's serving
certificate and the agents' CA: without them the pods wait in ContainerCreating), the operator's values in the
Collector and both images from the operator's registry. A deliberately broken copy of the README shows each check
failing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.kubernetes import kubernetes_bin
from testkit.cluster import NEWEST
from testkit.helm import built_helm
from testkit.readme_install import (
    BLOCKS,
    PATHS,
    README,
    SETTINGS,
    VARIABLES,
    install_blocks,
    install_script,
    run_install,
    shipped_copy,
)

TEXT = README.read_text(encoding="utf-8")
#: What the node test sets them to, in kind; here any value serves, as long as it is seen where it belongs.
VALUES = {"REGISTRY": "registry.test/platform", "OIDC_ISSUER_URL": "https://issuer.test/cluster",
          "PROMETHEUS_REMOTE_WRITE_URL": "http://prometheus.test:9090/api/v1/write"}
#: Which block reads which variable: the Collector's all of them, each agent block the registry.
READS = {"install-collector": VARIABLES, "install-helm": ("REGISTRY",), "install-kustomize": ("REGISTRY",)}
assert set(VALUES) == set(VARIABLES) and set(READS) == set(BLOCKS) - {SETTINGS}


def block_problems(text: str) -> list[str]:
    """What is wrong with the README's install blocks as text: missing, not parsing, a variable not read."""
    try:
        blocks = install_blocks(text)
    except ValueError as error:
        return [str(error)]
    problems = [f"no ```sh {name} block" for name in BLOCKS if name not in blocks]
    for name in BLOCKS:
        if name in blocks:
            parsed = subprocess.run(["bash", "-n"], input=blocks[name], capture_output=True, text=True, timeout=30)
            if parsed.returncode:
                problems.append(f"block {name} does not parse: {parsed.stderr.strip()}")
    for name, variables in READS.items():
        problems += [f"block {name} does not read ${v}" for v in variables
                     if f"${v}" not in blocks.get(name, "") and f"${{{v}" not in blocks.get(name, "")]
    problems += [f"block {SETTINGS} does not show how to set {v} (export {v}=...)" for v in VARIABLES
                 if f"export {v}=" not in blocks.get(SETTINGS, "")]
    return problems


def test_the_readme_install_blocks_exist_parse_and_read_every_variable():
    assert block_problems(TEXT) == []


@pytest.mark.parametrize("broken,named", [
    (lambda t: t.replace("```sh install-helm", "```sh"), "no ```sh install-helm block"),
    (lambda t: t.replace("kubectl apply -k collector-overlay/", "kubectl apply -k collector-overlay/ 'unclosed"),
     "block install-collector does not parse"),
    (lambda t: t.replace('"$REGISTRY/node-requests-agent"', "registry.example.com/node-requests-agent"),
     "block install-helm does not read $REGISTRY"),
    (lambda t: t.replace("export OIDC_ISSUER_URL=", "OIDC_ISSUER_URL="), "how to set OIDC_ISSUER_URL"),
], ids=["block unmarked", "quote unclosed", "registry written in", "issuer not exported"])
def test_a_broken_readme_fails_the_block_checks(broken, named):
    copy = broken(TEXT)
    assert copy != TEXT
    assert any(named in problem for problem in block_problems(copy)), block_problems(copy)


# ----------------------------------------------------------------------------- what the blocks would apply

RECORDER = """#!{python}
# {tool} as the README's blocks call it, recording instead of changing a cluster (tests/deploy/test_readme_install.py)
import os, subprocess, sys
real, applied, args = {real!r}, {applied!r}, sys.argv[1:]
with open(applied + ".calls", "a") as calls:
    calls.write(" ".join(args) + "\\n")
def record(text):
    with open(applied, "a") as out:
        out.write("\\n---\\n" + text)
if {tool!r} == "helm":
    if args[0] == "install":
        made = subprocess.run([real, "template", *args[1:]], capture_output=True, text=True)
        sys.stderr.write(made.stderr)
        record(made.stdout)
        sys.exit(made.returncode)
    sys.exit(0)
if "--dry-run=client" in args:
    os.execv(real, [real, *args])
flags = ("-n", "--namespace")
words = [a for i, a in enumerate(args) if a not in flags and not (i and args[i - 1] in flags)]
if words[0] != "apply":
    sys.exit(0)  # rollout status, get: nothing to render
for i, word in enumerate(words):
    if word == "-k":
        made = subprocess.run([real, "kustomize", words[i + 1]], capture_output=True, text=True)
        sys.stderr.write(made.stderr)
        if made.returncode:
            sys.exit(made.returncode)
        record(made.stdout)
    elif word == "-f":
        record(sys.stdin.read() if words[i + 1] == "-" else open(words[i + 1]).read())
"""


def applied_by(script: str, workdir: Path) -> list[dict]:
    """The objects ``script`` (an install path) would apply, rendered by the real kubectl and helm."""
    stubs = workdir / "bin"
    stubs.mkdir()
    applied = workdir / "applied.yaml"
    helm = built_helm(workdir / "helm-home")
    for tool, real in (("kubectl", kubernetes_bin(NEWEST) / "kubectl"), ("helm", helm.binary)):
        stub = stubs / tool
        stub.write_text(RECORDER.format(python=sys.executable, tool=tool, real=str(real), applied=str(applied)))
        stub.chmod(0o755)
    env = {**helm.env, **VALUES, "PATH": os.pathsep.join([str(stubs), os.environ["PATH"]])}
    result = run_install(script, shipped_copy(workdir / "clone"), env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return [d for d in yaml.safe_load_all(applied.read_text()) if d]


def install_problems(objects: list[dict]) -> list[str]:
    """What keeps the applied objects from being the whole install with the operator's values."""
    def named(kind: str, name: str) -> dict | None:
        return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)

    problems = []
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    secrets = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects if o["kind"] == "Secret"}
    for workload in (o for o in objects if o["kind"] in ("Deployment", "DaemonSet")):
        namespace = workload["metadata"].get("namespace")
        if namespace not in namespaces:
            problems.append(f"{workload['kind']} {workload['metadata']['name']}: namespace {namespace} not made")
        for volume in workload["spec"]["template"]["spec"].get("volumes", []):
            secret = volume.get("secret")
            if secret and not secret.get("optional") and (namespace, secret["secretName"]) not in secrets:
                problems.append(f"{workload['kind']} {workload['metadata']['name']} mounts Secret "
                                f"{namespace}/{secret['secretName']}, which the install does not make")
        for container in workload["spec"]["template"]["spec"]["containers"]:
            if not container["image"].startswith(VALUES["REGISTRY"] + "/"):
                problems.append(f"{workload['metadata']['name']}: image {container['image']} not from $REGISTRY")
    collector = named("Deployment", "otel-collector")
    if collector is None:
        return [*problems, "no Collector Deployment"]
    env = {e["name"]: e.get("value") for e in collector["spec"]["template"]["spec"]["containers"][0]["env"]}
    problems += [f"the Collector's {v} is {env.get(v)!r}, not ${v}"
                 for v in ("OIDC_ISSUER_URL", "PROMETHEUS_REMOTE_WRITE_URL") if env.get(v) != VALUES[v]]
    if named("DaemonSet", "node-requests-agent") is None:
        problems.append("no agent DaemonSet")
    return problems


RENDERS = pytest.mark.cluster  # kubectl and helm are built by components/; no control plane is started


@RENDERS
@pytest.mark.parametrize("path", list(PATHS))
def test_each_readme_install_path_applies_a_whole_install_with_the_operators_values(path, tmp_path):
    objects = applied_by(install_script(install_blocks(TEXT), path), tmp_path)
    assert install_problems(objects) == []
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "Secret", "Deployment", "DaemonSet", "ClusterRole", "ConfigMap"} <= kinds, kinds


def without_tls(text: str) -> str:
    """The README with its TLS step (the bundled script) taken out of the Collector's block."""
    return "".join(line for line in text.splitlines(keepends=True) if "make-secrets.sh" not in line)


def without_issuer(text: str) -> str:
    """The README whose Collector overlay no longer sets the issuer (the shipped placeholder stays)."""
    return "".join(line for line in text.splitlines(keepends=True) if '{"name": "OIDC_ISSUER_URL"' not in line)


@RENDERS
@pytest.mark.parametrize("broken,named", [
    (without_tls, ["Deployment otel-collector mounts Secret node-requests-collector/otel-collector-tls",
                   "DaemonSet node-requests-agent mounts Secret node-requests-agent/otel-collector-ca"]),
    (without_issuer, ["the Collector's OIDC_ISSUER_URL is 'https://kubernetes.default.svc.cluster.local'"]),
], ids=["TLS step removed", "issuer not set"])
@pytest.mark.parametrize("path", list(PATHS))
def test_a_broken_readme_install_is_caught(broken, named, path, tmp_path):
    copy = broken(TEXT)
    assert copy != TEXT and block_problems(copy) == [], block_problems(copy)  # it still looks like an install
    problems = install_problems(applied_by(install_script(install_blocks(copy), path), tmp_path))
    assert all(any(problem.startswith(n) for problem in problems) for n in named), problems

