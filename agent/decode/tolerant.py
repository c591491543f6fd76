"""Filling the Structs of ``spec`` from any parsed object, noting what does not fit instead of failing.

Driven by the Structs' own declarations (msgspec's type information), so the
tolerant path cannot drift from the fast one: a field the fast path reads is
read here too, by the same name, and both end in the same ``records``
function. A field of the wrong type becomes a problem (with its path) and
reads as absent; a list item that is not an object reads as an empty one, so
positions (and the names derived from them) are kept. Numbers in a quantity
map are read as the quantity the API server would have made of them (YAML
turns ``cpu: 1`` into a number).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

__all__ = ["fill", "labels"]

S = TypeVar("S", bound=msgspec.Struct)
# (value, path, problems) -> the field's value, or None when absent or unusable.
_Read = Callable[[Any, str, list[str]], Any]


def fill(cls: type[S], obj: Any, problems: list[str], path: str = "") -> S:
    """An instance of ``cls`` from a parsed object; a non-object is a problem and reads as an empty instance."""
    return _struct_reader(cls)(obj, path, problems)


def _string(value: Any, path: str, problems: list[str]) -> str | None:
    if isinstance(value, str):
        return value
    problems.append(f"{path} is not a string")
    return None


def _boolean(value: Any, path: str, problems: list[str]) -> bool | None:
    if isinstance(value, bool):
        return value
    problems.append(f"{path} is not a boolean")
    return None


def _integer(value: Any, path: str, problems: list[str]) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    problems.append(f"{path} is not an integer")
    return None


def _strings(value: Any, path: str, problems: list[str]) -> list[str] | None:
    if not isinstance(value, list):
        problems.append(f"{path} is not a list")
        return None
    out = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(item)
        else:
            problems.append(f"{path}[{i}] is not a string")
    return out


def _quantities(value: Any, path: str, problems: list[str]) -> dict[str, str] | None:
    if not isinstance(value, dict):
        problems.append(f"{path} is not an object")
        return None
    out = {}
    for key, quantity in value.items():
        if isinstance(quantity, (int, float)) and not isinstance(quantity, bool):
            quantity = repr(quantity) if isinstance(quantity, float) else str(quantity)
        if isinstance(quantity, str):
            out[str(key)] = quantity
        else:
            problems.append(f"{path}.{key} is not a quantity string")
    return out


def _labels(value: Any, path: str, problems: list[str]) -> dict[str, str] | None:
    """A label map: strings, numbers as YAML writes them, null (absent, as the fast path reads it)."""
    if not isinstance(value, dict):
        problems.append(f"{path} is not an object")
        return None
    out = {}
    for key, text in value.items():
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            text = str(text)
        if isinstance(text, str):
            out[str(key)] = text
        elif text is not None:
            problems.append(f"{path}.{key} is not a string")
    return out


def _undecoded(value: Any, path: str, problems: list[str]) -> msgspec.Raw:
    """A field kept as JSON text (spec.Undecoded): the parsed value written back, checked where it is decoded."""
    try:
        return msgspec.Raw(msgspec.json.encode(value))
    except (TypeError, ValueError, msgspec.EncodeError):
        problems.append(f"{path} is not JSON")
        return msgspec.Raw()


#: A label map read tolerantly (what records does with labels the fast path refused).
labels = _labels


def _list_of(read_item: _Read, empty: Callable[[], Any]) -> _Read:
    def read(value: Any, path: str, problems: list[str]) -> list | None:
        if not isinstance(value, list):
            problems.append(f"{path} is not a list")
            return None
        return [read_item(item, f"{path}[{i}]", problems) if item is not None else empty()
                for i, item in enumerate(value)]
    return read


def _reader(t: mi.Type) -> _Read:
    if isinstance(t, mi.UnionType):
        (inner,) = [member for member in t.types if not isinstance(member, mi.NoneType)]
        return _reader(inner)
    if isinstance(t, mi.StrType):
        return _string
    if isinstance(t, mi.RawType):
        return _undecoded
    if isinstance(t, mi.BoolType):
        return _boolean
    if isinstance(t, mi.IntType):
        return _integer
    if isinstance(t, mi.ListType) and isinstance(t.item_type, mi.StrType):
        return _strings
    if isinstance(t, mi.DictType) and isinstance(t.value_type, mi.StrType):
        return _quantities
    if (isinstance(t, mi.DictType) and isinstance(t.value_type, mi.UnionType)
            and {type(m) for m in t.value_type.types} == {mi.StrType, mi.NoneType}):
        return _labels
    if isinstance(t, mi.StructType):
        return _struct_reader(t.cls)
    if isinstance(t, mi.ListType) and isinstance(t.item_type, mi.StructType):
        return _list_of(_struct_reader(t.item_type.cls), t.item_type.cls)
    raise TypeError(f"no tolerant reader for {t!r}: declare it in agent.decode.tolerant")


@functools.cache
def _struct_reader(cls: type[S]) -> _Read:
    """One reader per Struct class, built once from its declared fields."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    # Field readers are resolved on first use: Structs nest, and a reader is only built when needed.
    fields = [(f.name, f.encode_name) for f in info.fields]
    types = {f.name: f.type for f in info.fields}

    @functools.cache
    def field_reader(name: str) -> _Read:
        return _reader(types[name])

    def read(value: Any, path: str, problems: list[str]) -> S:
        if not isinstance(value, dict):
            problems.append(f"{path or 'object'} is not an object")
            return cls()
        found = {}
        for name, key in fields:
            raw = value.get(key)
            if raw is not None:
                found[name] = field_reader(name)(raw, f"{path}.{key}" if path else key, problems)
        return cls(**found)

    return read
