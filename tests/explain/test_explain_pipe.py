"""``explain ... | head``: the reader closes the pipe early; the command stops quietly (no traceback, nothing on
stderr) with the status a shell reports for a command its pipe ended (141), through a real pipe."""

from __future__ import annotations

import json
import os
import subprocess

from testkit.cli import AGENT
from testkit.factory import container, node, pod


def test_explain_into_a_pipe_closed_early_exits_quietly(tmp_path):
    items = [node("node-a", cpu="4000", memory="8000Gi")]
    items += [pod(f"web-{i:05d}", containers=[container("c", "100m", "128Mi")]) for i in range(1000)]  # far more than a pipe holds
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps({"kind": "List", "items": items}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NODE_NAME", "KUBE"))}
    proc = subprocess.Popen([*AGENT, "explain", str(dump), "--output", "wide"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # what `head -1` reads; then it goes away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert first.strip()
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
    assert code == 141, (code, err)
