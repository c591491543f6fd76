"""Reading a LIST answer one item at a time, as it arrives.

``json.loads`` of a whole PodList holds every pod's full dict tree at once
(for 2,000 pods of ~9 KiB, ~150 MiB of Python objects); even the body alone
is ~18 MiB, twice that as bytes plus text. :func:`read_list` reads the answer
chunk by chunk and hands on each item as its own JSON bytes, so at most a few
chunks and one item are held, never the body: msgspec finds where an item
ends (skipping it without building anything), and the item's bytes go to the
typed decoder.

Anything that reader does not expect (no ``items`` array near the start, an
item msgspec refuses) is read from there on by :func:`iter_list`, the json
module's decoder walking the text, which keeps the good items around a bad
one; only then is the rest of the body held as text.

Why two readers for one job: msgspec (0.23) has no public way to say where a
value ends, so the fast reader learns it from the text of msgspec's errors
(``trailing_end``, ``truncated``). The text reader leans on neither msgspec
nor the API server's layout, so whatever the fast one cannot read (an odd
body, or a msgspec whose messages changed) is still read right, only slower.
tests/source/test_listing.py pins both texts on real msgspec errors and fails
if an API server's LIST leaves the fast path, so an upgrade that would move
the agent to the slow path fails the tests instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec

from agent.decode.reader import Unparsable

# SKIPPING_DECODER, trailing_end and truncated are the fast reader's reading of msgspec's errors, public so the tests
# can pin them on real msgspec errors (a msgspec upgrade that changed its messages fails there, not in production).
__all__ = ["SKIPPING_DECODER", "iter_list", "read_list", "trailing_end", "truncated", "Unparsable"]


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
    _tail(body, pos, fields)


def _tail(body: str, pos: int, fields: dict[str, Any]) -> None:
    """Fields after ``items`` (not sent by the API server) still land in ``fields``; then the closing brace."""
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


# -- reading the answer as it arrives ------------------------------------------------
_ITEMS_KEY = re.compile(rb'"items"\s*:\s*\[')
# msgspec names the offset after the first character past a complete value.
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_WS_BYTES = frozenset(b" \t\n\r")
# The API server writes kind, apiVersion and metadata before items: a few hundred bytes.
_HEADER_LIMIT = 1 << 20
SKIPPING_DECODER = msgspec.json.Decoder(msgspec.Raw)  # builds nothing: a value decodes to its raw bytes
# Where the API server's compact JSON puts one item's end: every object of a List starts with its
# metadata (kind and apiVersion are empty in items, so omitted). Only a candidate: the slice up to it
# must decode as exactly one value, which no other place can give (see _typed_item).
_NEXT_ITEM = b'},{"metadata":{'
_NO_NEXT_ITEM, _REFUSED = -1, -2
_AHEAD_LIMIT = 1 << 18  # read at most this far past an item's start looking for the next one


def trailing_end(message: str) -> int | None:
    """The offset of the first non-blank byte after the complete value the decoded bytes start with (its end, give
    or take blanks), from msgspec's "trailing characters" error; None if the message is another."""
    found = _TRAILING.search(message)
    return int(found.group(1)) - 1 if found else None


def truncated(message: str) -> bool:
    """msgspec's word for bytes that stop inside a value (more may make it whole)."""
    return "truncated" in message


