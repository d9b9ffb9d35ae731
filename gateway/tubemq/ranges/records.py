"""What a range read hands back and keeps: a store's bounds, the in-range part of one broker batch, the read
counters, and the private consumer-group numbers a reader holds per partition
(:mod:`gateway.tubemq.ranges.reader` says how they are used)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.tubemq.consumer.batch import ConsumedMessage

__all__ = ["GroupLease", "OffsetBounds", "RangeBatch", "RangeStats"]


@dataclass(frozen=True, slots=True)
class OffsetBounds:
    """A partition's store: ``min_offset`` (oldest entry kept) and ``max_offset`` (next write position)."""

    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class RangeBatch:
    """Messages of one broker batch that lie in the range, in order: every message of the partition with an
    entry in ``[start, end)`` (``end`` never passes the range's end), so a read that stops after this
    batch resumes exactly at ``end``."""

    start: int
    end: int
    messages: list[ConsumedMessage]


@dataclass(slots=True)
class RangeStats:
    """What reads did: counts add up over every read of one :class:`RangeReader`.

    ``dropped``: messages whose CRC or attribute prefix was bad (dropped as Java does); ``probes``: extra
    reads that split a straddling batch; ``lost_bytes``: index bytes the broker skipped because a read
    started below the store's minimum (expired data).
    """

    reads: int = 0
    batches: int = 0
    messages: int = 0
    dropped: int = 0
    probes: int = 0
    retries: int = 0
    lost_bytes: int = 0


@dataclass(slots=True)
class GroupLease:
    """Group numbers this reader uses now, per partition key."""

    in_use: dict[str, set[int]] = field(default_factory=dict)
    highest: int = -1

    def take(self, key: str) -> int:
        """The lowest number not in use on partition ``key``, marked in use."""
        used = self.in_use.setdefault(key, set())
        number = next(n for n in range(len(used) + 1) if n not in used)
        used.add(number)
        self.highest = max(self.highest, number)
        return number

    def give_back(self, key: str, numbers: list[int]) -> None:
        used = self.in_use.get(key, set())
        used.difference_update(numbers)
        if not used:
            self.in_use.pop(key, None)
