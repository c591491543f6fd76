"""The suite's one polling helper."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, message: str = "") -> object:
    """The first truthy value of ``predicate()``; it is asked once more at the deadline before giving up.

    The one polling helper of the suite: in-process checks poll every 20 ms, tests against the real control
    plane pass a coarser ``interval`` (their reactions take seconds).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout:g} s: {message or predicate}")
        time.sleep(interval)
