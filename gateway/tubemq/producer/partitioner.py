"""Which partition a message goes to (§7.4).

A topic's partitions are kept in one sorted order, by ``(broker_id, partition_id)``; "index" below always
means a position in that list. Three ways to choose:

* round-robin (no key, no explicit partition): one counter per topic starting at a random value, as the
  Java ``RoundRobinPartitionRouter`` does. Only partitions whose broker the caller declares available are
  candidates; partitions in back-off are skipped while others remain. Partitions the caller wants to avoid
  (already tried for this message) are skipped too while any other candidate remains.
* by key: ``(java_string_hash(key) & 0x7FFFFFFF) % len(partitions)``, where ``java_string_hash`` is Java's
  ``String.hashCode`` over the key's UTF-16 code units. The hash is fixed and process-independent, so one
  key lands on one partition for as long as the topic's partition set is unchanged, in every gateway
  process, and a Java application can compute the same placement. Shielding does not move a key.
* explicit: an ``int`` is an index into the sorted list; a ``str`` is a partition key
  ``brokerId:topic:partitionId`` as returned in a send result (partition ids alone are ambiguous: every
  broker numbers its partitions from 0).

Partition back-off (Java's ``Partition.increRetries``): every failed send to a partition counts; when the
count exceeds ``failure_limit`` the partition is delayed for ``delay`` seconds and the count resets. A
successful send resets the count (Java's asynchronous path does the same).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gateway.tubemq.errors import ClientError, NoPartition
from gateway.tubemq.wire.payload import java_string_hash


@dataclass(frozen=True, slots=True, order=True)
class PartitionRef:
    """One partition of a topic on one broker; orders as ``(broker_id, partition_id)``."""

    broker_id: int
    partition_id: int

    def key(self, topic: str) -> str:
        """The partition key ``brokerId:topic:partitionId`` (§5.1)."""
        return f"{self.broker_id}:{topic}:{self.partition_id}"


@dataclass(slots=True)
class _Backoff:
    failures: int = 0
    delayed_until: float = 0.0


class Partitioner:
    """Partition choice for every topic of one producer; ``delay`` in seconds."""

    def __init__(
        self,
        *,
        failure_limit: int = 3,
        delay: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._failure_limit = failure_limit
        self._delay = delay
        self._clock = clock
        self._rng = rng or random.Random()
        self._counters: dict[str, int] = {}
        self._stepped = 0
        self._backoff: dict[tuple[str, PartitionRef], _Backoff] = {}

    def __repr__(self) -> str:
        delayed = sum(1 for b in self._backoff.values() if b.delayed_until > self._clock())
        return f"<Partitioner topics={len(self._counters)} delayed={delayed}>"

    def round_robin(
        self,
        topic: str,
        partitions: Sequence[PartitionRef],
        available: Callable[[int], bool] | None,
        avoid: Collection[PartitionRef] = (),
    ) -> PartitionRef:
        """The next partition of ``topic`` on an available broker; raises ``NoPartition`` if none.

        ``partitions`` is the topic's sorted list, ``available(broker_id)`` the shielding verdict
        (None: every broker is available).
        """
        candidates = partitions if available is None else [p for p in partitions if available(p.broker_id)]
        if not candidates:
            raise NoPartition(topic)
        pool = ([p for p in candidates if p not in avoid] or candidates) if avoid else candidates
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._rng.getrandbits(32)
        if not self._backoff:
            # Nothing failed lately (the usual case): no partition can be delayed.
            counter = (counter + 1) & 0xFFFFFFFF
            self._counters[topic] = counter
            return pool[(counter & 0x7FFFFFFF) % len(pool)]
        now = self._clock()
        chosen: PartitionRef | None = None
        for _ in range(len(pool)):
            counter = (counter + 1) & 0xFFFFFFFF
            candidate = pool[(counter & 0x7FFFFFFF) % len(pool)]
            if not self.is_delayed(topic, candidate, now):
                chosen = candidate
                break
        self._counters[topic] = counter
        if chosen is None:
            self._stepped = (self._stepped + 1) & 0x7FFFFFFF
            chosen = pool[self._stepped % len(pool)]
        return chosen

    def round_robin_many(
        self, topic: str, partitions: Sequence[PartitionRef], count: int
    ) -> list[PartitionRef] | None:
        """What ``count`` calls of ``round_robin(topic, partitions, None)`` give while nothing failed lately
        (no partition delayed), in one step; None when something did (call ``round_robin`` then)."""
        if self._backoff or not partitions:
            return None
        if count <= 0:
            return []
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._rng.getrandbits(32)
        size = len(partitions)
        chosen: list[PartitionRef] = []
        for _ in range(count):
            counter = (counter + 1) & 0xFFFFFFFF
            chosen.append(partitions[(counter & 0x7FFFFFFF) % size])
        self._counters[topic] = counter
        return chosen

    @property
    def calm(self) -> bool:
        """Nothing failed lately: no partition is in back-off (``record_success`` has nothing to do)."""
        return not self._backoff

    @staticmethod
    def by_key(topic: str, key: str, partitions: Sequence[PartitionRef]) -> PartitionRef:
        """The partition of ``key``: stable while the topic's partition set is unchanged."""
        if not partitions:
            raise NoPartition(topic)
        return partitions[(java_string_hash(key) & 0x7FFFFFFF) % len(partitions)]

    @staticmethod
    def explicit(topic: str, partition: int | str, partitions: Sequence[PartitionRef]) -> PartitionRef:
        """The partition named by an index into the sorted list or by a ``brokerId:topic:partitionId`` key."""
        if not partitions:
            raise NoPartition(topic)
        if isinstance(partition, int):
            if 0 <= partition < len(partitions):
                return partitions[partition]
            raise ClientError(
                f"partition index {partition} is out of range: topic {topic!r} has "
                f"{len(partitions)} partitions (indexes 0..{len(partitions) - 1})"
            )
        for ref in partitions:
            if ref.key(topic) == partition:
                return ref
        raise ClientError(
            f"partition {partition!r} is not a current partition of topic {topic!r}; "
            f"use a key brokerId:{topic}:partitionId from the topic's route or a send result"
        )

    def is_delayed(self, topic: str, partition: PartitionRef, now: float | None = None) -> bool:
        """Whether ``partition`` is in back-off after repeated failures."""
        state = self._backoff.get((topic, partition))
        if state is None:
            return False
        return state.delayed_until > (self._clock() if now is None else now)

    def record_failure(self, topic: str, partition: PartitionRef) -> None:
        """A send to ``partition`` failed; past ``failure_limit`` failures it is delayed for ``delay``."""
        state = self._backoff.setdefault((topic, partition), _Backoff())
        state.failures += 1
        if state.failures > self._failure_limit:
            state.failures = 0
            state.delayed_until = self._clock() + self._delay

    def record_success(self, topic: str, partition: PartitionRef) -> None:
        """A send to ``partition`` succeeded: clear its failure count."""
        if not self._backoff:
            return
        key = (topic, partition)
        state = self._backoff.get(key)
        if state is not None:
            if state.delayed_until <= self._clock():
                # Forgotten rather than zeroed, so that the back-off table is empty while all is well.
                del self._backoff[key]
            else:
                state.failures = 0

    def forget(self, topic: str) -> None:
        """Drop the counter and back-off state of ``topic``."""
        self._counters.pop(topic, None)
        for key in [k for k in self._backoff if k[0] == topic]:
            del self._backoff[key]
