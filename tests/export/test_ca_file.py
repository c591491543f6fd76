"""The Collector's CA file, read at start (OTEL_EXPORTER_OTLP_CERTIFICATE): the Secret the DaemonSet mounts it from
missing keeps the pod in ContainerCreating (the kubelet's event names it); a Secret present without the key, or with
an empty one, starts the agent with a file missing or empty. That is one line naming the file and its variable and
exit 2, for HTTP and gRPC alike, never a traceback; the agent never falls back to pushing unverified."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.cli import run
from testkit.ports import free_ports


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("name,content,words", [
    ("absent.crt", None, "No such file or directory"),
    ("empty.crt", "", "no certificate"),
    ("garbage.crt", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", "PEM"),
])
def test_an_unusable_ca_file_is_one_line_naming_it_and_exit_2(tmp_path: Path, protocol, name, content, words):
    ca = tmp_path / name
    if content is not None:
        ca.write_text(content)
    (port,) = free_ports(1)  # never dialled: the file is read first
    result = run("run", "--node-name", "sample-node", "--replay", "sample", "--once",
                 env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"https://127.0.0.1:{port}",
                      "OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_EXPORTER_OTLP_CERTIFICATE": str(ca),
                      "LOG_LEVEL": "WARNING"})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"node-requests-agent: {ca} (OTEL_EXPORTER_OTLP_CERTIFICATE): ") and words in line, line