def _text(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")


class _Chunks:
    """The unread part of the answer: a buffer filled from the chunk iterator on demand."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self.data = bytearray()
        self.ended = False
        self.dropped = 0  # bytes already handed on and removed from the front

    def more(self, want: int = 0) -> bool:
        """Read at least one more chunk (and until ``want`` bytes are buffered); False at the end."""
        if self.ended:
            return False
        target = max(want, len(self.data) + 1)
        while len(self.data) < target:
            chunk = next(self._chunks, None)
            if chunk is None:
                self.ended = True
                break
            self.data += chunk
        return True

    def drop(self, pos: int) -> int:
        """Forget the first ``pos`` bytes; return the position that ``pos`` is now (0)."""
        del self.data[:pos]
        self.dropped += pos
        return 0

    def rest(self, pos: int) -> str:
        """Everything from ``pos`` to the end of the answer, as text (the fallback)."""
        while self.more():
            pass
        return _text(self.data[pos:])


def read_list(chunks: Iterable[bytes], typed_item: Callable[[memoryview], Any] | None = None,
              ) -> tuple[dict[str, Any], Iterator[Any]]:
    """:func:`iter_list` for an answer arriving as byte chunks; items come as JSON bytes (or as iter_list's).

    Same contract: the top-level fields other than ``items`` up front, the
    iterator over ``items``, and fields after ``items`` only once it is done.
    With ``typed_item`` (bytes of exactly one item -> a typed object, or
    ``msgspec.DecodeError``) most items come as its typed objects instead,
    each parsed once: an item's end is found by where the next one starts,
    not by a second parse that skips it.
    """
    buf = _Chunks(chunks)
    while True:
        for match in _ITEMS_KEY.finditer(buf.data):
            fields = _header(buf.data[:match.start()])
            if fields is not None:
                return fields, _stream_items(buf, match.end(), fields, typed_item)
        if len(buf.data) > _HEADER_LIMIT or not buf.more():
            return iter_list(buf.rest(0))


def _header(prefix: bytearray) -> dict[str, Any] | None:
    """The fields before ``"items": [`` if that is where the top-level object has its items, else None."""
    try:
        header = json.loads(_text(prefix) + '"items": []}')
    except (ValueError, RecursionError):
        return None  # "items" nested in another field, or not an object at all
    if not isinstance(header, dict):
        return None
    header.pop("items", None)
    return header


def _stream_items(buf: _Chunks, pos: int, fields: dict[str, Any],
                  typed_item: Callable[[memoryview], Any] | None) -> Iterator[Any]:
    first = True
    while True:
        pos = _skip_bytes(buf, pos)
        if pos < 0:
            raise ValueError("LIST answer ends inside items")
        if first and buf.data[pos] == 0x5D:  # "]": no items
            pos += 1
            break
        first = False
        if typed_item is not None:
            end, item = _typed_item(buf, pos, typed_item)
            if end > 0:
                yield item
                pos = end
                if pos > 65536 and pos * 2 > len(buf.data):
                    pos = buf.drop(pos)
                pos += 1  # the "," the next item's start was found after
                continue
            if end == _NO_NEXT_ITEM:
                # Not the API server's layout (or the last item): from here on, the skipping reader only,
                # so a body without the marker is not searched ahead once per item.
                typed_item = None
        end = _item_end(buf, pos)
        if end < 0:  # not an item msgspec can read: the json module's reader takes over from here
            base = buf.dropped + pos
            for item in _items(buf.rest(pos), 0, fields):
                yield Unparsable(base + item.offset, item.reason) if isinstance(item, Unparsable) else item
            return
        yield bytes(memoryview(buf.data)[pos:end])  # one copy of the item; the view is gone at once
        pos = _skip_bytes(buf, end)
        separator = buf.data[pos] if pos >= 0 else None
        if separator == 0x2C:  # ","
            pos += 1
        elif separator == 0x5D:  # "]"
            pos += 1
            break
        else:
            raise ValueError(f"expected ',' or ']' at offset {buf.dropped + max(pos, 0)} of the LIST answer")
        if pos > 65536 and pos * 2 > len(buf.data):
            pos = buf.drop(pos)
    _tail(buf.rest(pos), 0, fields)


def _skip_bytes(buf: _Chunks, pos: int) -> int:
    """The position of the next non-blank byte at or after ``pos``, reading more as needed; -1 at the end."""
    data = buf.data
    while True:
        while pos < len(data) and data[pos] in _WS_BYTES:
            pos += 1
        if pos < len(data):
            return pos
        if not buf.more():
            return -1


def _typed_item(buf: _Chunks, pos: int, typed_item: Callable[[memoryview], Any]) -> tuple[int, Any]:
    """(end, typed object) of the item at ``pos`` when the next item starts right after it, else (_NO_NEXT_ITEM or
    _REFUSED, None).

    The slice up to a candidate end decodes only if it is exactly one JSON
    value; a value has one end, so a successful decode proves the boundary. A
    candidate inside the item (an array of objects that start with metadata)
    gives a truncated slice and the next candidate is tried; the last item,
    a bad one, or none in reach fall back to the skipping reader.
    """
    start = pos
    while True:
        found = buf.data.find(_NEXT_ITEM, start)
        if found < 0:
            start = max(pos, len(buf.data) - len(_NEXT_ITEM) + 1)  # the next one may straddle two chunks
            if len(buf.data) - pos > _AHEAD_LIMIT or not buf.more():
                return _NO_NEXT_ITEM, None
            continue
        with memoryview(buf.data) as data, data[pos:found + 1] as view:
            try:
                return found + 1, typed_item(view)
            except msgspec.DecodeError as exc:
                if not truncated(str(exc)):
                    return _REFUSED, None  # a whole item the Structs refuse: the tolerant path takes it
            except RecursionError:
                return _REFUSED, None
        start = found + 1


def _item_end(buf: _Chunks, pos: int) -> int:
    """Where the JSON value at ``pos`` ends, reading more of the answer as needed; -1 if msgspec cannot read it.

    msgspec skips the value (building nothing) and reports the first byte past it as trailing.
    """
    while True:
        view = memoryview(buf.data)[pos:]
        try:
            SKIPPING_DECODER.decode(view)
            message = ""  # the buffer ends right after a complete value: what follows is not read yet
        except msgspec.DecodeError as exc:
            message = str(exc)
        except RecursionError:
            return -1
        finally:
            view.release()
        end = trailing_end(message)
        if end is not None:
            return pos + end
        if message and not truncated(message):
            return -1  # malformed
        # Incomplete (or complete up to the buffer's end): read on, doubling what an item may span.
        if not buf.more(len(buf.data) + max(65536, len(buf.data) - pos)):
            return -1
