"""The backoff between failures, on virtual time."""

from __future__ import annotations

import random

import pytest

from agent.source.backoff import Backoff
from testkit.virtual_time import VirtualClock


def test_delays_double_from_the_initial_value_up_to_the_cap():
    clock = VirtualClock()
    backoff = Backoff(initial=0.8, maximum=30.0, jitter=0.0, clock=clock)
    delays = []
    for _ in range(9):
        delays.append(backoff.next_delay())
        clock.advance(delays[-1])
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0]


def test_jitter_stays_between_the_base_and_twice_it_and_never_past_the_cap():
    clock = VirtualClock()
    backoff = Backoff(initial=0.8, maximum=30.0, jitter=1.0, rng=random.Random(7), clock=clock)
    for n in range(12):
        base = min(30.0, 0.8 * 2**n)
        delay = backoff.next_delay()
        clock.advance(delay)
        assert base <= delay <= min(30.0, 2 * base)


def test_a_quiet_spell_starts_the_sequence_over():
    clock = VirtualClock()
    backoff = Backoff(initial=1.0, maximum=30.0, jitter=0.0, reset_after=120.0, clock=clock)
    assert [backoff.next_delay() for _ in range(3)] == [1.0, 2.0, 4.0]
    clock.advance(119.0)
    assert backoff.next_delay() == 8.0  # still inside the window
    clock.advance(121.0)
    assert backoff.next_delay() == 1.0


def test_reset_after_success():
    backoff = Backoff(initial=0.5, jitter=0.0, clock=VirtualClock())
    backoff.next_delay()
    backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.5)


def test_retry_after_lengthens_a_delay_but_never_past_the_cap():
    backoff = Backoff(initial=0.8, maximum=30.0, jitter=0.0, clock=VirtualClock())
    assert backoff.next_delay(retry_after=5.0) == 5.0    # the server asked for more than 0.8 s
    assert backoff.next_delay(retry_after=0.1) == 1.6    # the backoff still grows underneath
    assert backoff.next_delay(retry_after=3600.0) == 30.0
