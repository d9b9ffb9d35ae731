"""The ``tubemq`` data source on PySpark's Python Data Source API (pyspark >= 4.2).

    from gateway.spark import TubeMQDataSource
    spark.dataSource.register(TubeMQDataSource)
    df = spark.read.format("tubemq").option("masters", "127.0.0.1:18715").option("topic", "demo").load()

**Batch read**: one Spark partition per TubeMQ partition, each reading exactly its ``[start, end)`` of index
offsets (``startingOffsets`` / ``endingOffsets``, planned once on the driver) with the exact cut of
:mod:`gateway.tubemq.ranges.reader`. Columns: ``topic``, ``partition`` (partition key), ``offset`` (the
message's index offset when the wire proves it, else null: see the range reader), ``message_id``, ``key``
(the key it was published with: the ``$msgKey$`` attribute, else null), ``value``, ``attributes``,
``stream_id`` (``$msgType$``), ``msg_time`` (``$msgTime$``, producer local time), ``append_time`` (always
null: a TubeMQ fetch does not carry the broker's append time).

A topic none of whose partitions is subscribable yet (not deployed on a broker, or subscribing is off there)
reads as no rows, with a warning in the driver's log; a topic the master does not know fails the read with
the master's error.

**Several topics**: ``topic`` (or ``subscribe``) may name several, comma-separated; partition keys carry
the topic, so offsets, ranges and rows keep them apart.

**Streaming read**: the stream offset is the JSON map ``{"brokerId:topic:partitionId": offset}``; it lives
only in Spark's checkpoint. Each micro-batch reads exactly ``[start, end)`` per partition, so a restarted
query resumes at the checkpointed offsets with no message skipped or read twice. Partitions found later
start at their store's oldest message and keep their key; a partition whose broker is down keeps its last
offset until it is back. ``maxMessagesPerTrigger`` (``maxOffsetsPerTrigger``) is exact: the partitions of
a store share its index, one entry per message, so they end at one offset and a micro-batch holds exactly
the cap when that many messages wait (fewer only while the partitions of a store still stand at different
offsets, e.g. after a ``startingOffsets`` JSON set them apart). ``trigger(availableNow=True)`` notes what
every partition holds when the run starts and reads exactly that, in micro-batches of the cap, then stops;
a run after a crash first finishes the batch the crash cut, then reads on to its own start's end.
``failOnDataLoss`` (default true) fails the query, naming the partition and the offsets, when its offset
lies past the partition's end (the store was lost or replaced) or before its oldest message (expired, also
checked when a task starts reading); false logs a warning and reads on from the oldest message.
``minPartitions`` splits large ranges into several exact tasks.

Query progress shows ``latestOffset`` (``reportLatestOffset``: what each partition held at the last
planning). Spark 4.3 gives Python sources no hook for ``sources[].metrics`` (its Python micro-batch stream
does not implement ``ReportsSourceMetrics``), so the lag per partition comes from
:func:`gateway.spark.progress.source_lag` applied to a progress report.

**Write** (batch and streaming): save mode ``append`` adds the rows; ``overwrite`` is refused, as Spark's
Kafka sink refuses it (a topic cannot be replaced). Kafka also takes the default mode, ErrorIfExists, as
append; a Python data source cannot: Spark itself refuses ErrorIfExists and Ignore for every Python data
source before the source is asked (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``), so writes say
``mode("append")``. Every row becomes one message (``value`` required, binary or string; optional
``key``, ``attributes``, ``stream_id``, ``msg_time``); a task sends its rows in batches bounded by
``writeBatchRows`` and ``writeBatchBytes`` (:mod:`gateway.spark.batches`), each through the producer's
batch path (``Producer.send_prepared``) of the process's one pooled core, one batch in flight while the
next is read. A row counts as written once a broker acknowledged it; a task fails when any of its messages
fails (:class:`gateway.spark.failures.WriteFailed`: how many of the batch, and the first one's error; the
batches after it are not sent), so Spark retries it (delivery is at-least-once).

**Stream-id filter**: option ``streamId`` (a comma list) reads only messages of those stream ids, filtered
by the broker (TubeMQ's filter items) and checked again here against hash collisions; exact ranges stay
exact (the broker steps over other stream ids' entries as over sibling partitions'). In a batch query,
``where stream_id = 'x'`` and ``stream_id in ('x', 'y')`` are pushed down to the same filter when
``spark.sql.python.filterPushdown.enabled`` is true when :func:`gateway.spark.register` runs (it then
registers :class:`TubeMQFilteringDataSource`; Spark 4.3 refuses a Python reader that can take filters while
pushdown is off, so the plain source has none). Through a gateway (``gateway`` option) the filter applies
to the rows the gateway returns.

``option("gateway", "http://...")`` sends all of it through a tubemq-gateway's REST API instead.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    In,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import BinaryType, StringType, StructType

from gateway.spark import backend
from gateway.spark.batches import check_columns
from gateway.spark.core import PartitionRange, PlannedPartition
from gateway.spark.options import SourceOptions, stream_id_filter
from gateway.tubemq.consumer import INDEX_ENTRY_SIZE

__all__ = ["SCHEMA", "TubeMQDataSource", "TubeMQFilteringDataSource", "capped_offsets", "split_ranges"]

log = logging.getLogger(__name__)

SCHEMA = (
    "topic string, partition string, offset bigint, message_id bigint, key string, value binary, "
    "attributes map<string,string>, stream_id string, msg_time timestamp, append_time timestamp"
)


class TubeMQInputPartition(InputPartition):
    """One TubeMQ partition's ``[start, end)``."""

    def __init__(self, value: PartitionRange) -> None:
        super().__init__(value)
        self.range = value


