"""The one JSON encoding the debug endpoint serves, and what /debug/pods counts its page budget in.

Indented for people reading it with curl; ``ensure_ascii`` (json's default) keeps it ASCII, so its length in
characters is its size in bytes.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_body", "json_text", "item_bytes"]

_INDENT = 2


def json_text(value: Any) -> str:
    return json.dumps(value, indent=_INDENT)


def json_body(value: Any) -> bytes:
    """What the endpoint serves for ``value``: its text and a newline."""
    return (json_text(value) + "\n").encode()


def item_bytes(value: Any, depth: int) -> int:
    """At most the bytes ``value`` adds to ``json_text`` of a document as an item of a list ``depth`` levels deep (an
    item of a list that is a key of the top-level object: 2): its own text with each of its lines indented ``depth``
    levels, and the comma and newline that separate it."""
    text = json_text(value)
    return len(text) + _INDENT * depth * (text.count("\n") + 1) + 2
