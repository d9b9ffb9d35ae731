"""Broker-assigned message ids, computed the way a real TubeMQ broker computes them (§10.3).

A real broker keeps one id generator per topic store (``MessageStore``), always with worker number 0, and
draws an id for each message before it takes the store's write lock. The generator (``IdWorker``) reads a
monotonic nanosecond clock (Java's ``System.nanoTime()``: ``CLOCK_MONOTONIC`` on Linux, the clock
:func:`time.monotonic_ns` reads) and computes, in 64-bit two's complement::

    id = abs(((nanos - 1350282310830) << 22) | (worker << 12) | sequence)

The shift throws away all but the low 42 bits of the clock reading and lets bit 41 land on the sign bit,
so ids are not ordered in time:

* for 2**41 ns (about 36.6 minutes) the shifted value is positive and ids rise; for the next 2**41 ns it
  is negative, its absolute value shrinks, and ids *fall*; the cycle repeats every 2**42 ns (73.3 minutes).
  On a falling half, a message of sequence ``s > 0`` gets low bits ``4096 - s`` under worker bits 1023.
* ids are unique only within one generator's life and away from the two turning points: a sequence-0 id
  drawn ``d`` ns before a turn equals the one drawn ``d`` ns after it (the absolute value mirrors), ``0``
  is an id, and the turn at the top gives ``abs(-2**63)``, which stays ``-2**63`` (Java's ``Math.abs``).
* stores do not coordinate (same worker 0, same clock), and a reopened store starts a fresh generator:
  nothing keeps ids of different stores, or of a store before and after a restart, apart.
* ``sequence`` counts ids drawn within the same clock reading (12 bits); when it wraps the generator
  waits until the clock moves past that reading.

:class:`MessageIdGenerator` does the same arithmetic. Its clock is injectable (nanoseconds), so a test can
run a store in the falling half or across a turn; with the default clock, ids on this machine are in the
same phase as a real broker's on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = [
    "ID_EPOCH",
    "ID_PERIOD_NS",
    "MessageIdGenerator",
    "id_for",
    "id_phase",
]

ID_EPOCH = 1350282310830
"""Subtracted from the nanosecond reading (the broker's constant, a millisecond date of 2012)."""
_SEQUENCE_BITS = 12
_WORKER_BITS = 10
_TIME_SHIFT = _SEQUENCE_BITS + _WORKER_BITS
_SEQUENCE_MASK = (1 << _SEQUENCE_BITS) - 1
_U64 = (1 << 64) - 1
_SIGN = 1 << 63
ID_PERIOD_NS = 1 << (64 - _TIME_SHIFT)
"""Ids rise for the first half of this many nanoseconds and fall for the second half (about 73.3 min)."""


def id_for(nanos: int, worker: int = 0, sequence: int = 0) -> int:
    """The id the broker's arithmetic gives for a clock reading, worker number and sequence."""
    raw = (((nanos - ID_EPOCH) << _TIME_SHIFT) | (worker << _SEQUENCE_BITS) | sequence) & _U64
    if raw & _SIGN:
        # Negative as a signed long: its absolute value, except that -2**63 has none and stays itself.
        return (1 << 64) - raw if raw != _SIGN else -_SIGN
    return raw


def id_phase(nanos: int) -> int:
    """Where a clock reading lies in the id cycle: 0 .. ``ID_PERIOD_NS - 1``; ids rise below
    ``ID_PERIOD_NS // 2`` and fall from there on."""
    return (nanos - ID_EPOCH) % ID_PERIOD_NS


class MessageIdGenerator:
    """One store's message ids, drawn as a real broker draws them (module docstring).

    ``clock`` returns monotonic nanoseconds; it must move on eventually (a spent sequence waits for it).
    """

    def __init__(self, worker_id: int = 0, clock: Callable[[], int] = time.monotonic_ns) -> None:
        if not 0 <= worker_id < (1 << _WORKER_BITS):
            raise ValueError(f"worker_id must be in 0..{(1 << _WORKER_BITS) - 1}, got {worker_id}")
        self._worker = worker_id
        self._clock = clock
        self._last = -1
        self._sequence = 0

    def next_id(self) -> int:
        now = self._clock()
        if now == self._last:
            self._sequence = (self._sequence + 1) & _SEQUENCE_MASK
            if self._sequence == 0:
                while now <= self._last:
                    now = self._clock()
        else:
            # A clock reading that went back also restarts the sequence, as on the broker.
            self._sequence = 0
        self._last = now
        return id_for(now, self._worker, self._sequence)

    def __repr__(self) -> str:
        return f"MessageIdGenerator(worker={self._worker}, last={self._last}, seq={self._sequence})"