@dataclass
class TubeMQCommitMessage(WriterCommitMessage):
    """How many messages one write task sent."""

    messages: int


class TubeMQDataSource(DataSource):
    """``format("tubemq")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "tubemq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return TubeMQBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TubeMQStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError(
                "save mode 'overwrite' is not allowed for tubemq (as for Spark's Kafka sink): a topic's "
                "messages cannot be replaced; use mode('append') to add the rows"
            )
        check_value_type(schema)
        return TubeMQWriter(_write_options(self.options), schema.fieldNames())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_value_type(schema)
        return TubeMQStreamWriter(_write_options(self.options), schema.fieldNames())


class TubeMQFilteringDataSource(TubeMQDataSource):
    """``format("tubemq")`` whose batch reader takes ``stream_id`` filters to the broker: registered by
    :func:`gateway.spark.register` when ``spark.sql.python.filterPushdown.enabled`` is true (Spark refuses a
    reader with ``pushFilters`` while that is false)."""

    def reader(self, schema: StructType) -> DataSourceReader:
        return TubeMQFilteringBatchReader(SourceOptions.parse(self.options))


def _write_options(given: Mapping[str, str]) -> SourceOptions:
    """The options of a write: one topic (ValueError before any task runs otherwise)."""
    options = SourceOptions.parse(given)
    _ = options.topic
    return options


# --- reading ------------------------------------------------------------------------------------------


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, TubeMQInputPartition):
        # When partitions() plans none (no partition of the topics is subscribable yet), Spark still runs
        # one task, with a placeholder InputPartition(None): it reads nothing.
        return iter(())
    return backend.read_batches(options, partition.range)


class TubeMQBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        planned = backend.plan(opts)
        if not planned:
            log.warning(
                "topics %s list no subscribable partition yet (not deployed on a broker, or subscribing "
                "is off there): the read returns no rows",
                list(opts.topics),
            )
        for spec, name in ((opts.starting, "startingOffsets"), (opts.ending, "endingOffsets")):
            unknown = sorted(set(spec.per_partition) - set(planned))
            if unknown:
                raise ValueError(f"{name} names partitions the topic does not have now: {unknown}")
        ranges = []
        for key in sorted(planned):
            p = planned[key]
            low, high = p.bounds.min_offset, p.bounds.max_offset
            start = opts.starting.resolve(key, low, high)
            end = min(opts.ending.resolve(key, low, high), high)
            if start < low:
                backend.data_loss(opts, f"partition {key}: startingOffsets {start} expired (oldest is {low})")
            elif start > high:
                backend.data_loss(opts, f"partition {key}: startingOffsets {start} is past its end {high}")
            ranges.append(p.range(start, max(start, end), fail_on_data_loss=opts.fail_on_data_loss))
        return [TubeMQInputPartition(r) for r in split_ranges(ranges, opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


class TubeMQFilteringBatchReader(TubeMQBatchReader):
    """A batch reader that takes ``stream_id = 'x'`` and ``stream_id IN (...)`` filters down to the broker's
    stream-id filter (the other filters stay with Spark)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        wanted = set(self.options.stream_ids) if self.options.stream_ids else None
        taken: list[Filter] = []
        for item in filters:
            values = _stream_id_values(item)
            if values is None:
                yield item
                continue
            narrowed = values if wanted is None else wanted & values
            if not narrowed:  # nothing can match: Spark's own filter returns no rows
                yield item
                continue
            wanted = narrowed
            taken.append(item)
        if taken and wanted is not None:
            self.options = replace(
                self.options, stream_ids=stream_id_filter(sorted(wanted), "stream_id filter")
            )


