"""The page's templates escape every value unless the renderer made it: a pod name cannot become markup."""

from __future__ import annotations

import pytest

from agent.debug.template import FRAGMENTS, SCRIPT, STYLE, Markup, fragment, join


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
