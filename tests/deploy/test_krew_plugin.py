"""The kubectl plugin installed the krew way: real krew (built from sigs.k8s.io/krew) into a temporary KREW_ROOT,
from the manifest and archive krew/build.py makes, then run by the real kubectl against the real API server.

The plugin runs with a python3 that has nothing installed (the interpreter behind this venv, not the venv), from a
folder outside the checkout, so it can only work from what the archive carries.

Marked ``cluster``: krew and kubectl are built by components/ (Go), and the live answer needs the API server.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from components.gotools import tool_bin
from components.kubernetes import kubernetes_bin
from testkit.cluster import NEWEST, Cluster
from testkit.kwok import Kwok
from testkit.repo import REPO as ROOT

pytestmark = pytest.mark.cluster

NODE = "krew-node"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(manifest, archive) from krew/build.py, run as docs/deployment.md says."""
    out = tmp_path_factory.mktemp("krew-build")
    result = subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "--out", str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    manifest, archive = (Path(line) for line in result.stdout.split())
    return manifest, archive


@pytest.fixture(scope="module")
def krew_env(tmp_path_factory) -> dict[str, str]:
    """PATH: KREW_ROOT/bin (the plugin), krew, kubectl, and a bare python3; HOME and KREW_ROOT temporary."""
    try:
        krew = tool_bin("krew")
    except Exception as error:  # a missing component fails the tests that need it, never skips them
        pytest.fail(f"krew could not be built by components.gotools: {error}", pytrace=False)
    home = tmp_path_factory.mktemp("krew-home")
    python_dir = home / "python"
    python_dir.mkdir()
    # The interpreter this venv was made from: no site-packages of the project's.
    (python_dir / "python3").symlink_to(os.path.realpath(sys._base_executable))
    root = home / "krew-root"
    return {"HOME": str(home), "KREW_ROOT": str(root), "KREW_NO_UPGRADE_CHECK": "1", "LANG": "C.UTF-8",
            "PATH": os.pathsep.join([str(root / "bin"), str(krew), str(kubernetes_bin(NEWEST)), str(python_dir),
                                     "/usr/bin", "/bin"])}