def _stream_id_values(item: Filter) -> set[str] | None:
    """The stream ids a ``stream_id`` equality or IN filter keeps; None for any other filter."""
    if getattr(item, "attribute", None) != ("stream_id",):
        return None
    if isinstance(item, EqualTo):
        values: tuple[Any, ...] = (item.value,)
    elif isinstance(item, In):
        values = tuple(item.value)
    else:
        return None
    if not values or not all(isinstance(v, str) and v.strip() == v and v for v in values):
        return None
    return set(values)


class TubeMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{partitionKey: offset}``; see the module docstring."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._last: dict[str, int] | None = None
        self._planned: dict[str, PlannedPartition] = {}
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, int]:
        planned = backend.plan(self.options)
        spec = self.options.starting
        unknown = sorted(set(spec.per_partition) - set(planned))
        if unknown:
            raise ValueError(f"startingOffsets names partitions the topics do not have now: {unknown}")
        offsets = {
            key: spec.resolve(key, p.bounds.min_offset, p.bounds.max_offset) for key, p in planned.items()
        }
        self._last = offsets
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: read up to what every partition holds now, then stop."""
        self._target = {key: p.bounds.max_offset for key, p in backend.plan(self.options).items()}

    def getDefaultReadLimit(self) -> Any:
        cap = self.options.max_messages_per_trigger
        if cap is None:
            return ReadAllAvailable()
        return ReadMaxRows(cap)

    def reportLatestOffset(self) -> dict[str, int] | None:
        """What the partitions held at the last planning (``latestOffset`` in the query progress)."""
        return self._latest

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        begin = dict(start if start is not None else self._last or {})
        planned = self._planned = backend.plan(self.options)
        self._latest = {key: p.bounds.max_offset for key, p in planned.items()}
        floor = {key: self._floor(key, begin.get(key), p) for key, p in planned.items()}
        latest = dict(self._latest)
        if self._target is not None:  # availableNow: nothing past what was there when the run began
            latest = {k: max(floor[k], min(v, self._target.get(k, floor[k]))) for k, v in latest.items()}
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if limit is None:
            cap = self.options.max_messages_per_trigger
        end = capped_offsets(floor, latest, cap, {key: p.store for key, p in planned.items()})
        result = dict(begin)  # partitions not visible right now keep their offset
        result.update(end)
        self._last = result
        return result

    def _floor(self, key: str, begin: int | None, planned: PlannedPartition) -> int:
        """Where ``key`` reads on from: its offset, unless the broker no longer has it (failOnDataLoss)."""
        low, high = planned.bounds.min_offset, planned.bounds.max_offset
        if begin is None:  # found after the query began: from its oldest message
            return low
        if begin > high:
            backend.data_loss(
                self.options,
                f"partition {key}: the query is at offset {begin}, past the partition's end {high} (its "
                f"store was lost or replaced; messages {low}..{high} would be skipped)",
            )
            return low
        if begin < low:
            backend.data_loss(
                self.options,
                f"partition {key}: offsets {begin}..{low} expired before the query read them (oldest "
                f"retained: {low})",
            )
            return low
        return begin

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        wanted: dict[str, tuple[int, int, bool]] = {}
        for key, offset in end.items():
            begin = start.get(key)
            # Found during the query, or its store was replaced (failOnDataLoss false): from its oldest
            # message (the broker clamps offset 0 up to it).
            if begin is None or offset < begin:
                wanted[key] = (0, offset, False)
            elif offset > begin:
                wanted[key] = (begin, offset, self.options.fail_on_data_loss)
        wanted = {key: w for key, w in wanted.items() if w[1] > w[0]}
        if not wanted:
            return []
        planned = self._planned
        if not set(wanted) <= set(planned):  # e.g. a restarted query plans its last batch again
            planned = self._planned = backend.plan(self.options)
        missing = sorted(set(wanted) - set(planned))
        if missing:
            raise RuntimeError(f"partitions {missing} of this micro-batch have no reachable broker now")
        ranges = [
            planned[key].range(low, high, fail_on_data_loss=strict)
            for key, (low, high, strict) in sorted(wanted.items())
        ]
        return [TubeMQInputPartition(r) for r in split_ranges(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint only."""


