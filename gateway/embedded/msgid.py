"""Broker-assigned message ids: unique, increasing, positive int64, time-based like TubeMQ's ``IdWorker``."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["ID_EPOCH_MS", "MessageIdGenerator"]

ID_EPOCH_MS = 1350282310830
_SEQUENCE_BITS = 12
_WORKER_BITS = 10


class MessageIdGenerator:
    """Unique, increasing, positive int64 message ids shaped like TubeMQ's ``IdWorker`` (§10.3).

    ``id = (ms since 2012-10-15 << 22) | (worker << 12) | sequence``. Within one generator ids strictly
    increase, even when the clock stalls or steps back; ``observe`` moves past ids found in a reopened log.
    """

    def __init__(self, worker_id: int = 0, clock: Callable[[], float] = time.time) -> None:
        if not 0 <= worker_id < (1 << _WORKER_BITS):
            raise ValueError(f"worker_id must be in 0..{(1 << _WORKER_BITS) - 1}, got {worker_id}")
        self._worker = worker_id
        self._clock = clock
        self._last_ms = 0
        self._sequence = 0

    def next_id(self) -> int:
        ms = int(self._clock() * 1000) - ID_EPOCH_MS
        if ms > self._last_ms:
            self._last_ms, self._sequence = ms, 0
        else:
            self._sequence += 1
            if self._sequence >> _SEQUENCE_BITS:
                # Sequence space of this millisecond is spent: borrow the next millisecond.
                self._last_ms, self._sequence = self._last_ms + 1, 0
        return (
            (self._last_ms << (_SEQUENCE_BITS + _WORKER_BITS))
            | (self._worker << _SEQUENCE_BITS)
            | self._sequence
        )

    def observe(self, message_id: int) -> None:
        """Make every later id of this generator greater than ``message_id``."""
        ms = message_id >> (_SEQUENCE_BITS + _WORKER_BITS)
        if ms >= self._last_ms:
            # Spend that millisecond: the id may come from another worker number, so only a later
            # millisecond is sure to give larger ids.
            self._last_ms, self._sequence = ms, (1 << _SEQUENCE_BITS) - 1

    def __repr__(self) -> str:
        return f"MessageIdGenerator(worker={self._worker}, last_ms={self._last_ms}, seq={self._sequence})"
