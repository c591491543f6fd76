"""What neon's patched cluster-autoscaler makes of a NeonVM runner pod's annotations, computed as its Go code does.

neon's patch (``utils/kubernetes/listers.go`` ``updatePodRequestsFromNeonVMAnnotation``, on cluster-autoscaler
1.31.1) decodes ``vm.neon.tech/usage`` with Go's ``encoding/json`` into two ``resource.Quantity`` fields and
``vm.neon.tech/overcommit`` into two ``*resource.Quantity`` fields, then replaces ``containers[0]``'s requests with
exactly {cpu, memory}. The exported value reads the annotations more strictly (:mod:`agent.model.neon`); the
``neon`` release's verdict must be what the patch computes, so this module follows Go, k8s.io/apimachinery
v0.31.1 ``pkg/api/resource/quantity.go`` and ``encoding/json`` point by point:

* JSON: the whole text must be valid JSON (NaN/Infinity are not); ``null`` decodes to nothing set; any other
  non-object is an error; field names match case-insensitively (exact first), the last duplicate wins, unknown
  fields are ignored. Any error leaves the pod alone (its own requests).
* ``Quantity.UnmarshalJSON``: ``null`` is a zero quantity (for the overcommit's pointers: no factor); otherwise the
  raw value, its enclosing quotes stripped (escapes are not decoded) and trimmed, goes to ``ParseQuantity``, so a
  JSON number (``0.5``) is accepted and ``true`` or an object is an error. A missing usage field is zero.
* ``ParseQuantity`` keeps small values as an int64 with a power of ten and the rest as a big decimal rounded away
  from zero to the nano; ``MilliValue()``/``Value()`` then round up; past int64 they wrap or give 0 as Go's
  ``positiveScaleInt64`` and ``scaledValue`` do (:func:`scaled_value`). "+", "-" and "." parse as 0.
* Overcommit: ``MilliValue()*1000/factor.MilliValue()`` for cpu and ``Value()*1000/factor.MilliValue()`` for memory,
  int64 arithmetic (wrapping on overflow, truncating toward zero); a factor whose MilliValue is 0 divides by zero,
  a Go panic: the autoscaler would crash on that pod. A pod with no container panics the same way (index 0).

Pure; what it cannot model (an exponent beyond ±400, text longer than the agent reads) it says, and the caller
then uses the pod's own requests.
"""

from __future__ import annotations

import json
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType
from typing import NamedTuple

from agent.model.fields import MAX_ANNOTATION, Oversized
from agent.model.quantity import NANO

__all__ = ["GoQuantity", "NeonPatch", "GoValueError", "parse_go_quantity", "scaled_value", "neon_patch", "wrap_int64"]

_MAX_INT64 = 2**63 - 1
_WS = " \t\n\r"  # JSON's whitespace (Go and Python agree)
# unicode.IsSpace, which strings.TrimSpace uses (Python's str.strip also strips \x1c-\x1f: not Go's).
_GO_SPACE = " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000"
_DIGITS = "0123456789"
_DECIMAL = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_EXPONENT = 400  # beyond this the agent does not model Go's big-decimal arithmetic


class GoValueError(ValueError):
    """Go's decode fails (``modelled`` True), or the input is beyond what this module models (False)."""

    def __init__(self, message: str, *, modelled: bool = True) -> None:
        super().__init__(message)
        self.modelled = modelled


class GoQuantity(NamedTuple):
    """A resource.Quantity as ParseQuantity leaves it: ``unscaled * 10**exp10``, an int64Amount or (``dec``) an
    inf.Dec."""

    unscaled: int
    exp10: int
    dec: bool = False

    @property
    def nanos(self) -> int:
        """The exact value in nano-units (ParseQuantity never keeps anything finer)."""
        scaled = self.unscaled * 10**(self.exp10 + 9) if self.exp10 >= -9 else None
        assert scaled is not None, "ParseQuantity keeps at most nano precision"
        return scaled


_ZERO = GoQuantity(0, 0)


