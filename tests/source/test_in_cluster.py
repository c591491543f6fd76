"""In a pod: the service account folder and the Service's variables, over TLS, without the kubernetes package.

The running agent in its pod never imports ``kubernetes`` (its ``__init__`` costs some 20 MiB on every node); a
token the kubelet rotates (an atomic swap of the ``..data`` link) is used without a restart, and at once after a
401; a broken mount stops the start with one line naming the file; a token that vanishes later keeps the last one.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.config import SETTINGS, cluster_access
from testkit.cli import run as run_cli
from testkit.factory import pod
from testkit.fake_apiserver import FakeApiServer
from testkit.http import http_get
from testkit.repo import REPO
from testkit.waiting import wait_until

FOLDER_VARIABLE = SETTINGS["serviceaccount_dir"].env[0]


def _rotate(folder: Path, token: str, generation: int) -> None:
    """As the kubelet's atomic writer: a new timestamped folder, ``..data_tmp`` pointing at it, renamed over
    ``..data``; ``token`` and ``ca.crt`` are links through ``..data``."""
    new = folder / f"..2026_12_03_{generation:02d}"
    new.mkdir()
    (new / "token").write_text(token)
    if (folder / "..data").exists():
        shutil.copy(folder / "..data" / "ca.crt", new / "ca.crt")
    os.symlink(new.name, folder / "..data_tmp")
    os.replace(folder / "..data_tmp", folder / "..data")


def _service_account(folder: Path, apiserver: FakeApiServer) -> Path:
    """The kubelet's projected volume for ``apiserver``: its token and the CA that signed its certificate."""
    folder.mkdir()
    first = folder / "..2026_12_03_00"
    first.mkdir()
    (first / "token").write_text(apiserver.token)
    shutil.copy(apiserver.ca_file, first / "ca.crt")
    os.symlink(first.name, folder / "..data")
    for name in ("token", "ca.crt"):
        os.symlink(f"..data/{name}", folder / name)
    return folder


def _environ(folder: Path, apiserver: FakeApiServer) -> dict[str, str]:
    return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(apiserver.port),
            FOLDER_VARIABLE: str(folder)}


@pytest.fixture
def tls_apiserver():
    server = FakeApiServer(bookmark_interval=0.5, tls=True).start()
    yield server
    server.stop()


def test_the_agent_in_a_pod_never_imports_the_kubernetes_package(tls_apiserver, tmp_path):
    """The command users run, in-cluster over TLS through LIST, WATCH, an event and an export; ``-X importtime``
    lists every module the process imported. On main the in-cluster loader imported ``kubernetes.client``."""
    tls_apiserver.create(pod("before"))
    folder = _service_account(tmp_path / "sa", tls_apiserver)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "KUBE", "NODE_NAME", "DEBUG_ADDRESS"))}
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "agent", "run", "--node-name", "node-a",
                             "--exporter", "none", "--debug-address", "127.0.0.1:0", "--procfs", "/proc"],
                            cwd=REPO, env={**env, **_environ(folder, tls_apiserver)}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        import threading

        threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
        port = wait_until(lambda: next((int(m.group(1)) for line in list(lines)
                                        if (m := re.search(r"debug endpoint on port (\d+)", line))), None),
                          timeout=30, message="the agent logs its debug port")
        wait_until(lambda: http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200, timeout=30)
        tls_apiserver.create(pod("during"))
        wait_until(lambda: b"during" in http_get(f"http://127.0.0.1:{port}/debug/pods")[1], timeout=30)
        assert http_get(f"http://127.0.0.1:{port}/metrics")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:") and "|" in line}
    assert "agent.source.kube" in imported and "urllib3" in imported  # the listing is there
    assert not sorted(m for m in imported if m == "kubernetes" or m.startswith("kubernetes.")), \
        "the in-cluster run path imported the kubernetes package"


@pytest.mark.parametrize("broken, says", [
    ("no token", "token: No such file or directory"),
    ("empty token", "token: the token file is empty"),
    ("token a folder", "token: Is a directory"),
    ("no CA", "ca.crt: No such file or directory"),
    ("CA not a certificate", "ca.crt: no CA certificate in it"),
    ("CA a folder", "ca.crt: Is a directory"),
])
def test_a_broken_service_account_folder_stops_the_start_with_one_line_naming_the_file(tmp_path, tls_apiserver,
                                                                                      broken, says):
    folder = tmp_path / "sa"
    folder.mkdir()
    (folder / "token").write_text("a-token")
    (folder / "ca.crt").write_text(Path(tls_apiserver.ca_file).read_text())
    what = "token" if "token" in broken else "ca.crt"
    (folder / what).unlink()
    if broken.startswith("empty"):
        (folder / what).write_text(" \n")
    elif broken.endswith("a folder"):
        (folder / what).mkdir()
    elif broken.endswith("not a certificate"):
        (folder / what).write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")
    result = run_cli("run", "--node-name", "node-a", "--exporter", "none",
                     env={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
                          FOLDER_VARIABLE: str(folder)})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "cannot load Kubernetes configuration from the in-cluster service account: " in lines[0]
    assert f"{folder}/{says}" in lines[0], lines[0]


@pytest.mark.parametrize("port, says", [(None, "KUBERNETES_SERVICE_PORT is not set"),
                                        ("", "KUBERNETES_SERVICE_PORT is empty"),
                                        ("https", "KUBERNETES_SERVICE_PORT is 'https', not a port number")])
