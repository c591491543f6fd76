"""What every record shares: resource request maps, and the one error decoding may raise.

Decoding is total: a field of the wrong type becomes a recorded problem and
an empty value, never an exception, so one malformed object is still
reported. Only an object with no identity at all raises :class:`DecodeError`.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DecodeError", "Requests", "NO_REQUESTS"]

Requests = Mapping[str, str]


class DecodeError(ValueError):
    """The object cannot be identified (a pod with no name and no uid, a node with no name, not an object)."""


# Shared by every container that requests nothing; never mutated.
NO_REQUESTS: dict[str, str] = {}