def wrap_int64(x: int) -> int:
    """int64 two's-complement wrap-around."""
    return (x + 2**63) % 2**64 - 2**63


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division: truncated toward zero, int64 wrap (MinInt64 / -1 is MinInt64)."""
    q = abs(a) // abs(b)
    return wrap_int64(q if (a < 0) == (b < 0) else -q)


def _low64(x: int) -> int:
    """big.Int.Int64(): the low 64 bits of |x|, negated for a negative x."""
    v = wrap_int64(abs(x) & (2**64 - 1))
    return wrap_int64(-v) if x < 0 else v


def _split(s: str) -> tuple[bool, str, str, str, str]:
    """parseQuantityString: (positive, value, num, denom, suffix); GoValueError for ErrFormatWrong."""
    positive, pos, end = True, 0, len(s)
    if end and s[0] in "+-":
        positive, pos = s[0] == "+", 1
    while True:  # leading zeros
        if pos >= end:
            return positive, "0", "0", "", ""
        if s[pos] != "0":
            break
        pos += 1
    i = pos
    while i < end and s[i] in _DIGITS:
        i += 1
    if i >= end:
        return positive, s, s[pos:] or "0", "", ""
    num, pos = s[pos:i] or "0", i
    denom = ""
    if s[pos] == ".":
        pos += 1
        i = pos
        while i < end and s[i] in _DIGITS:
            i += 1
        if i >= end:
            return positive, s, num, s[pos:], ""
        denom, pos = s[pos:i], i
    value, start = s[:pos], pos
    while pos < end and s[pos] in "eEinumkKMGTP":
        pos += 1
    if pos >= end:
        return positive, value, num, denom, s[start:]
    if s[pos] in "+-":
        pos += 1
    while pos < end and s[pos] in _DIGITS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, s[start:]
    raise GoValueError(f"quantities must match the regular expression (ParseQuantity of {s[:40]!r})")


def _interpret(suffix: str) -> tuple[int, int, str]:
    """quantitySuffixer.interpret: (base, exponent, format)."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], "DecimalSI"
    if suffix in _BINARY:
        return 2, _BINARY[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE":
        text = suffix[1:]
        body = text[1:] if text[:1] in "+-" else text
        if body and all(c in _DIGITS for c in body):
            parsed = int(text)
            if -2**63 <= parsed <= _MAX_INT64:
                return 10, (parsed + 2**31) % 2**32 - 2**31, "DecimalExponent"  # int32(parsed)
    raise GoValueError(f"unable to parse quantity's suffix ({suffix[:20]!r})")


def parse_go_quantity(text: str) -> GoQuantity:
    """resource.ParseQuantity; GoValueError where Go returns an error."""
    if not text:
        raise GoValueError("quantities must match the regular expression (empty)")
    if text == "0":
        return _ZERO
    positive, value, num, denom, suffix = _split(text)
    base, exponent, fmt = _interpret(suffix)
    if abs(exponent) > _MAX_EXPONENT:
        raise GoValueError(f"exponent {exponent} beyond what the agent models", modelled=False)
    mantissa, scale = 1, 0
    if fmt != "BinarySI":
        scale, precision = exponent, 18 - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        mantissa, precision = 1 << exponent, 15 - len(num) - exponent * 3 // 10 - 1
    else:
        precision = -1
    if precision >= 0:
        scale -= len(denom)
        if scale >= -9:
            result = int(num + denom) * mantissa
            if result <= _MAX_INT64:  # int64Multiply's overflow check (the big-decimal path otherwise)
                return GoQuantity(result if positive else -result, scale)
    whole, _, fraction = value.lstrip("+-").partition(".")
    if not (whole + fraction):
        raise GoValueError("quantities must match the regular expression (no digits)")
    amount = Fraction(int(whole + fraction or "0"), 10**len(fraction)) * Fraction(base) ** exponent
    if amount == 0:
        return GoQuantity(0, 0, True)
    nanos = -(-amount.numerator * NANO // amount.denominator)  # rounded up (away from zero: amount > 0 here)
    if fmt == "BinarySI" and nanos > _MAX_INT64 * NANO:
        return GoQuantity(_MAX_INT64 if positive else -_MAX_INT64, 0, True)
    return GoQuantity(nanos if positive else -nanos, -9, True)


def _negative_scale(base: int, scale: int) -> int:
    """negativeScaleInt64: divided by 10**scale, rounded away from zero."""
    value, fraction = base, False
    for _ in range(scale):
        if not fraction and abs(value) % 10:
            fraction = True
        value = _trunc_div(value, 10)
        if value == 0:
            return (1 if base > 0 else -1) if fraction else 0
    return value + (1 if base > 0 else -1) if fraction else value


def _positive_scale(base: int, scale: int) -> int:
    """positiveScaleInt64 as ``AsScaledInt64`` leaves it to ``ScaledValue`` (which ignores the ok flag): times
    10**scale; for a scale of 1, 2, 3, 6 or 9 one int64 multiplication, wrapping on overflow (MinInt64 gives 0), for
    any other scale ten at a time, 0 on the first overflow."""
    if scale == 0:
        return base
    if scale in (1, 2, 3, 6, 9):
        return 0 if base == -2**63 else wrap_int64(base * 10**scale)
    result = base * 10**scale
    return result if -2**63 <= result <= _MAX_INT64 else 0


def scaled_value(q: GoQuantity, exp10: int) -> int:
    """Quantity.ScaledValue(exp10): -3 is MilliValue(), 0 is Value()."""
    if not q.dec:
        if q.exp10 < exp10:
            return _negative_scale(q.unscaled, exp10 - q.exp10)
        return _positive_scale(q.unscaled, q.exp10 - exp10)
    dif = exp10 - q.exp10  # scaledValue(unscaled, scale, newScale): dif = scale - newScale
    if dif == 0:
        return _low64(q.unscaled)
    if dif < 0:
        # int64(math.Pow10(-dif)): past 10**18 the float does not fit, and amd64 converts it to MinInt64.
        return wrap_int64(_low64(q.unscaled) * (10**-dif if -dif <= 18 else -2**63))
    divisor = 10**dif
    if q.unscaled < _MAX_INT64 and dif < 19:
        u = _low64(q.unscaled)
        result = _trunc_div(u, divisor)
        return wrap_int64(result + 1) if u - result * divisor else result
    quotient, remainder = divmod(q.unscaled, divisor)  # big.Int.DivMod: Euclidean
    return wrap_int64(_low64(quotient) + 1) if remainder else _low64(quotient)


def _go_trim(text: str) -> str:
    return text.strip(_GO_SPACE)


def _reject(constant: str) -> None:
    raise ValueError(f"invalid character in {constant!r}")


# Numbers are kept as text: Go validates them without converting, so no digit limit applies.
_DECODER = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=_reject)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _struct_fields(text: str, names: tuple[str, ...]) -> list[tuple[str, str]]:
    """json.Unmarshal into a struct with fields ``names``: (field, raw JSON text) of each member that sets one, in
    order (each is decoded in turn; the last wins)."""
    try:
        _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise GoValueError(f"not JSON ({exc})") from None
    i = _skip(text, 0)
    if text.startswith("null", i):
        return []
    if text[i] != "{":
        raise GoValueError("cannot unmarshal a JSON value that is not an object into a struct")
    fields: list[tuple[str, str]] = []
    i = _skip(text, i + 1)
    while text[i] != "}":
        key, i = _DECODER.raw_decode(text, i)  # a member's name: a JSON string, escapes decoded
        i = _skip(text, _skip(text, i) + 1)  # past ':'
        _, end = _DECODER.raw_decode(text, i)
        # Exact match first, then Go's case folding, which for these ASCII names matches only ASCII keys.
        name = key if key in names else next((n for n in names if key.isascii() and key.lower() == n), None)
        if name is not None:
            fields.append((name, text[i:end]))
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
    return fields


def _decode(text: str | Oversized, name: str) -> dict[str, GoQuantity | None]:
    """The struct's fields as decoded: a field absent from the dict was never set; None is a null (a nil pointer,
    or for a value field the zero quantity)."""
    decoded: dict[str, GoQuantity | None] = {}
    for field, raw in _struct_fields(_text(text, name), ("cpu", "memory")):
        decoded[field] = _quantity(raw, field)
    return decoded


def _quantity(raw: str, field: str) -> GoQuantity | None:
    """Quantity.UnmarshalJSON of ``raw``; None for null."""
    if raw == "null":
        return None
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1]
    try:
        return parse_go_quantity(_go_trim(raw))
    except GoValueError as exc:
        raise GoValueError(f"{field}: {exc}", modelled=exc.modelled) from None