def capped_offsets(
    start: Mapping[str, int],
    latest: Mapping[str, int],
    cap: int | None,
    stores: Mapping[str, Hashable] | None = None,
) -> dict[str, int]:
    """End offsets covering at most ``cap`` index entries past ``start`` in total; ``cap`` None means
    everything up to ``latest``.

    Partitions of one store (``stores`` maps a key to its store; None: every key is a store of its own)
    share its index: each entry is one message of one of them. A store's partitions therefore end at one
    offset ``E`` (each at least at its start), so the batch holds exactly the entries in ``[s, E)`` when
    they start at one offset ``s`` (which they do unless startingOffsets or a late partition set them
    apart: then it holds fewer until they meet). The cap is shared by the stores in proportion to their
    backlog, largest remainders first.
    """
    group: dict[Hashable, list[str]] = {}
    for key in latest:
        group.setdefault(stores[key] if stores is not None else key, []).append(key)
    first = {store: min(start[k] for k in keys) for store, keys in group.items()}
    last = {store: max(latest[k] for k in keys) for store, keys in group.items()}
    backlog = {store: max(0, last[store] - first[store]) // INDEX_ENTRY_SIZE for store in group}
    total = sum(backlog.values())
    if cap is None or total <= cap:
        return {key: max(latest[key], start[key]) for key in latest}
    share = {store: backlog[store] * cap // total for store in backlog}
    left = cap - sum(share.values())
    for store in sorted(backlog, key=lambda s: (share[s] - backlog[s], str(s))):
        if left <= 0:
            break
        if share[store] < backlog[store]:
            share[store] += 1
            left -= 1
    end: dict[str, int] = {}
    for store, keys in group.items():
        cut = first[store] + INDEX_ENTRY_SIZE * share[store]
        for key in keys:
            end[key] = max(start[key], min(cut, latest[key]))
    return end


def split_ranges(ranges: list[PartitionRange], min_partitions: int | None) -> list[PartitionRange]:
    """``ranges`` cut into at least about ``min_partitions`` tasks (as Kafka's ``minPartitions``): each
    non-empty range gets pieces in proportion to its size, cut at index entries (every piece is read
    exactly, so the pieces together hold exactly the range's messages). None or few enough: unchanged."""
    sizes = [(r.end - r.start) // INDEX_ENTRY_SIZE for r in ranges]
    total = sum(sizes)
    if min_partitions is None or total == 0 or len([n for n in sizes if n > 0]) >= min_partitions:
        return ranges
    pieces: list[PartitionRange] = []
    for r, entries in zip(ranges, sizes, strict=True):
        parts = max(1, min(entries, -(-entries * min_partitions // total)))
        cuts = [r.start + INDEX_ENTRY_SIZE * (entries * i // parts) for i in range(parts)] + [r.end]
        pieces.extend(replace(r, start=low, end=high) for low, high in itertools.pairwise(cuts))
    return pieces


# --- writing ------------------------------------------------------------------------------------------


def check_value_type(schema: StructType) -> None:
    """Refuse, before any task runs, a ``value`` column that is neither string nor binary (as Spark's Kafka
    sink does): an integer would otherwise become that many zero bytes."""
    if "value" not in schema.fieldNames():
        check_columns(schema.fieldNames())
    kind = schema["value"].dataType
    if not isinstance(kind, StringType | BinaryType):
        raise ValueError(
            f"the 'value' column must be string or binary, not {kind.simpleString()}: cast it first, "
            "e.g. col('value').cast('string')"
        )


class TubeMQWriter(DataSourceWriter):
    def __init__(self, options: SourceOptions, columns: list[str]) -> None:
        self.options = options
        self.columns = columns
        check_columns(columns)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return TubeMQCommitMessage(backend.write_rows(self.options, self.columns, iterator))


class TubeMQStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: SourceOptions, columns: list[str]) -> None:
        self.options = options
        self.columns = columns
        check_columns(columns)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return TubeMQCommitMessage(backend.write_rows(self.options, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every message was acknowledged by a broker when its task finished: nothing left to do."""
