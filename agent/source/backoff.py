"""Jittered exponential backoff, as client-go's reflector uses between failures."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

__all__ = ["Backoff"]


class Backoff:
    """Delays of ``initial * factor**n`` capped at ``maximum``, each jittered.

    The sequence starts over once no failure has happened for ``reset_after``
    seconds, so one blip after a day of health does not wait 30 s.
    """

    def __init__(
        self,
        initial: float = 0.8,
        maximum: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset_after
        self._rng = rng or random.Random()
        self._clock = clock
        self._failures = 0
        self._last_failure: float | None = None

    def next_delay(self, retry_after: float | None = None) -> float:
        """The next delay; at least the server's Retry-After (itself capped at ``maximum``) when given."""
        if retry_after is not None:
            return max(self.next_delay(), min(retry_after, self.maximum))
        now = self._clock()
        if self._last_failure is not None and now - self._last_failure > self.reset_after:
            self._failures = 0
        self._last_failure = now
        base = min(self.maximum, self.initial * self.factor**self._failures)
        self._failures += 1
        # client-go's wait.Jitter: base + up to jitter*base, then capped.
        return min(self.maximum, base * (1 + self._rng.random() * self.jitter))

    def reset(self) -> None:
        self._failures = 0
        self._last_failure = None
