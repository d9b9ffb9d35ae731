"""The ``tubemq`` data source on PySpark's Python Data Source API (pyspark >= 4.0).

    from gateway.spark import TubeMQDataSource
    spark.dataSource.register(TubeMQDataSource)
    df = spark.read.format("tubemq").option("masters", "127.0.0.1:18715").option("topic", "demo").load()

**Batch read**: one Spark partition per TubeMQ partition, each reading exactly its ``[start, end)`` of index
offsets (``startingOffsets`` / ``endingOffsets``, planned once on the driver) with the exact cut of
:mod:`gateway.tubemq.range_reader`. Columns: ``topic``, ``partition`` (partition key), ``offset`` (the
message's index offset when the wire proves it, else null: see the range reader), ``message_id``, ``key``
(the key it was published with: the ``$msgKey$`` attribute, else null), ``value``, ``attributes``,
``stream_id`` (``$msgType$``), ``msg_time`` (``$msgTime$``, producer local time), ``append_time`` (always
null: a TubeMQ fetch does not carry the broker's append time).

**Streaming read**: the stream offset is the JSON map ``{"brokerId:topic:partitionId": offset}``; it lives
only in Spark's checkpoint. Each micro-batch reads exactly ``[start, end)`` per partition, so a restarted
query resumes at the checkpointed offsets with no message skipped or read twice. Partitions found later
start at offset 0 (the broker clamps that to the store's oldest message) and keep their key; a partition
whose broker is down keeps its last offset until it is back. ``maxMessagesPerTrigger`` caps the index
entries a micro-batch covers, and so its messages (sibling entries count too, so a batch can hold fewer).

**Write** (batch and streaming): every row becomes one ``Producer.send`` (``value`` required, binary or
string; optional ``key``, ``attributes``, ``stream_id``, ``msg_time``) through the process's one pooled
core; a task fails when any of its messages fails, so Spark retries it (delivery is at-least-once).

``option("gateway", "http://...")`` sends all of it through a tubemq-gateway's REST API instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from gateway.spark import backend
from gateway.spark.core import PartitionRange, PlannedPartition
from gateway.spark.options import SourceOptions
from gateway.tubemq.consumer_batch import INDEX_ENTRY_SIZE

__all__ = ["SCHEMA", "TubeMQDataSource"]

SCHEMA = (
    "topic string, partition string, offset bigint, message_id bigint, key string, value binary, "
    "attributes map<string,string>, stream_id string, msg_time timestamp, append_time timestamp"
)

try:  # Spark >= 4.2: admission control through read limits
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
except ImportError:  # pragma: no cover - older pyspark: latestOffset() is called without arguments
    ReadLimit = ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]


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
        check_value_type(schema)
        return TubeMQWriter(SourceOptions.parse(self.options), schema.fieldNames())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_value_type(schema)
        return TubeMQStreamWriter(SourceOptions.parse(self.options), schema.fieldNames())


# --- reading ------------------------------------------------------------------------------------------


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    assert isinstance(partition, TubeMQInputPartition)
    return backend.read_batches(options, partition.range)


class TubeMQBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        planned = backend.plan(opts)
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
            ranges.append(TubeMQInputPartition(p.range(start, max(start, end))))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


class TubeMQStreamReader(DataSourceStreamReader):
    """Offsets ``{partitionKey: offset}``; see the module docstring."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._last: dict[str, int] | None = None
        self._planned: dict[str, PlannedPartition] = {}

    def initialOffset(self) -> dict[str, int]:
        planned = backend.plan(self.options)
        spec = self.options.starting
        offsets = {
            key: spec.resolve(key, p.bounds.min_offset, p.bounds.max_offset) for key, p in planned.items()
        }
        self._last = offsets
        return offsets

    def getDefaultReadLimit(self) -> Any:
        cap = self.options.max_messages_per_trigger
        if ReadMaxRows is None or cap is None:
            return super().getDefaultReadLimit()
        return ReadMaxRows(cap)

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        begin = dict(start if start is not None else self._last or {})
        planned = self._planned = backend.plan(self.options)
        cap: int | None = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif limit is None:
            cap = self.options.max_messages_per_trigger
        latest = {key: p.bounds.max_offset for key, p in planned.items()}
        floor = {key: max(begin.get(key, 0), p.bounds.min_offset) for key, p in planned.items()}
        end = capped_offsets(floor, latest, cap)
        # Never move a partition back; keep partitions that are not visible right now.
        result = dict(begin)
        for key, offset in end.items():
            result[key] = max(offset, begin.get(key, 0))
        self._last = result
        return result

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        wanted = {k: (start.get(k, 0), offset) for k, offset in end.items() if offset > start.get(k, 0)}
        if not wanted:
            return []
        planned = self._planned
        if not set(wanted) <= set(planned):  # e.g. a restarted query plans its last batch again
            planned = self._planned = backend.plan(self.options)
        missing = sorted(set(wanted) - set(planned))
        if missing:
            raise RuntimeError(f"partitions {missing} of this micro-batch have no reachable broker now")
        return [TubeMQInputPartition(planned[key].range(*wanted[key])) for key in sorted(wanted)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint only."""


def capped_offsets(start: dict[str, int], latest: dict[str, int], cap: int | None) -> dict[str, int]:
    """End offsets that cover at most ``cap`` index entries past ``start`` in total, shared in proportion
    to each partition's backlog (largest remainders first); ``cap`` None means everything up to ``latest``."""
    backlog = {key: max(0, latest[key] - start[key]) // INDEX_ENTRY_SIZE for key in latest}
    total = sum(backlog.values())
    if cap is None or total <= cap:
        return {key: max(latest[key], start[key]) for key in latest}
    share = {key: backlog[key] * cap // total for key in backlog}
    left = cap - sum(share.values())
    for key in sorted(backlog, key=lambda k: (share[k] - backlog[k], k)):
        if left <= 0:
            break
        if share[key] < backlog[key]:
            share[key] += 1
            left -= 1
    return {key: start[key] + INDEX_ENTRY_SIZE * share[key] for key in latest}


# --- writing ------------------------------------------------------------------------------------------


def check_value_type(schema: StructType) -> None:
    """Refuse, before any task runs, a ``value`` column that is neither string nor binary (as Spark's Kafka
    sink does): an integer would otherwise become that many zero bytes."""
    if "value" not in schema.fieldNames():
        backend.check_columns(schema.fieldNames())
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
        backend.check_columns(columns)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return TubeMQCommitMessage(backend.write_rows(self.options, self.columns, iterator))


class TubeMQStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: SourceOptions, columns: list[str]) -> None:
        self.options = options
        self.columns = columns
        backend.check_columns(columns)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return TubeMQCommitMessage(backend.write_rows(self.options, self.columns, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every message was acknowledged by a broker when its task finished: nothing left to do."""
