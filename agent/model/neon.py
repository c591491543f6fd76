"""NeonVM annotations: the VM's usage and its overcommit factors.

Rules follow neon's patched cluster-autoscaler (neondatabase/autoscaling,
cluster-autoscaler/ca.patch): a parsable ``vm.neon.tech/usage`` replaces the
runner's requests, divided by ``vm.neon.tech/overcommit`` when that is
present; an overcommit annotation that does not parse disables the usage.
Both overcommit factors are optional there (pointers): a factor that is
missing (or null) leaves that dimension undivided, so ``{"cpu":"2"}`` halves
the CPU and keeps the memory. Unlike the patch, a usage object missing a
field is rejected instead of read as zero: an operator is better served by
the pod's requests and a problem report than by a silent 0.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from agent.model.fields import MAX_ANNOTATION, Oversized, bounded
from agent.model.quantity import NANO, QuantityError, div_round_up, parse_quantity

__all__ = ["AnnotationError", "VmResources", "Overcommit", "parse_vm_usage", "parse_overcommit"]

_FIELDS = ("cpu", "memory")


class AnnotationError(ValueError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Overcommit(msgspec.Struct, frozen=True):
    """Factors in nano-units of 1 (so 2500m is 2.5x); None leaves that dimension undivided."""

    cpu: int | None
    memory: int | None


class VmResources(msgspec.Struct, frozen=True):
    """Nano-units of cores and bytes."""

    cpu: int
    memory: int

    def divided_by(self, factors: Overcommit) -> VmResources:
        # Rounded up to the next nano, the finest a Kubernetes quantity holds.
        return VmResources(_divide(self.cpu, factors.cpu), _divide(self.memory, factors.memory))


def _divide(value: int, factor: int | None) -> int:
    return value if factor is None else div_round_up(value * NANO, factor)


def _object(text: str | Oversized) -> dict[str, Any]:
    # MAX_ANNOTATION is larger than any annotation neonvm writes by orders of magnitude; refusing longer text bounds
    # the JSON parser's work on hostile input. Decoding already replaced such text by its length and an excerpt.
    if isinstance(text, Oversized) or len(text) > MAX_ANNOTATION:
        found = text if isinstance(text, Oversized) else bounded(text)
        raise AnnotationError("out_of_range", f"annotation longer than {MAX_ANNOTATION} characters ({found})")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise AnnotationError("invalid_json", f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise AnnotationError("wrong_shape", f"expected a JSON object, got {type(data).__name__}")
    return data


def _quantity(field: str, raw: Any) -> int:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raise AnnotationError("wrong_shape", f"{field} must be a quantity string, got the number {raw!r}")
    if not isinstance(raw, str):
        raise AnnotationError("wrong_shape", f"{field} must be a quantity string, got {type(raw).__name__}")
    try:
        value = parse_quantity(raw)
    except QuantityError as exc:
        raise AnnotationError(exc.reason, f"{field}: {exc}") from None
    if value < 0:
        raise AnnotationError("negative_quantity", f"{field}: negative quantity {raw!r}")
    return value


def parse_vm_usage(text: str | Oversized) -> VmResources:
    """Parse ``{"cpu": <quantity>, "memory": <quantity>}``; both fields are required."""
    data = _object(text)
    for field in _FIELDS:
        if field not in data:
            raise AnnotationError("missing_field", f"missing {field!r}")
    return VmResources(_quantity("cpu", data["cpu"]), _quantity("memory", data["memory"]))


def parse_overcommit(text: str | Oversized) -> Overcommit:
    """Parse ``{"cpu": <factor>, "memory": <factor>}``; each factor optional, present ones positive."""
    data = _object(text)
    factors: dict[str, int | None] = {}
    for field in _FIELDS:
        raw = data.get(field)
        if raw is None:
            factors[field] = None
            continue
        value = _quantity(field, raw)
        if value == 0:
            raise AnnotationError("zero_factor", f"{field}: overcommit factor must be positive, got {raw!r}")
        factors[field] = value
    return Overcommit(factors["cpu"], factors["memory"])
