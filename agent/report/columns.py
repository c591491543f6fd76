"""Text columns that fit a terminal: flexible columns shrink, long cells end in an ellipsis.

``width=None`` is ``-o wide``: every cell whole, columns as wide as their content.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

__all__ = ["Column", "fit", "row", "clip", "ELLIPSIS", "GAP"]

ELLIPSIS = "…"
GAP = "  "


class Column(msgspec.Struct, frozen=True):
    title: str
    right: bool = False  # numbers align right
    shrink_to: int | None = None  # flexible: may narrow to this many characters; None keeps it whole
    shrink_first: int = 0  # among flexible columns, lower numbers give up their width first


def clip(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS if width > 0 else ""


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> list[int]:
    """Column widths: natural (title or widest cell), then flexible columns narrowed, in their
    ``shrink_first`` order, until the row fits ``width``."""
    widths = [max([len(c.title), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    if width is None:
        return widths
    excess = sum(widths) + len(GAP) * (len(columns) - 1) - width
    flexible = sorted((c.shrink_first, i, c.shrink_to) for i, c in enumerate(columns) if c.shrink_to is not None)
    for _, i, narrowest in flexible:
        if excess <= 0:
            break
        give = min(excess, max(0, widths[i] - narrowest))
        widths[i] -= give
        excess -= give
    return widths


def row(columns: Sequence[Column], widths: Sequence[int], cells: Sequence[str]) -> str:
    parts = []
    for c, w, text in zip(columns, widths, cells, strict=False):  # a short row leaves its last columns out
        text = clip(text, w)
        parts.append(text.rjust(w) if c.right else text.ljust(w))
    return GAP.join(parts).rstrip()
