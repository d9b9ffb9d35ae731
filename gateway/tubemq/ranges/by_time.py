"""Find where a partition's messages reach a given time: the offset a seek by time registers.

TubeMQ keeps a receive time per index entry, but only the broker's web API for the ``__offset_history__``
store reads it; a fetched message carries its id, flag and payload, and in the payload's attributes the
``$msgTime$`` its producer stamped (``yyyyMMddHHmm``, the producer's local wall clock, minute precision; Java
``Message.putSystemHeader``). So the time of a message here is its ``$msgTime$`` text, compared as text at
minute precision (12 digits compare as the times they spell, in one time zone).

**What is searched.** Let P's messages in index order be m1, m2, ... A message's verdict is *late* when its
time is at or after the target minute, *early* when before; a message without a time (or with one that is
not 12 digits) takes the verdict of the next message after it that has one (late when there is none). The
search answers an offset ``o`` such that the first message at or after ``o`` is late and the message before
it (if any) is early: a registration at ``o`` delivers from the first message of a late run. When the
times rise with the offsets (the usual case: one producer clock, or clocks within a minute) that is the
first message stamped at or after the target, with the untimed messages right before it; when times are out
of offset order it is *a* boundary of that kind, not necessarily the first. No late message: the end (the
partition's ``maxOffset``); every message late: the oldest one kept.

**How.** A bisection over the store's index offsets ``[min, max)``, keeping ``lo`` (every position before it
is known to land on an early message) and ``hi`` (a registration there is known to land on a late message,
or on nothing: the end). Each step reads from the middle with a :class:`RangeReader` (a private group, not
the consumer's own) up to ``hi`` and looks at the first messages: a late first message moves ``hi`` to the
middle; early ones move ``lo`` past the last early one (each message takes one 28-byte entry at least, so
the ``j``-th message of a read lies at or after ``start + 28 * j``, exactly there when the reader knows its
offset), and a late one after them fixes ``hi`` at its offset when that is known. A read that finds only
untimed messages for ``max_batches`` broker batches takes them as late (delivered rather than skipped). So
a search costs about ``log2(entries)`` reads of one batch each (a register, a fetch or two, an unregister).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Collection
from dataclasses import dataclass
from typing import Protocol

from gateway.tubemq.consumer.batch import INDEX_ENTRY_SIZE, ConsumedMessage
from gateway.tubemq.ranges.records import OffsetBounds, RangeBatch
from gateway.tubemq.wire.meta import Partition

__all__ = ["MINUTE_LENGTH", "TimeSearch", "find_time_offset", "message_minute"]

#: ``yyyyMMddHHmm``
MINUTE_LENGTH = 12


class BatchReader(Protocol):
    """What the search needs of a :class:`~gateway.tubemq.ranges.RangeReader`."""

    async def bounds(self, partition: Partition) -> OffsetBounds: ...

    def read(
        self, partition: Partition, start: int, end: int, stream_ids: Collection[str] = ()
    ) -> AsyncGenerator[RangeBatch, None]: ...


@dataclass(frozen=True, slots=True)
class TimeSearch:
    """Where the search landed: the ``offset`` to register, the store's ``bounds`` and the ``reads`` made."""

    offset: int
    bounds: OffsetBounds
    reads: int


def message_minute(message: ConsumedMessage) -> str | None:
    """The message's ``$msgTime$`` when it is 12 ASCII digits, else None (no time)."""
    text = message.msg_time
    if text is None or len(text) != MINUTE_LENGTH or not text.isascii() or not text.isdigit():
        return None
    return text


async def find_time_offset(
    reader: BatchReader,
    partition: Partition,
    minute: str,
    *,
    stream_ids: Collection[str] = (),
    max_batches: int = 4,
) -> TimeSearch:
    """The offset where ``partition``'s messages (those matching ``stream_ids``, when given) turn from
    before ``minute`` (``yyyyMMddHHmm``) to at or after it; see the module docstring."""
    if len(minute) != MINUTE_LENGTH or not minute.isascii() or not minute.isdigit():
        raise ValueError(f"minute {minute!r} must be yyyyMMddHHmm")
    bounds = await reader.bounds(partition)
    lo, hi = bounds.min_offset, max(bounds.min_offset, bounds.max_offset)
    reads = 0
    while lo < hi:
        mid = lo + (hi - lo) // (2 * INDEX_ENTRY_SIZE) * INDEX_ENTRY_SIZE
        reads += 1
        lo, hi = await _step(reader, partition, minute, stream_ids, max_batches, lo, mid, hi)
    return TimeSearch(hi, bounds, reads)


async def _step(
    reader: BatchReader,
    partition: Partition,
    minute: str,
    stream_ids: Collection[str],
    max_batches: int,
    lo: int,
    mid: int,
    hi: int,
) -> tuple[int, int]:
    """One read from ``mid`` (in ``[lo, hi)``) up to ``hi``: the new ``(lo, hi)``."""
    #: the messages read, each with the lowest offset it can lie at (its own when known)
    seen: list[tuple[ConsumedMessage, int]] = []
    last_early: int | None = None  # index in ``seen`` of the last early message before the first late one
    decided = False  # whether the messages after ``last_early`` are known to go with a late one
    batches = 0
    async with contextlib.aclosing(reader.read(partition, mid, hi, stream_ids)) as read:
        async for batch in read:
            batches += 1 if batch.messages else 0  # batches of only sibling entries are stepped over
            for i, message in enumerate(batch.messages):
                least = message.offset if message.offset is not None else batch.start + INDEX_ENTRY_SIZE * i
                seen.append((message, least))
                when = message_minute(message)
                if when is None:
                    continue
                if when >= minute:
                    decided = True
                    break
                last_early = len(seen) - 1
            if decided or batches >= max_batches:
                break
        else:
            decided = True  # read up to ``hi``: untimed messages at the end go with what is there (late)
    if last_early is None:
        # Late first messages (a late one, untimed ones before a late one or before ``hi``, or more untimed
        # ones than a read looks at), or nothing in [mid, hi): a registration at ``mid`` lands late.
        return lo, mid
    lo = seen[last_early][1] + INDEX_ENTRY_SIZE
    landing = last_early + 1
    if decided and landing < len(seen):
        exact = seen[landing][0].offset
        if exact is not None:
            return lo, exact  # the first message after the last early one, exactly placed
    return lo, hi
