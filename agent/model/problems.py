"""Problems found in a pod: shown to people in full, counted with bounded labels."""

from __future__ import annotations

import msgspec

__all__ = ["Problem"]


class Problem(msgspec.Struct, frozen=True):
    # What was wrong: "usage", "overcommit", "requests" or "pod" (the object's shape).
    subject: str
    # A bounded reason such as "invalid_json" or "out_of_range" (a fixed word per failure, never input text).
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.message}"
