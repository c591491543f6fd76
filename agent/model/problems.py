"""Problems found in a pod: shown to people in full, counted with bounded labels."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

__all__ = ["Problem", "at_most", "MAX_PROBLEMS_SHOWN"]

#: The most problem lines a view shows of one pod or verdict (the rest counted in one more line).
MAX_PROBLEMS_SHOWN = 20


class Problem(msgspec.Struct, frozen=True):
    # What was wrong: "usage", "overcommit", "requests" or "pod" (the object's shape).
    subject: str
    # A bounded reason such as "invalid_json" or "out_of_range" (a fixed word per failure, never input text).
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.message}"


def at_most(problems: Iterable[object], limit: int) -> list[str]:
    """The first ``limit`` problems as text, and a last line counting the rest when there are more: however many a
    malformed object yields, what is kept or shown of them is bounded."""
    problems = list(problems)
    shown = [str(p) for p in problems[:limit]]
    if len(problems) > limit:
        shown.append(f"... and {len(problems) - limit:,} more problems not shown")
    return shown
