"""Tolerant field access for decoding Kubernetes objects from parsed JSON or YAML.

Decoding is total: a field of the wrong type becomes a recorded problem and
an empty value, never an exception, so one malformed object is still
reported. Only an object with no identity at all raises :class:`DecodeError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DecodeError", "FieldReader", "Requests", "NO_REQUESTS"]

Requests = Mapping[str, str]


class DecodeError(ValueError):
    """The object cannot be identified (a pod with no name and no uid, a node with no name, not an object)."""


_EMPTY: dict[str, Any] = {}
# Shared by every container that requests nothing; never mutated.
NO_REQUESTS: dict[str, str] = {}


class FieldReader:
    """Field access that records a problem instead of raising on a wrong type.

    A path arrives as parts and is joined only when something is wrong: this
    runs for every watch event, and formatting paths eagerly doubled its cost.
    """

    __slots__ = ("problems",)

    def __init__(self) -> None:
        self.problems: list[str] = []

    def mapping(self, obj: Any, *path: object) -> dict[str, Any]:
        # JSON and YAML decoders only build dicts; isinstance(dict) is several
        # times cheaper than the Mapping ABC on this hot path.
        if isinstance(obj, dict):
            return obj
        if obj is not None:
            self.problems.append(f"{''.join(map(str, path))} is not an object")
        return _EMPTY

    def sequence(self, obj: Any, *path: object) -> list[Any]:
        if isinstance(obj, list):
            return obj
        if obj is not None:
            self.problems.append(f"{''.join(map(str, path))} is not a list")
        return []

    def string(self, obj: Any, *path: object) -> str:
        if isinstance(obj, str):
            return obj
        if obj is not None:
            self.problems.append(f"{''.join(map(str, path))} is not a string")
        return ""

    def requests(self, obj: Any, *path: object) -> Requests:
        if not obj:
            return NO_REQUESTS
        raw = self.mapping(obj, *path)
        cpu, memory = raw.get("cpu"), raw.get("memory")
        if cpu.__class__ is str and memory.__class__ is str:
            return {"cpu": cpu, "memory": memory}
        out: dict[str, str] = {}
        for resource, value in (("cpu", cpu), ("memory", memory)):
            if value is None:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                # YAML dumps turn `cpu: 1` into a number; the API server would
                # have accepted it as the quantity "1".
                value = repr(value) if isinstance(value, float) else str(value)
            if isinstance(value, str):
                out[resource] = value
            else:
                self.problems.append(f"{''.join(map(str, path))}.{resource} is not a quantity string")
        return out or NO_REQUESTS
