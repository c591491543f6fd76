"""Reading pods, Nodes and PodDisruptionBudgets from files: kubectl dumps, captures of watch streams, YAML.

Accepted, in any mix: a Pod, a PodList or ``kubectl get -o json`` List (``kubectl get nodes,pods,pdb -A -o json``
holds all three kinds), a PodDisruptionBudget or PodDisruptionBudgetList, the controller objects the autoscaler
looks pods' owners up in (``kubectl get nodes,pods,pdb,rs,jobs,sts,rc,ds -A -o json``), and
watch events ``{"type": ..., "object": ...}`` as printed by
``kubectl get pods --watch --output-watch-events -o json`` (concatenated,
pretty-printed JSON values) or as newline-delimited JSON; or the same as
YAML documents.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import yaml

from agent.decode.reader import Skipped
from agent.model.controllers import CONTROLLER_KINDS, ControllerRecord
from agent.model.node import NodeRecord
from agent.model.pdb import PdbRecord
from agent.model.pod import PodRecord

__all__ = ["ClusterObjects", "DumpError", "Change", "LISTED", "changes", "decode_text", "parse_reason",
           "read_documents", "objects_in", "pods_of", "nodes_of", "pdbs_of", "controllers_of", "PDB_KIND"]

PDB_KIND = "PodDisruptionBudget"

# A List document: its objects are the whole state at that point (a relist), not one change.
LISTED = "LISTED"


class ClusterObjects(NamedTuple):
    """The pods, Nodes and PodDisruptionBudgets ``explain`` reads at once, from a dump or from one LIST of each."""

    pods: list[PodRecord]
    nodes: list[NodeRecord]
    skipped: list[Skipped]  # objects that could not be identified, with why
    # None: the PDBs are unknown (a dump holding none, not even an empty PodDisruptionBudgetList; a LIST refused or
    # not asked for), as for an agent without the PDB watch; the verdict then says so.
    pdbs: list[PdbRecord] | None = None
    pdbs_error: str = ""  # why they could not be listed
    # None: the controller objects are unknown (a dump holding none of the five kinds, a LIST refused), as for the
    # agent in its pod; the replicacount rule then does not run and the verdict says it cannot see them.
    controllers: list[ControllerRecord] | None = None
    controllers_error: str = ""  # why they could not be listed


class DumpError(ValueError):
    """The input is neither JSON nor YAML of Kubernetes objects; the message is one line, for ``where: message``."""


def decode_text(data: bytes) -> str:
    """A file's bytes as text: JSON and YAML files are UTF-8, so anything else (a binary, a compressed capture) is
    a DumpError saying where the first byte that is not UTF-8 sits, not a codec's message."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DumpError(f"not text: byte 0x{data[exc.start]:02x} at line {line}, offset {exc.start} is not UTF-8 "
                        "(binary or compressed?); expected JSON or YAML") from None


class _Mark(NamedTuple):
    """Zero-based, as yaml's Mark: for a ReaderError, which carries only an offset."""

    line: int
    column: int


