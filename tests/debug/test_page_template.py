"""The page's templates escape every value unless the renderer made it: a pod name cannot become markup. They are
read as the debug endpoint is built, so an agent installed without one stops at start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.debug.template import FRAGMENTS, SCRIPT, STYLE, TEMPLATES, Markup, fragment, join
from testkit.cli import AGENT

ROOT = Path(__file__).resolve().parents[2]


def test_a_value_is_escaped_text_and_a_filled_fragment_goes_in_as_it_is():
    hostile = '<script>alert("x")</script> & \'q\''
    row = fragment("fact_row", name=hostile, value=3)
    assert row == ("<tr><td>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;q&#x27;</td>"
                   "<td>3</td></tr>")
    assert isinstance(row, Markup)
    table = fragment("problems", items=join([fragment("problem", problem="a < b"), fragment("problem", problem="c")]))
    assert table == "<ul id=autoscaler-problems><li>a &lt; b</li><li>c</li></ul>"


def test_a_plain_string_is_escaped_even_inside_a_join():
    assert join(["<b>", fragment("problem", problem="x")]) == "&lt;b&gt;<li>x</li>"


def test_a_value_in_a_quoted_attribute_cannot_close_it():
    row = fragment("pod_row", namespace="ns", name="n", cpu_sort='1" onmouseover="x', cpu="1", memory_sort=2,
                   memory="2", source="s", problems="")
    assert 'data-sort="1&quot; onmouseover=&quot;x"' in row


def test_a_missing_value_is_an_error_not_an_empty_hole():
    with pytest.raises(KeyError):
        fragment("fact_row", name="only the name")


def test_every_fragment_the_page_uses_is_shipped_with_the_style_and_script():
    assert {"page", "verdict", "utilization_row", "blocker_row", "pod_row", "fact_row"} <= set(FRAGMENTS)
    assert "#verdict-state" in STYLE and "sessionStorage" in SCRIPT


def _agent_copy(tmp_path: Path, without: str) -> Path:
    """The agent package copied beside ``tmp_path`` with one template removed (an incomplete installation)."""
    shutil.copytree(ROOT / "agent", tmp_path / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "agent" / "debug" / "templates" / without).unlink()
    return tmp_path


@pytest.mark.parametrize("missing", TEMPLATES)
def test_an_agent_without_a_template_stops_at_start_with_one_line(tmp_path, missing):
    """Not at the first visit of the page: the agent never starts, and says which file and what to do."""
    where = _agent_copy(tmp_path, missing)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "NODE_NAME", "KUBE", "DEBUG_ADDRESS"))}
    result = subprocess.run([*AGENT, "run", "--node-name", "n", "--replay", "sample", "--exporter", "none", "--once",
                             "--debug-address", "127.0.0.1:0", "--log-level", "warning"], cwd=where, env={**env, "PYTHONPATH": str(where)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"node-requests-agent: the debug page's template {missing} cannot be read "), lines
    assert str(where / "agent" / "debug" / "templates" / missing) in lines[0] and "reinstall" in lines[0]


def test_the_endpoint_reads_the_templates_but_leaves_the_escaping_module_to_the_first_page():
    """html (its entity table is 0.5 MiB) loads when a page is rendered, not when the endpoint is built."""
    code = ("import sys, agent.debug.endpoint as e, agent.debug.template as t; print('html' in sys.modules); "
            "t.fragment('problem', problem='x'); print('html' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
