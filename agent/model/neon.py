"""NeonVM annotations: the VM's usage and its overcommit factors.

Rules follow neon's patched cluster-autoscaler (neondatabase/autoscaling,
cluster-autoscaler/ca.patch): a parsable ``vm.neon.tech/usage`` replaces the
runner's requests, divided by ``vm.neon.tech/overcommit`` when that is
present; an overcommit annotation that does not parse disables the usage.
Unlike the patch, a usage object missing a field is rejected instead of read
as zero: an operator is better served by the pod's requests and a problem
report than by a silent 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agent.model.quantity import NANO, QuantityError, div_round_up, parse_quantity

__all__ = ["AnnotationError", "VmResources", "parse_vm_resources"]

# Larger than any annotation neonvm writes by orders of magnitude; refusing
# longer text bounds the JSON parser's work on hostile input.
_MAX_ANNOTATION = 4096


class AnnotationError(ValueError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class VmResources:
    """Nano-units; for factors, nano-units of 1 (so 2500m is 2.5x)."""

    cpu: int
    memory: int

    def divided_by(self, factors: "VmResources") -> "VmResources":
        # Rounded up to the next nano, the finest a Kubernetes quantity holds.
        return VmResources(div_round_up(self.cpu * NANO, factors.cpu), div_round_up(self.memory * NANO, factors.memory))


def parse_vm_resources(text: str, *, factors: bool = False) -> VmResources:
    """Parse ``{"cpu": <quantity>, "memory": <quantity>}``.

    With ``factors`` the values are multipliers and must be positive.
    """
    if len(text) > _MAX_ANNOTATION:
        raise AnnotationError("out_of_range", f"annotation longer than {_MAX_ANNOTATION} characters")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise AnnotationError("invalid_json", f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise AnnotationError("wrong_shape", f"expected a JSON object, got {type(data).__name__}")
    values = {}
    for field in ("cpu", "memory"):
        if field not in data:
            raise AnnotationError("missing_field", f"missing {field!r}")
        raw = data[field]
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
        if factors and value == 0:
            raise AnnotationError("zero_factor", f"{field}: overcommit factor must be positive, got {raw!r}")
        values[field] = value
    return VmResources(values["cpu"], values["memory"])
