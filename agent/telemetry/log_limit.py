"""A warning that repeats is logged once per interval with a count, not once per occurrence.

A broken peer can make the same warning happen hundreds of times a second (a
proxy answering every watch with an HTML page, a Collector refusing every
export); one line each would flood the node's logs and bury everything else.
Each kind of warning has a key: its first occurrence is logged at once, later
ones within ``interval`` are only counted, and the first after the interval
is logged with how many were held back. Time is injected, so tests run on
virtual time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable

__all__ = ["RateLimitedLog", "REPEAT_INTERVAL"]

REPEAT_INTERVAL = 60.0  # seconds between two lines of the same kind of warning


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval: float = REPEAT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, float] = {}  # key -> when it was last logged
        self._held: dict[Hashable, int] = {}  # key -> occurrences since, not logged

    def log(self, level: int, key: Hashable, msg: str, *args: object, **kwargs) -> bool:
        """Log ``msg % args`` unless ``key`` was logged less than an interval ago; True when it was logged."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._held[key] = self._held.get(key, 0) + 1
                return False
            held = self._held.pop(key, 0)
            self._last[key] = now
        if held and last is not None:  # held only counts after a logged one: last is set
            msg += " (%d more like this in the last %.0f s)"
            args = (*args, held, now - last)
        self._logger.log(level, msg, *args, **kwargs)
        return True

    def warning(self, key: Hashable, msg: str, *args: object, **kwargs) -> bool:
        return self.log(logging.WARNING, key, msg, *args, **kwargs)

    def reset(self) -> None:
        """The condition ended (an export went through): the next occurrence of any key is logged at once."""
        with self._lock:
            self._last.clear()
            self._held.clear()
