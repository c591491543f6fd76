"""Reading a LIST answer one item at a time.

``json.loads`` of a whole PodList holds every pod's full dict tree at once:
for 500 pods of ~9 KiB that is ~30 MiB of Python objects, and RSS never comes
back down. Walking the top-level object with the json module's own decoder
and decoding ``items`` one element at a time keeps one pod alive at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NamedTuple

__all__ = ["iter_list", "Unparsable"]


class Unparsable(NamedTuple):
    """An item of ``items`` that is not JSON the parser can read (bad syntax, nesting past its limit).

    Yielded in its place so the caller can count it; the items around it are kept.
    """

    offset: int
    reason: str

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
            start = _skip(body, pos)
            try:
                item, pos = _decoder.raw_decode(body, start)
            except (ValueError, RecursionError) as exc:
                pos = _end_of_value(body, start)
                item = Unparsable(start, type(exc).__name__)
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


def _end_of_value(text: str, pos: int) -> int:
    """Where the JSON value at ``pos`` ends, by bracket depth outside strings: one linear scan.

    Used only to step over an item the parser refused, so the next item can be read.
    """
    depth, in_string, escaped = 0, False, False
    for i in range(pos, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            if depth == 0:
                return i  # the end of the enclosing list: the bad item ran up to here
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == "," and depth == 0:
            return i
    raise ValueError("LIST answer ends inside an item")