class NeonPatch(NamedTuple):
    """What the patch does to one pod: ``requests`` replaces containers[0]'s (None: pod left alone); ``crash`` names
    the Go panic that would stop the autoscaler ("" if none); ``note`` says why, for people."""

    requests: MappingProxyType[str, int] | None
    crash: str
    note: str
    # ``requests`` as the Go quantities the patch sets (their int64-or-big-decimal form decides a sum's MilliValue()).
    quantities: MappingProxyType[str, GoQuantity] | None = None


def _text(annotation: str | Oversized, name: str) -> str:
    if isinstance(annotation, Oversized) or len(annotation) > MAX_ANNOTATION:
        raise GoValueError(f"{name} longer than {MAX_ANNOTATION} characters: not read", modelled=False)
    return annotation


@lru_cache(maxsize=256)
def neon_patch(usage: str | Oversized | None, overcommit: str | Oversized | None, *,
               has_containers: bool = True) -> NeonPatch:
    """updatePodRequestsFromNeonVMAnnotation on a pod with these two annotations (None: absent). Cached: the same
    annotations come again with every verdict on the VM's node, and a node's VMs share few sizes."""
    if usage is None:
        return NeonPatch(None, "", "")
    try:
        fields = _decode(usage, "vm.neon.tech/usage")
    except GoValueError as exc:
        how = "leaves the pod alone" if exc.modelled else "is not modelled here"
        return NeonPatch(None, "", f"vm.neon.tech/usage: {exc}; neon's autoscaler {how}")
    cpu, memory = fields.get("cpu") or _ZERO, fields.get("memory") or _ZERO
    cpu_nanos, memory_nanos = cpu.nanos, memory.nanos
    note = "vm.neon.tech/usage applied"
    if overcommit is not None:
        try:
            factors = _decode(overcommit, "vm.neon.tech/overcommit")
        except GoValueError as exc:
            how = "leaves the pod alone (usage not applied)" if exc.modelled else "is not modelled here"
            return NeonPatch(None, "", f"vm.neon.tech/overcommit: {exc}; neon's autoscaler {how}")
        cpu_factor, memory_factor = factors.get("cpu"), factors.get("memory")
        for factor, which in ((cpu_factor, "cpu"), (memory_factor, "memory")):
            if factor is not None and scaled_value(factor, -3) == 0:
                return NeonPatch(None, f"vm.neon.tech/overcommit {which} factor has MilliValue 0: integer divide by "
                                       "zero, a Go panic in neon's autoscaler", "")
        if cpu_factor is not None:  # resource.NewMilliQuantity: an int64 of milli-units
            cpu = GoQuantity(_trunc_div(wrap_int64(scaled_value(cpu, -3) * 1000), scaled_value(cpu_factor, -3)), -3)
            cpu_nanos = cpu.nanos
        if memory_factor is not None:  # resource.NewQuantity: an int64 of units
            memory = GoQuantity(_trunc_div(wrap_int64(scaled_value(memory, 0) * 1000),
                                           scaled_value(memory_factor, -3)), 0)
            memory_nanos = memory.nanos
        note += " with vm.neon.tech/overcommit (integer division, truncated)"
    if not has_containers:
        return NeonPatch(None, "pod has no container: index out of range on containers[0], a Go panic in neon's "
                               "autoscaler", "")
    return NeonPatch(MappingProxyType({"cpu": cpu_nanos, "memory": memory_nanos}), "", note,
                     MappingProxyType({"cpu": cpu, "memory": memory}))