@pytest.fixture(scope="module")
def installed(built, krew_env) -> subprocess.CompletedProcess:
    manifest, archive = built
    result = subprocess.run(["kubectl", "krew", "install", f"--manifest={manifest}", f"--archive={archive}"],
                            capture_output=True, text=True, env=krew_env, cwd=krew_env["HOME"], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_manifest_carries_the_archives_sha256_and_points_nowhere_outside(built) -> None:
    manifest, archive = built
    plugin = yaml.safe_load(manifest.read_text())
    assert (plugin["kind"], plugin["metadata"]["name"]) == ("Plugin", "node-requests")
    from agent import __version__

    assert plugin["spec"]["version"] == f"v{__version__}"
    (platform,) = plugin["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"] == archive.resolve().as_uri() and platform["bin"] == "kubectl-node_requests"
    assert "Python %d.%d" % sys.version_info[:2] in plugin["spec"]["caveats"]
    assert "http" not in manifest.read_text()  # no download URL, no homepage elsewhere


def test_archive_holds_the_launcher_the_agent_and_the_locked_runtime_set(built) -> None:
    _, archive = built
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        launcher = tar.getmember("kubectl-node_requests")
    assert launcher.mode & 0o111 and names == sorted(names)
    assert "lib/agent/cli.py" in names
    assert any(n.startswith("lib/agent/samples/") for n in names)
    # The page's templates, read as the debug endpoint is built (debug/template.py): without them it cannot start.
    assert {f"lib/agent/debug/templates/page.{kind}" for kind in ("html", "css", "js")} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    from krew.build import locked  # noqa: PLC0415  (the builder's own reading of requirements.lock)

    dist_infos = {n.split("/")[1] for n in names if n.startswith("lib/") and ".dist-info/" in n}
    assert len(dist_infos) == len(locked())


def test_krew_installs_the_plugin_from_the_local_manifest_and_archive(installed, krew_env) -> None:
    assert "Installed plugin: node-requests" in installed.stderr
    assert "Python" in installed.stderr  # krew shows the caveats
    # `krew list` needs a plugin index (fetched from the network by `krew update`); krew's receipt says the same.
    root = Path(krew_env["KREW_ROOT"])
    receipt = yaml.safe_load((root / "receipts" / "node-requests.yaml").read_text())
    from agent import __version__

    assert receipt["spec"]["version"] == f"v{__version__}" and receipt["status"]["source"]["name"] == "detached"
    link = root / "bin" / "kubectl-node_requests"
    assert link.is_symlink()
    assert Path(os.path.realpath(link)) == root / "store" / "node-requests" / f"v{__version__}" / "kubectl-node_requests"


def test_kubectl_node_requests_help_works_after_install(installed, krew_env) -> None:
    result = subprocess.run(["kubectl", "node-requests", "--help"], capture_output=True, text=True, env=krew_env,
                            cwd=krew_env["HOME"], timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: kubectl node-requests") and "explain" in result.stdout
    plugins = subprocess.run(["kubectl", "plugin", "list"], capture_output=True, text=True, env=krew_env, timeout=60)
    assert "kubectl-node_requests" in plugins.stdout, plugins.stdout + plugins.stderr


def test_a_live_answer_from_the_real_api_server_after_install(cluster: Cluster, kwok: Kwok, installed,
                                                              krew_env) -> None:
    kwok.add_node(NODE, cpu="2", memory="4Gi")
    namespace = cluster.create_namespace("krew")
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
                 "initContainers": [{"name": "setup", "image": "registry.invalid/setup:1",
                                     "resources": {"requests": {"cpu": "1500m"}}}]}})
    env = dict(krew_env, KUBECONFIG=str(cluster.admin_kubeconfig))
    result = subprocess.run(["kubectl", "node-requests", "explain", "--live", "--node", NODE], capture_output=True,
                            text=True, env=env, cwd=krew_env["HOME"], timeout=120)
    assert result.returncode == 0, result.stderr
    # The rules from the server's /version; other tests' DaemonSets may have put their pods on the Node too.
    assert f"NODE {NODE}  " in result.stdout and "Kubernetes 1.37" in result.stdout, result.stdout
    assert f"{namespace}/web" in result.stdout and "init setup peak" in result.stdout, result.stdout
    as_json = subprocess.run(["kubectl", "node-requests", "explain", "--live", "--node", NODE, "-n", namespace,
                              "-o", "json"], capture_output=True, text=True, env=env, cwd=krew_env["HOME"], timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    (web,) = [p for p in json.loads(as_json.stdout)["pods"] if p["namespace"] == namespace]
    assert (web["name"], web["node"], web["cpu_cores"]) == ("web", NODE, 1.5)  # max(app 500m, init 1500m)


def test_the_launcher_refuses_another_python_with_a_message(built, krew_env, tmp_path) -> None:
    _, archive = built
    with tarfile.open(archive) as tar:
        launcher = tar.extractfile("kubectl-node_requests").read().decode()
    major, minor = sys.version_info[:2]
    other = tmp_path / "kubectl-node_requests"
    other.write_text(launcher.replace(f"NEEDED = ({major}, {minor})", "NEEDED = (3, 99)"))
    result = subprocess.run(["python3", str(other), "--help"], capture_output=True, text=True, env=krew_env, timeout=60)
    assert result.returncode == 3 and not result.stdout
    assert result.stderr.startswith("kubectl node-requests: needs Python 3.99 as python3 on PATH"), result.stderr
    assert f"found {major}.{minor}" in result.stderr


def test_the_build_refuses_an_environment_that_is_not_the_lock(monkeypatch) -> None:
    import krew.build as build

    monkeypatch.setattr(build, "locked", lambda: {"msgspec": "0.0.1", "no-such-distribution-nra": "1.0"})
    with pytest.raises(build.BuildError) as refused:
        build.dependency_files()
    message = str(refused.value)
    assert "msgspec is 0.23.0, the lock says 0.0.1" in message
    assert "no-such-distribution-nra 1.0 is not installed" in message
