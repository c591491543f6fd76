"""API objects -> records: the one reader every source uses (the reflector, ``explain --live``, replay, dumps).

An object arrives as JSON bytes (a LIST item), as a Struct (a watch line the
fast path decoded) or already parsed (a capture, a dump, YAML). Each becomes
a record, or a :class:`Skipped` saying why it cannot be one, so a caller
never needs its own try/except to keep the objects around a bad one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Generic, NamedTuple, TypeVar

import msgspec

from agent.decode import records, spec
from agent.decode.tolerant import fill
from agent.model.controllers import CONTROLLER_KINDS, ControllerRecord
from agent.model.fields import DecodeError
from agent.model.node import NODES, NodeRecord
from agent.model.pdb import PDBS, PdbRecord
from agent.model.pod import PODS, PodRecord

__all__ = ["ObjectKind", "POD", "NODE", "PDB", "CONTROLLERS", "Skipped", "Unparsable", "loads", "WATCH_OBJECT_EVENTS"]

R = TypeVar("R")
_BYTES = (bytes, bytearray, memoryview)
# The watch event types that carry an object the fast path may decode.
WATCH_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})


class Unparsable(NamedTuple):
    """A LIST item that is not JSON the parser can read (bad syntax, nesting past its limit).

    The LIST reader yields it in the item's place so the caller can count it; the items around it are kept.
    """

    offset: int
    reason: str


class Skipped(NamedTuple):
    """An object that cannot become a record, and why (for a log line and the skipped counter)."""

    resource: str
    reason: str

    def __str__(self) -> str:
        return f"{self.resource}: {self.reason}"


def loads(data: bytes | bytearray | memoryview) -> Any:
    """``json.loads`` of bytes the API server sent, reading a bad UTF-8 byte as a replacement character.

    The API server only sends UTF-8; one bad byte in one string must not cost the object.
    """
    if isinstance(data, memoryview):
        data = bytes(data)  # json.loads takes str, bytes or bytearray: a memoryview was a TypeError
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        return json.loads(bytes(data).decode("utf-8", errors="replace"))


class ObjectKind(Generic[R]):
    """One kind of object (pods, Nodes): its Structs, their decoders, and how they become records."""

    __slots__ = ("resource", "struct", "_build", "_item", "_line")

    def __init__(self, *, resource: str, struct: type[msgspec.Struct], event: type[msgspec.Struct],
                 build: Callable[[Any, tuple[str, ...]], R]) -> None:
        self.resource = resource
        self.struct = struct
        self._build = build
        self._item = msgspec.json.Decoder(struct)
        self._line: msgspec.json.Decoder[Any] = msgspec.json.Decoder(event)  # each kind's event Struct

    def record(self, obj: Any) -> R:
        """The record of one object: JSON bytes, a Struct of this kind, or a parsed object.

        The fast path first; what it refuses is read by the tolerant one.
        Raises DecodeError for an object nobody could identify, ValueError
        (or RecursionError) for bytes that are not JSON.
        """
        if obj.__class__ is self.struct:
            return self._build(obj, ())
        if isinstance(obj, _BYTES):
            try:
                return self._build(self._item.decode(obj if obj.__class__ is bytes else bytes(obj)), ())
            except (msgspec.DecodeError, RecursionError):  # ValidationError included
                obj = loads(obj)
        elif isinstance(obj, dict):
            try:
                # Written back and decoded, not msgspec.convert: the Structs keep some fields as JSON text
                # (spec.Undecoded), which only the JSON decoder fills.
                return self._build(self._item.decode(msgspec.json.encode(obj)), ())
            except (msgspec.DecodeError, msgspec.EncodeError, TypeError, RecursionError):
                pass
        return self.tolerant(obj)

    def tolerant(self, obj: Any) -> R:
        """The record of a parsed object by the tolerant path alone (what the fast path refused)."""
        if not isinstance(obj, dict):
            raise DecodeError(f"{self.resource[:-1]} is not an object but {type(obj).__name__}")
        problems: list[str] = []
        return self._build(fill(self.struct, obj, problems), tuple(problems))

    def list_item(self, data: bytes | memoryview) -> msgspec.Struct:
        """The Struct of exactly one LIST item's bytes; msgspec.DecodeError otherwise (the LIST reader's test).

        A view is copied first: the fields kept as JSON text (spec.Undecoded) refer to the buffer they were decoded
        from, which the LIST reader reuses."""
        return self._item.decode(data if data.__class__ is bytes else bytes(data))

    def watch_line(self, line: bytes) -> tuple[str, msgspec.Struct] | None:
        """(type, Struct) of an ADDED, MODIFIED or DELETED watch line the fast path accepts, else None.

        None sends the line down the tolerant path (bookmarks, ERROR events, odd or broken lines).
        """
        try:
            event = self._line.decode(line)
        except (msgspec.DecodeError, RecursionError):
            return None
        return (event.type, event.object) if event.type in WATCH_OBJECT_EVENTS else None

    def decode(self, obj: Any) -> R | Skipped:
        """The record, or why there is none: the one skip-and-decode step of every reader."""
        if isinstance(obj, Unparsable):
            return Skipped(self.resource, f"unparsable item at offset {obj.offset} of the LIST ({obj.reason})")
        try:
            return self.record(obj)
        except (ValueError, RecursionError) as exc:  # DecodeError, or bytes that are not JSON
            return Skipped(self.resource, str(exc) or type(exc).__name__)

    def decode_all(self, objects: Iterable[Any]) -> tuple[list[R], list[Skipped]]:
        """Every decodable object in order, and what was skipped."""
        found: list[R] = []
        skipped: list[Skipped] = []
        for obj in objects:
            result = self.decode(obj)
            if isinstance(result, Skipped):
                skipped.append(result)
            else:
                found.append(result)
        return found, skipped


POD: ObjectKind[PodRecord] = ObjectKind(resource=PODS, struct=spec.Pod, event=spec.PodEvent, build=records.pod_of)
NODE: ObjectKind[NodeRecord] = ObjectKind(resource=NODES, struct=spec.Node, event=spec.NodeEvent,
                                          build=records.node_of)
PDB: ObjectKind[PdbRecord] = ObjectKind(resource=PDBS, struct=spec.Pdb, event=spec.PdbEvent, build=records.pdb_of)



def _controller_kind(kind: str) -> ObjectKind[ControllerRecord]:
    return ObjectKind(resource=kind.lower() + "s", struct=spec.Controller, event=spec.ControllerEvent,
                      build=lambda d, problems: records.controller_of(d, kind, problems))


#: One reader per controller kind the autoscaler's replicacount rule looks up (a LIST's items do not say their kind).
CONTROLLERS: dict[str, ObjectKind[ControllerRecord]] = {kind: _controller_kind(kind) for kind in CONTROLLER_KINDS}