def test_a_bad_service_port_is_named(tmp_path, port, says):
    from agent.source.kube import KubeConfigError, load_configuration

    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", FOLDER_VARIABLE: str(tmp_path),
               **({"KUBERNETES_SERVICE_PORT": port} if port is not None else {})}
    with pytest.raises(KubeConfigError, match=re.escape(says)):
        load_configuration(cluster_access(None, None, environ))


def test_the_record_of_a_pod_and_an_ipv6_service_address(tmp_path, tls_apiserver):
    from agent.source.kube import load_configuration

    folder = _service_account(tmp_path / "sa", tls_apiserver)
    endpoint = load_configuration(cluster_access(None, None, {**_environ(folder, tls_apiserver),
                                                              "KUBERNETES_SERVICE_HOST": "fd00::1"}))
    assert endpoint.server == f"https://[fd00::1]:{tls_apiserver.port}"
    assert endpoint.ca_file == str(folder / "ca.crt") and endpoint.verify and endpoint.cert_file is None
    assert endpoint.tokens.authorization() == f"Bearer {tls_apiserver.token}"


def test_a_rotated_token_is_used_without_a_restart(tls_apiserver, tmp_path):
    """The kubelet swaps ``..data``; the API server then accepts only the new token (the old one's object is
    gone). The running agent's next request carries the new one: its watches resume and a new pod arrives."""
    from agent.run.agent import Agent
    from testkit.agents import agent_config

    folder = _service_account(tmp_path / "sa", tls_apiserver)
    access = cluster_access(None, None, _environ(folder, tls_apiserver))
    agent = Agent(agent_config(node_name="node-a", cluster=access, exporter="none", read_timeout=5.0,
                               watch_timeout=(30, 40))).start()
    try:
        wait_until(lambda: agent.state.synced and tls_apiserver.count(watch=True) >= 1)
        _rotate(folder, "rotated-token", 1)
        tls_apiserver.token = "rotated-token"
        tls_apiserver.drop_watches()  # every watch asks again, with whatever token it now reads
        tls_apiserver.create(pod("after-rotation"))
        wait_until(lambda: "after-rotation" in {p.name for p in agent.state.pods()}, timeout=20)
        assert not agent.stats.snapshot().requests_failed.get(("pods", "unauthorized"))
    finally:
        agent.shutdown(final_export=False)


def test_a_401_reads_the_token_again_at_once_and_tries_once_more(tls_apiserver, tmp_path):
    """The file changed in a way its stat does not show (same inode, size and mtime) and the minute has not
    passed: only the 401 makes the source look, and the request succeeds on its second try."""
    from agent.source.endpoint import FileToken
    from agent.source.kube import KubeApi, load_configuration

    folder = tmp_path / "sa"
    folder.mkdir()
    (folder / "ca.crt").write_text(Path(tls_apiserver.ca_file).read_text())
    token = folder / "token"
    token.write_text("token-one")
    endpoint = load_configuration(cluster_access(None, None, _environ(folder, tls_apiserver)))
    now = [0.0]
    endpoint = type(endpoint)(server=endpoint.server, ca_file=endpoint.ca_file,
                              tokens=FileToken(str(token), clock=lambda: now[0]))
    tls_apiserver.token = "token-one"
    api = KubeApi(endpoint)
    try:
        assert api.get_json("/version", {})["gitVersion"]
        before = os.stat(token)
        with open(token, "r+") as f:  # in place: the same inode and size
            f.write("token-two")
        os.utime(token, ns=(before.st_atime_ns, before.st_mtime_ns))
        tls_apiserver.token = "token-two"
        asked = len(tls_apiserver.requests_to("/version"))
        assert api.get_json("/version", {})["gitVersion"]
        assert len(tls_apiserver.requests_to("/version")) - asked == 2  # refused once, then accepted
    finally:
        api.close()


def test_a_token_file_that_vanishes_later_is_a_warning_and_the_last_token_is_kept(tmp_path, caplog):
    from agent.source.endpoint import FileToken

    token = tmp_path / "token"
    token.write_text("still-valid")
    now = [0.0]
    source = FileToken(str(token), clock=lambda: now[0])
    token.unlink()
    with caplog.at_level(logging.WARNING, logger="agent.source.endpoint"):
        assert source.authorization() == "Bearer still-valid"
        assert source.renew() is False
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot read the service account token again ({token}: No such file or directory); "
        "the one read last is still used"]
    token.write_text("")
    now[0] += 61
    assert source.authorization() == "Bearer still-valid"  # an empty file is no token either
    token.write_text("next")
    assert source.authorization() == "Bearer next"


def test_an_unchanged_token_file_is_read_again_each_minute(tmp_path):
    """client-go's rule besides the stat: a file rewritten without a visible change is still picked up."""
    from agent.source.endpoint import FileToken

    token = tmp_path / "token"
    token.write_text("aaaa")
    now = [0.0]
    source = FileToken(str(token), clock=lambda: now[0])
    before = os.stat(token)
    token.write_text("bbbb")
    os.utime(token, ns=(before.st_atime_ns, before.st_mtime_ns))
    now[0] = 59.0
    assert source.authorization() == "Bearer aaaa"
    now[0] = 60.0
    assert source.authorization() == "Bearer bbbb"
