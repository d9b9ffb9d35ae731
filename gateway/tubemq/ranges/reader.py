"""Read a fixed offset range ``[start, end)`` of one partition straight from its broker, exactly.

Offsets are broker index offsets (§10.3): 28-byte positions in the index of a topic *store*, shared by all
partitions of that store. A message of partition P "is in ``[start, end)``" when its index entry is; sibling
partitions' entries in between belong to them.

**How a range is read.** The reader registers P at the broker under a private consumer group (method 15,
``opType`` 31, ``readStatus`` 0) with ``currOffset`` forced to ``start`` (§6.8: the broker clamps it to
``[min, max]`` and rounds it down to 28; ``start`` below the store minimum means expired data: counted in
:attr:`RangeStats.lost_bytes`). It then fetches (method 17) with ``manualCommitOffset = true``: the broker
reads on from its committed offset plus the pending advances and commits nothing by itself; the final
unregister with ``readStatus 1`` drops what is still pending. The group is private, so whatever its
committed offset ends at means nothing to anyone: every read forces its own start.

**Where a batch ends.** A fetch answer carries only the offset it read from (``currOffset``), not the
offset of each message (§4.6). Batch *i* covers ``[c_i, c_{i+1})``: it holds exactly P's messages whose
entries lie there (sibling entries were stepped over), and ``c_{i+1}`` is the next answer's ``currOffset``;
when there is no next answer (the broker says 404, nothing more), a CommitOffset (method 18) answers the
committed offset after all pending advances, which is the end of the last read. So every batch's end is
known exactly, and:

* ``c_{i+1} <= end``: the whole batch is in range;
* ``c_i >= end``: nothing of it is (the read stops);
* ``c_i < end < c_{i+1}``: the batch *straddles* ``end`` (possible whenever messages were appended after
  ``end`` was planned). Its first ``k`` messages are in range, for an unknown ``k``. Two exact rules:

  1. *dense batch*: when ``c_{i+1} - c_i == 28 * n`` for the ``n`` messages on the wire, every entry of the
     span is one of them (each message takes one entry), so message ``j`` sits at ``c_i + 28 * j`` and
     ``k = ceil((end - c_i) / 28)`` capped at ``n`` — this is always the case on a store with one partition;
  2. *probe*: otherwise a second private group registers P with ``currOffset`` forced to ``end`` and fetches
     until messages arrive (or the read passes ``c_{i+1}``, or 404). They are P's first messages with
     entries ``>= end``, in entry order, so the batch's messages from ``end`` on are the same messages as
     the probe's first ones: the batch splits at the first wire position ``k`` from which its ids run on
     exactly as the probe's do (the first ``k`` messages are ``< end``, the rest are not); with no such
     position (or nothing came) every message of the batch is ``< end``. A whole run is matched, not the
     first id alone, because a real broker's ids are not unique: a store's generator gives the same id to
     messages drawn as far before a turn of its id cycle as after it (:mod:`gateway.embedded.msgid`), and
     a store restarts its generator when it reopens.

A batch whose end is already known to pass ``end`` (``c_i + 28 * n > end``: its messages take ``n``
entries from ``c_i`` on) is closed at once with a CommitOffset instead of another fetch, so a range read
fetches nothing past its end except for the probe.

**Per-message offsets.** Each :class:`ConsumedMessage` carries its exact ``offset`` when the messages kept
from its batch fill the batch's span ``[c_i, min(c_{i+1}, end))``, one entry each (rule 1; after a probe,
the kept part alone may fill its span); else None, because nothing on the wire places it: an answer carries
per message only its id, checksum, flag and payload, and message ids do not follow index order on a real
broker (``IdWorker`` takes ``System.nanoTime()`` shifted past the long's top bit, so ids rise for about 36.6
minutes and fall for the next 36.6, and each id is drawn before the store's write lock, so concurrent
producers swap neighbours: measured on a real 4-partition store, one run had 4,789 of 4,799 index
neighbours with falling ids and 10 rising, a run seven minutes later all rising). Reading the sibling
partitions as well tells which messages share a span but not their order, so merging them by id cannot place
a message either.

**Failures.** Transport errors and a lost registration (411/412: it timed out) re-register at the start of
the batch not yet delivered (a forced offset also drops the pending advance, so nothing is skipped), up to
``max_retries`` times in a row; 452/500/503 wait ``retry_wait`` seconds and fetch again within the same
budget; other error codes raise :class:`~gateway.tubemq.errors.ServerError` at once.

**Private groups.** Group names are ``<prefix>_<n>`` for small ``n``, the same in every process: a read
takes the lowest name this reader is not using on that partition and registers with it; when the broker
answers 410 (another client holds that group on the partition, or its stale registration is being dropped)
the read takes the next name. Every reader with the same prefix - other processes, later runs, other hosts -
so shares a few names, and a broker keeps one offset record per name and partition (as for any consumer
group) for at most as many names as reads ran at once on one partition, however many runs there were.
Reads never depend on a group's committed offset: each forces its own start.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from google.protobuf.message import Message

from gateway.tubemq.consumer.batch import INDEX_ENTRY_SIZE, decode_messages
from gateway.tubemq.consumer.partition_registration import (
    build_partition_register_request,
    build_partition_unregister_request,
)
from gateway.tubemq.errors import PartitionOccupied, TransportError, for_code
from gateway.tubemq.names import check_group_prefix
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.ranges.records import GroupLease, OffsetBounds, RangeBatch, RangeStats
from gateway.tubemq.wire.client_id import consumer_id
from gateway.tubemq.wire.meta import Partition
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import Method

__all__ = ["OffsetBounds", "RangeBatch", "RangeReader", "RangeStats"]

_READ_NORMAL = 0
_SUCCESS = 200
_NO_DATA = 404
_RE_REGISTER = frozenset({411, 412})
_WAIT_AND_RETRY = frozenset({452, 500, 503})
_UNDEFINED = -2
_MAX_GROUP_TRIES = 64


@dataclass(slots=True)
class _Batch:
    start: int
    wire: Sequence[broker_pb.TransferedMessage]


class RangeReader:
    """Exact range reads over ``pool`` (module docstring). Times are seconds.

    ``visit_token`` is the master's ``visitAuthorizedToken`` (see
    :func:`gateway.tubemq.ranges.partitions.discover_partitions`); ``rpc_timeout`` bounds one call.
    """

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        group_prefix: str = "tubemq_range",
        visit_token: int = _UNDEFINED,
        rpc_timeout: float = 10.0,
        retry_wait: float = 0.2,
        max_retries: int = 5,
    ) -> None:
        check_group_prefix(group_prefix)
        self.pool = pool
        self.visit_token = visit_token
        self.rpc_timeout = rpc_timeout
        self.retry_wait = retry_wait
        self.max_retries = max_retries
        self.stats = RangeStats()
        self._prefix = group_prefix
        self.client_id = consumer_id(f"{group_prefix}_{secrets.token_hex(4)}")
        self._lease = GroupLease()

    def __repr__(self) -> str:
        return f"<RangeReader {self._prefix} groups_used={self._lease.highest + 1} {self.stats}>"

    # --- public API ----------------------------------------------------------------------------------

    async def bounds(self, partition: Partition) -> OffsetBounds:
        """The store's minimum and maximum offset: a register forcing offset 0 answers the minimum (the
        clamp) and the maximum; the registration is dropped again at once."""
        async with self._claim(partition, 0) as (_, answer):
            return OffsetBounds(answer.currOffset, answer.maxOffset)

    async def read(
        self, partition: Partition, start: int, end: int, stream_ids: Collection[str] = ()
    ) -> AsyncGenerator[RangeBatch, None]:
        """Yield P's messages with entries in ``[start, end)``, one :class:`RangeBatch` per broker batch, in
        order. Close the iterator (``contextlib.aclosing``) when stopping early: that unregisters.

        ``stream_ids`` (non-empty): only messages whose stream id (``$msgType$``) is one of them, filtered by
        the broker (its filter items, §6.10; a message sent without a stream id never matches) and again
        here against hash collisions, as the Java client does. The cut stays exact: the broker steps over
        entries that do not match as over sibling partitions' entries."""
        self.stats.reads += 1
        if end <= start:
            return
        filters = tuple(sorted(set(stream_ids)))
        async with self._claim(partition, start, filters) as (group, answer):
            if answer.currOffset > start:
                self.stats.lost_bytes += answer.currOffset - start
            async for batch in self._read(partition, group, int(answer.currOffset), end, filters):
                if filters:
                    kept = [m for m in batch.messages if m.stream_id in filters]
                    self.stats.messages -= len(batch.messages) - len(kept)
                    batch = RangeBatch(batch.start, batch.end, kept)
                yield batch

    # --- the read loop ---------------------------------------------------------------------------------

    async def _read(
        self, partition: Partition, group: str, position: int, end: int, filters: tuple[str, ...]
    ) -> AsyncIterator[RangeBatch]:
        """Fetch on from ``position``, where ``group`` is registered now."""
        pending: _Batch | None = None
        failures = 0
        while position < end:
            try:
                answer = await self._fetch(partition, group)
            except TransportError as exc:
                failures = self._count_failure(failures, exc)
                position = await self._start_at(
                    partition, group, pending.start if pending else position, filters
                )
                pending = None
                continue
            code = answer.errCode
            if code == _SUCCESS:
                failures = 0
                if pending is not None:
                    yield await self._finish(partition, pending, answer.currOffset, end, filters)
                    pending = None
                position = answer.currOffset
                if position >= end:
                    break
                pending = _Batch(position, answer.messages)
                if position + INDEX_ENTRY_SIZE * len(answer.messages) > end:
                    yield await self._finish(
                        partition, pending, await self._commit(partition, group), end, filters
                    )
                    break
            elif code == _NO_DATA:
                if pending is not None:
                    yield await self._finish(
                        partition, pending, await self._commit(partition, group), end, filters
                    )
                break
            elif code in _RE_REGISTER:
                failures = self._count_failure(failures, for_code(code, answer.errMsg))
                position = await self._start_at(
                    partition, group, pending.start if pending else position, filters
                )
                pending = None
            elif code in _WAIT_AND_RETRY:
                failures = self._count_failure(failures, for_code(code, answer.errMsg))
                await asyncio.sleep(self.retry_wait)
            else:
                raise for_code(code, answer.errMsg)

    def _count_failure(self, failures: int, error: Exception) -> int:
        """One more failure in a row: raise ``error`` once ``max_retries`` retries are spent."""
        if failures >= self.max_retries:
            raise error
        self.stats.retries += 1
        return failures + 1

    async def _start_at(self, partition: Partition, group: str, offset: int, filters: tuple[str, ...]) -> int:
        answer = await self._register(partition, group, offset, filters)
        return int(answer.currOffset)

    async def _finish(
        self, partition: Partition, batch: _Batch, batch_end: int, end: int, filters: tuple[str, ...]
    ) -> RangeBatch:
        """Decode a batch whose end is known and keep the messages before ``end`` (module docstring)."""
        count = len(batch.wire)
        dense = batch_end - batch.start == INDEX_ENTRY_SIZE * count
        keep = count
        stop = min(batch_end, end)
        if batch_end > end:
            if dense:
                keep = min(count, -(-(end - batch.start) // INDEX_ENTRY_SIZE))
            else:
                after = await self._probe(partition, end, batch_end, filters)
                keep = _split_point([m.messageId for m in batch.wire], after)
                # The kept messages are all of P's entries in [start, end): when they fill that span, each
                # sits at start + 28 * j even though the whole batch was not dense.
                dense = stop - batch.start == INDEX_ENTRY_SIZE * keep
        messages, stats = decode_messages(batch.wire[:keep], None, batch.start, dense)
        self.stats.batches += 1
        self.stats.messages += len(messages)
        self.stats.dropped += stats.bad_checksum + stats.bad_payload
        return RangeBatch(batch.start, stop, messages)

    async def _probe(
        self, partition: Partition, end: int, batch_end: int, filters: tuple[str, ...]
    ) -> list[int]:
        """The ids of P's first messages with entries at or after ``end`` (one answer's worth), when the
        first lies before ``batch_end``; else none (or ids that are not in the batch)."""
        self.stats.probes += 1
        async with self._claim(partition, end, filters) as (group, _):
            failures = 0
            while True:
                try:
                    answer = await self._fetch(partition, group)
                except TransportError as exc:
                    failures = self._count_failure(failures, exc)
                    await self._start_at(partition, group, end, filters)
                    continue
                code = answer.errCode
                if code == _SUCCESS:
                    if answer.messages:
                        return [m.messageId for m in answer.messages]
                    if answer.currOffset >= batch_end:
                        return []
                elif code == _NO_DATA:
                    return []
                elif code in _RE_REGISTER or code in _WAIT_AND_RETRY:
                    failures = self._count_failure(failures, for_code(code, answer.errMsg))
                    await asyncio.sleep(self.retry_wait if code in _WAIT_AND_RETRY else 0)
                    await self._start_at(partition, group, end, filters)
                else:
                    raise for_code(code, answer.errMsg)

    # --- calls -----------------------------------------------------------------------------------------

    async def _register(
        self, partition: Partition, group: str, offset: int, filters: tuple[str, ...] = ()
    ) -> broker_pb.RegisterResponseB2C:
        request = build_partition_register_request(
            self.client_id,
            group,
            partition,
            read_status=_READ_NORMAL,
            visit_token=self.visit_token,
            offset=max(offset, 0),
            filters=filters,
        )
        answer = await self._call(partition, Method.CONSUMER_BROKER_REGISTER, request)
        assert isinstance(answer, broker_pb.RegisterResponseB2C)
        if not answer.success or answer.errCode != _SUCCESS:
            raise for_code(answer.errCode, answer.errMsg)
        return answer

    async def _unregister(self, partition: Partition, group: str) -> None:
        request = build_partition_unregister_request(
            self.client_id, group, partition, consumed=False, visit_token=self.visit_token
        )
        # On a lost link the broker drops the registration, and its pending advance, after its timeout.
        with contextlib.suppress(TransportError):
            await self._call(partition, Method.CONSUMER_BROKER_REGISTER, request)

    async def _fetch(self, partition: Partition, group: str) -> broker_pb.GetMessageResponseB2C:
        request = broker_pb.GetMessageRequestC2B(
            clientId=self.client_id,
            partitionId=partition.partition_id,
            groupName=group,
            topicName=partition.topic,
            lastPackConsumed=False,
            manualCommitOffset=True,
            escFlowCtrl=False,
        )
        answer = await self._call(partition, Method.GET_MESSAGES, request)
        assert isinstance(answer, broker_pb.GetMessageResponseB2C)
        return answer

    async def _commit(self, partition: Partition, group: str) -> int:
        """The end of the last fetch: committing every pending advance answers it (module docstring)."""
        request = broker_pb.CommitOffsetRequestC2B(
            clientId=self.client_id,
            topicName=partition.topic,
            partitionId=partition.partition_id,
            groupName=group,
            lastPackConsumed=True,
        )
        answer = await self._call(partition, Method.CONSUMER_COMMIT, request)
        assert isinstance(answer, broker_pb.CommitOffsetResponseB2C)
        if not answer.success or answer.errCode != _SUCCESS:
            raise for_code(answer.errCode, answer.errMsg)
        return int(answer.currOffset)

    async def _call(self, partition: Partition, method: Method, request: Message) -> Message:
        credentials = self.pool.credentials
        if credentials is not None:
            credentials.stamp_broker_request(request)  # §9: the broker token, when the pool has credentials
        return await self.pool.request(partition.broker.address, method, request, self.rpc_timeout)

    @asynccontextmanager
    async def _claim(
        self, partition: Partition, offset: int, filters: tuple[str, ...] = ()
    ) -> AsyncIterator[tuple[str, broker_pb.RegisterResponseB2C]]:
        """Register ``partition`` at ``offset`` under the lowest group name free here and at the broker
        (module docstring); yields the name and the register answer, unregisters on the way out."""
        lease = self._lease
        tried: list[int] = []
        try:
            while True:
                number = lease.take(partition.partition_key)
                tried.append(number)
                group = f"{self._prefix}_{number}"
                try:
                    answer = await self._register(partition, group, offset, filters)
                except PartitionOccupied:
                    if len(tried) >= _MAX_GROUP_TRIES:
                        raise
                    continue
                try:
                    yield group, answer
                finally:
                    await self._unregister(partition, group)
                return
        finally:
            lease.give_back(partition.partition_key, tried)


def _split_point(ids: Sequence[int], after: Sequence[int]) -> int:
    """The first position in a batch's ``ids`` from which they run on as ``after`` (the probe's ids from
    ``end`` on) does, as far as both go; ``len(ids)`` when there is none (module docstring, rule 2)."""
    if after:
        for k in range(len(ids)):
            span = min(len(ids) - k, len(after))
            if ids[k : k + span] == after[:span]:
                return k
    return len(ids)
