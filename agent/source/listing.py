"""Reading a LIST answer one item at a time.

``json.loads`` of a whole PodList holds every pod's full dict tree at once:
for 500 pods of ~9 KiB that is ~30 MiB of Python objects, and RSS never comes
back down. Walking the top-level object with the json module's own decoder
and decoding ``items`` one element at a time keeps one pod alive at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["iter_list"]

_decoder = json.JSONDecoder()
_WS = " \t\n\r"


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _expect(text: str, pos: int, char: str) -> int:
    pos = _skip(text, pos)
    if pos >= len(text) or text[pos] != char:
        raise ValueError(f"expected {char!r} at offset {pos} of the LIST answer")
    return pos + 1


def iter_list(body: str) -> tuple[dict[str, Any], Iterator[Any]]:
    """Return the List's top-level fields other than ``items``, and an iterator over ``items``.

    The top-level fields are read up front (the API server writes ``items``
    last); the iterator must be consumed before the fields after ``items``
    would be seen, which the API server never sends.
    """
    pos = _expect(body, 0, "{")
    fields: dict[str, Any] = {}
    pos = _skip(body, pos)
    if pos < len(body) and body[pos] == "}":
        return fields, iter(())
    while True:
        key, pos = _decoder.raw_decode(body, _skip(body, pos))
        if not isinstance(key, str):
            raise ValueError("LIST answer has a non-string key")
        pos = _expect(body, pos, ":")
        pos = _skip(body, pos)
        if key == "items" and body.startswith("[", pos):
            return fields, _items(body, pos + 1, fields)
        value, pos = _decoder.raw_decode(body, pos)
        fields[key] = value
        pos = _skip(body, pos)
        if pos < len(body) and body[pos] == ",":
            pos += 1
            continue
        _expect(body, pos, "}")
        return fields, iter(())


def _items(body: str, pos: int, fields: dict[str, Any]) -> Iterator[Any]:
    pos = _skip(body, pos)
    if body.startswith("]", pos):
        pos += 1
    else:
        while True:
            item, pos = _decoder.raw_decode(body, _skip(body, pos))
            yield item
            pos = _skip(body, pos)
            if body.startswith(",", pos):
                pos += 1
                continue
            pos = _expect(body, pos, "]")
            break
    # Anything after items (not sent by the API server) still lands in fields.
    pos = _skip(body, pos)
    while body.startswith(",", pos):
        key, pos = _decoder.raw_decode(body, _skip(body, pos + 1))
        pos = _expect(body, pos, ":")
        value, pos = _decoder.raw_decode(body, _skip(body, pos))
        fields[key] = value
        pos = _skip(body, pos)
    _expect(body, pos, "}")
