"""Virtual time for loops that wait: waiting advances the clock at once (kopf's and client-go's fake clocks).

A test runs a reflector's loop in its own thread of control, records every
wait, and stops it once virtual time passes a horizon, so a minute of
backoff takes microseconds and the delays can be asserted exactly.
"""

from __future__ import annotations

import threading


class VirtualClock:
    def __init__(self, horizon: float = float("inf")) -> None:
        self.now = 0.0
        self.horizon = horizon
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """What ``threading.Event.wait`` does, on virtual time; sets ``stop`` past the horizon."""
        self.waits.append(seconds)
        self.now += seconds
        if self.now >= self.horizon:
            stop.set()
        return stop.is_set()
