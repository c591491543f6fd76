"""What every record shares: resource request maps, and the one error decoding may raise.

Decoding is total: a field of the wrong type becomes a recorded problem and
an empty value, never an exception, so one malformed object is still
reported. Only an object with no identity at all raises :class:`DecodeError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["DecodeError", "Requests", "NO_REQUESTS", "Oversized", "MAX_ANNOTATION", "EXCERPT", "bounded", "clipped"]

Requests = Mapping[str, str]


class DecodeError(ValueError):
    """The object cannot be identified (a pod with no name and no uid, a node with no name, not an object)."""


# Shared by every container that requests nothing; never mutated.
NO_REQUESTS: dict[str, str] = {}


#: The longest annotation the agent reads (neonvm writes a few dozen characters); longer text is refused unread.
#: The API server allows 256 KiB of annotations per object: without this bound a tenant's pod would make the agent
#: keep (and parse) that much per pod.
MAX_ANNOTATION = 4096
#: How much of refused text the agent keeps to show why it refused it.
EXCERPT = 100


class Oversized(NamedTuple):
    """An annotation longer than MAX_ANNOTATION: kept as its length and first characters, never its text.

    Two oversized values with the same excerpt and length read the same: both are refused with the same words.
    """

    length: int
    excerpt: str

    def __str__(self) -> str:
        return f"{self.length:,} characters starting {self.excerpt!r}"


def bounded(text: str) -> str | Oversized:
    """``text`` if the agent may read it, else only what shows why it did not (its length and an excerpt)."""
    return text if len(text) <= MAX_ANNOTATION else Oversized(len(text), text[:EXCERPT])


def clipped(text: str, limit: int = 64) -> str:
    """The first ``limit`` characters of an annotation compared only to short exact words ("true", "false").

    Any longer value is neither word, clipped or not, so the comparison is unchanged and the rest is not kept.
    """
    return text if len(text) <= limit else text[:limit]
