"""Request sums as the cluster-autoscaler's ``resource.Quantity`` holds them, for ``MilliValue()`` past int64.

The autoscaler sums a node's pod requests with ``Quantity.Add`` (simulator/utilization/info.go, through the
release's ``PodRequests`` helper: ``addResourceList``, ``maxResourceList``) and divides their ``MilliValue()``s as
float64. The value of every sum is exact (k8s.io/apimachinery ``pkg/api/resource``, v0.31.1 and v0.36.2 alike): an
``int64Amount`` (an int64 times a power of ten) while the sum fits, else an ``inf.Dec``. But ``MilliValue()`` returns
an int64: past 2**63 - 1 milli-units it is what :func:`~agent.model.neon_patch.scaled_value` computes, and that
depends on the form the sum ended in (an inf.Dec, or an int64Amount whose power of ten is -2..0, 3 or 6: the exact
value wrapped to 64 bits; an int64Amount at another power of ten: 0). So :class:`GoAmount` carries the exact value in
nano-units, as everywhere in the agent, together with that form, and adds as ``Quantity.Add`` does.

Used only where a node's sum passes int64 in milli-units: below that ``MilliValue()`` is exact whatever the form.
"""

from __future__ import annotations

from typing import Any

from agent.model.neon_patch import GoQuantity, GoValueError, parse_go_quantity, scaled_value
from agent.model.quantity import parse_quantity

__all__ = ["GoAmount", "GoText", "go_amount", "go_text", "as_go_amount", "milli_value", "compared", "INT64_MAX"]

INT64_MAX = 2**63 - 1


def _fits(x: int) -> bool:
    return -2**63 <= x <= INT64_MAX


def _rescale_fits(unscaled: int, by: int) -> bool:
    """positiveScaleInt64's ok: times 10**by within int64 (MinInt64 never, unless not scaled)."""
    return by == 0 or (unscaled != -2**63 and _fits(unscaled * 10**by))


class GoAmount(int):
    """An exact quantity in nano-units (an ``int``) that also knows its Go form: ``dec`` (an inf.Dec) or an
    int64Amount, and ``exp10``, the power of ten of its unscaled integer (for an inf.Dec, minus its scale).

    ``+`` is ``Quantity.Add``; comparisons are ``Quantity.Cmp`` (exact, as int's); a plain int in a sum (the ``0``
    a missing resource reads as) is the zero Quantity."""

    dec: bool
    exp10: int

    def __new__(cls, nanos: int, *, dec: bool, exp10: int) -> GoAmount:
        self = super().__new__(cls, nanos)
        self.dec, self.exp10 = dec, exp10
        return self

    @property
    def unscaled(self) -> int:
        return int(self) // 10**(self.exp10 + 9)

    def go_quantity(self) -> GoQuantity:
        return GoQuantity(self.unscaled, self.exp10, self.dec)

    def __add__(self, other: Any) -> GoAmount:
        if not isinstance(other, int):
            return NotImplemented
        return _add(self, as_go_amount(other))

    def __radd__(self, other: Any) -> GoAmount:
        if not isinstance(other, int):
            return NotImplemented
        return _add(as_go_amount(other), self)

    def __repr__(self) -> str:
        return f"GoAmount({int(self)}, dec={self.dec}, exp10={self.exp10})"


def compared(q: int, y: int) -> int:
    """``q`` as ``q.Cmp(y)`` leaves it: Cmp reads both as inf.Dec when either is one, and ``AsDec`` turns the
    receiver itself into an inf.Dec at its own power of ten. ``maxResourceList`` compares the new list's copy and
    keeps that copy when it is larger, so the kept maximum is an inf.Dec (whose ``MilliValue()`` wraps where an
    int64Amount's gives 0) whenever the value it beat was one. Plain ints (no Go form) are returned as they are."""
    if isinstance(q, GoAmount) and not q.dec and isinstance(y, GoAmount) and y.dec:
        return GoAmount(int(q), dec=True, exp10=q.exp10)
    return q


def _add(q: GoAmount, y: GoAmount) -> GoAmount:
    """``q.Add(y)``: int64Amount.Add while both are int64Amounts and nothing overflows, else inf.Dec.Add (the larger
    scale, i.e. the smaller power of ten; a zero int64Amount becomes an inf.Dec at its own power of ten)."""
    if not q.dec and not y.dec:
        if y.unscaled == 0:
            return q
        if q.unscaled == 0:
            return y
        low, high = (q, y) if q.exp10 <= y.exp10 else (y, q)
        if _rescale_fits(high.unscaled, high.exp10 - low.exp10) and _fits((int(q) + int(y)) // 10**(low.exp10 + 9)):
            return GoAmount(int(q) + int(y), dec=False, exp10=low.exp10)
    return GoAmount(int(q) + int(y), dec=True, exp10=min(q.exp10, y.exp10))


def as_go_amount(value: int) -> GoAmount:
    """``value`` as a GoAmount: itself if it is one; 0 as the zero Quantity; another plain int of nano-units as an
    int64Amount of nano-units where that fits (what ``NewScaledQuantity(n, Nano)`` holds), else an inf.Dec."""
    if isinstance(value, GoAmount):
        return value
    if value == 0:
        return GoAmount(0, dec=False, exp10=0)
    return GoAmount(value, dec=not _fits(value), exp10=-9)


class GoText(str):
    """A sum's quantity text in nano-units ("1500000000n" is 1.5: exact, read back by parse_quantity to the same
    number) that also holds the :class:`GoAmount` Go's running sum ended in, which ``go_amount`` returns.

    What a sum folded into one line (agent.model.container_bound) is written as: no text parses to every form a Go
    sum can end in (an int64Amount of 19 digits, an inf.Dec at a power of ten other than -9), and the form decides
    ``MilliValue()`` past int64, so the folded line keeps it. Equal to, and hashed as, its text."""

    amount: GoAmount


def go_text(value: int) -> str:
    """``value`` (a GoAmount, or nano-units read as :func:`as_go_amount` does) as a quantity text that keeps its Go
    form (:class:`GoText`)."""
    amount = as_go_amount(value)
    text = GoText(f"{int(amount)}n")
    text.amount = amount
    return text


def go_amount(text: str) -> GoAmount:
    """The quantity ``text`` as the agent reads it (:func:`~agent.model.quantity.parse_quantity`, whose errors it
    raises), in the form ``resource.ParseQuantity`` leaves it; a :class:`GoText`'s own form."""
    if text.__class__ is GoText:
        return text.amount
    nanos = parse_quantity(text)
    try:
        form = parse_go_quantity(text)
    except GoValueError:  # the agent's grammar accepted it: Go's did too, so this is not reached
        return GoAmount(nanos, dec=True, exp10=-9)
    return from_go_quantity(form) if form.exp10 >= -9 and form.nanos == nanos else GoAmount(nanos, dec=True,
                                                                                               exp10=-9)


def from_go_quantity(q: GoQuantity) -> GoAmount:
    return GoAmount(q.nanos, dec=q.dec, exp10=q.exp10)


def milli_value(value: int) -> int:
    """``Quantity.MilliValue()`` of a sum: Go's int64 result (wrapped, or 0, past int64; see the module)."""
    return scaled_value(as_go_amount(value).go_quantity(), -3)