def parse_reason(exc: Exception, text: str = "") -> str:
    """A JSON or YAML parser's complaint on one line: where (line, column) and the first line of why, without the
    excerpt and caret PyYAML adds on the lines after."""
    if isinstance(exc, json.JSONDecodeError):
        why = exc.msg.removesuffix(" at").removesuffix(" starting")  # "Unterminated string starting at" (line ...)
        ends = exc.msg.startswith("Unterminated string") or exc.pos >= len(exc.doc.rstrip())
        return f"line {exc.lineno}, column {exc.colno}: {why}" + (" (the text ends there: truncated?)" if ends else "")
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem, context = getattr(exc, "problem", None), getattr(exc, "context", None)
    problem = f"{problem} ({context})" if problem and context else problem or context
    position = getattr(exc, "position", None)
    if mark is None and isinstance(position, int):  # yaml's ReaderError: a bad character
        line = text.count("\n", 0, position)
        mark = _Mark(line, position - (text.rfind("\n", 0, position) + 1))
    why = problem or (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {why}" if mark is not None else why


def _json_values(text: str) -> Iterator[Any]:
    decoder = json.JSONDecoder()
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return
        value, pos = decoder.raw_decode(text, pos)
        yield value


def read_documents(text: str) -> list[Any]:
    """Every top-level document in ``text`` (JSON values first, else YAML)."""
    stripped = text.lstrip()
    if not stripped:
        return []
    if stripped[0] in "{[":
        try:
            return list(_json_values(text))
        except json.JSONDecodeError as exc:
            json_error: json.JSONDecodeError | None = exc
    else:
        json_error = None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        # Text that starts as JSON was meant as JSON: its parser's reason is the one that helps (a truncated file).
        reason = f"not JSON: {parse_reason(json_error)}" if json_error else f"not YAML: {parse_reason(exc, text)}"
        raise DumpError(reason) from None
    return docs


def objects_in(document: Any) -> Iterator[Any]:
    """Each value one document holds, in order: a List's items and a watch event's object unwrapped (nested
    too), anything else as it is (an object, or a value that is none)."""
    if isinstance(document, dict):
        if isinstance(document.get("items"), list):
            for item in document["items"]:
                yield from objects_in(item)
            return
        if "type" in document and "object" in document:
            yield from objects_in(document["object"])
            return
    yield document


def _item_kind(document: Any) -> str | None:
    """The kind of a typed List's items, which the API server leaves out of each item (PodDisruptionBudgetList:
    PodDisruptionBudget); None for anything else, whose items say their kind (``kubectl get -o json``) or are pods."""
    kind = document.get("kind") if isinstance(document, dict) else None
    return kind[:-4] if isinstance(kind, str) and kind.endswith("List") and kind != "List" else None


def _of_kind(document: Any, kind: str) -> list[Any]:
    implied = _item_kind(document)
    return [obj for obj in objects_in(document) if isinstance(obj, dict) and obj.get("kind", implied) == kind]


def pods_of(document: Any) -> list[Any]:
    """The pod objects in one document: a Pod, a List's items, or a watch event's object (an object without a
    kind is a pod, unless a typed List says otherwise)."""
    implied = _item_kind(document) or "Pod"
    pods = []
    for obj in objects_in(document):
        if not isinstance(obj, dict):
            raise DumpError(f"expected a Kubernetes object, got {type(obj).__name__}")
        if obj.get("kind", implied) in (None, "Pod"):
            pods.append(obj)
    return pods


def nodes_of(document: Any) -> list[Any]:
    """The Node objects in one document (a List may mix kinds, as `kubectl get nodes,pods -o json` does)."""
    return _of_kind(document, "Node")


def pdbs_of(document: Any) -> list[Any]:
    """The PodDisruptionBudget objects in one document."""
    return _of_kind(document, PDB_KIND)


def controllers_of(document: Any) -> list[tuple[str, Any]]:
    """(kind, object) of each ReplicationController, Job, ReplicaSet, StatefulSet and DaemonSet in one document."""
    return [(kind, obj) for kind in CONTROLLER_KINDS for obj in _of_kind(document, kind)]


class Change(NamedTuple):
    """One document as a change: ``LISTED`` (a List) or a watch event type (a bare object counts as ADDED)."""

    type: str
    pods: list[Any]
    nodes: list[Any]
    resource_version: str
    pdbs: list[Any] = []  # never mutated: each change builds its own lists
    # A List whose objects are all PodDisruptionBudgets (typed PodDisruptionBudgetList, or only PDBs in it): the
    # whole set of PDBs, and nothing about pods or Nodes.
    pdbs_only: bool = False
    controllers: list[tuple[str, Any]] = []  # (kind, object); never mutated


def changes(documents: Iterable[Any]) -> Iterator[Change]:
    """The documents of a capture or dump, in order, each with the pod and Node objects it holds.

    The one reading of documents that replay and ``explain`` share: replay
    turns each change into the pipeline's events, ``explain`` applies them to
    a set of objects. Objects are still raw; the decode reader makes records.
    """
    for doc in documents:
        if isinstance(doc, dict) and isinstance(doc.get("items"), list):
            meta = doc.get("metadata")
            rv = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
            pods, nodes, pdbs = pods_of(doc), nodes_of(doc), pdbs_of(doc)
            only = _item_kind(doc) == PDB_KIND or bool(pdbs and not pods and not nodes)
            yield Change(LISTED, pods, nodes, rv, pdbs, only, controllers_of(doc))
            continue
        kind = doc.get("type", "ADDED") if isinstance(doc, dict) and "object" in doc else "ADDED"
        yield Change(str(kind), pods_of(doc), nodes_of(doc), "", pdbs_of(doc), controllers=controllers_of(doc))
