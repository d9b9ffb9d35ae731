"""What the data source asks of TubeMQ - plan, read a range, write rows - over the native client core or,
with the ``gateway`` option, over a tubemq-gateway's REST API (:mod:`gateway.spark.rest`).

Rows read come as Arrow record batches (:mod:`gateway.spark.arrow`). Rows written are Spark ``Row``
tuples whose column names come from the DataFrame: ``value`` (binary or string) is required; ``key``,
``attributes``, ``stream_id`` and ``msg_time`` (timestamp or ``yyyyMMddHHmm`` text) are used when present,
every other column is ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from gateway.spark.arrow import from_messages
from gateway.spark.core import PartitionRange, PlannedPartition, get_core, plan_topic
from gateway.spark.failures import WriteFailed
from gateway.spark.options import SourceOptions
from gateway.tubemq.producer import Producer

__all__ = [
    "WRITE_CHUNK",
    "DataLost",
    "OutgoingRow",
    "check_columns",
    "data_loss",
    "plan",
    "read_batches",
    "to_outgoing",
    "write_rows",
]

log = logging.getLogger(__name__)

WRITE_CHUNK = 1000
"""Rows sent concurrently by one write task before it waits for their answers."""

OutgoingRow = tuple[bytes, str | None, dict[str, str] | None, str | None, datetime | str | None]
"""(value, key, attributes, stream_id, msg_time) of one message to send."""

_OPTIONAL = ("key", "attributes", "stream_id", "msg_time")


def plan(options: SourceOptions) -> dict[str, PlannedPartition]:
    """The partitions of every topic of ``options`` by key, with their stores' bounds (asked now)."""
    if options.gateway is not None:
        from gateway.spark import rest

        return rest.plan(options)
    planned: dict[str, PlannedPartition] = {}
    assert options.masters is not None
    masters = options.masters
    core = get_core(options.timeout, options.tubemq)

    async def plan_all() -> list[dict[str, PlannedPartition]]:
        return await asyncio.gather(
            *(plan_topic(core, masters, topic, options.group_prefix) for topic in options.topics)
        )

    for found in core.run(plan_all()):
        planned.update(found)
    return planned


class DataLost(RuntimeError):
    """Messages a read should return are gone from the broker (``failOnDataLoss`` is true)."""


def data_loss(options: SourceOptions, message: str) -> None:
    """Raise :class:`DataLost` with ``message`` when ``failOnDataLoss`` is true, else log it and go on."""
    if options.fail_on_data_loss:
        raise DataLost(f"{message}; set option failOnDataLoss to false to read on from what exists")
    log.warning("data lost: %s; reading on (failOnDataLoss is false)", message)


def read_batches(options: SourceOptions, task: PartitionRange) -> Iterator[Any]:
    """Arrow record batches of ``task``'s partition in ``[start, end)``, in offset order."""
    if task.end <= task.start:
        return
    if options.gateway is not None:
        from gateway.spark import rest

        yield from rest.read_batches(options, task)
        return
    core = get_core(options.timeout, options.tubemq)
    reader = core.reader(options.group_prefix)
    reader.visit_token = task.visit_token
    lost_before = reader.stats.lost_bytes
    checked = not task.fail_on_data_loss
    for batch in core.iterate(reader.read(task.partition, task.start, task.end, options.stream_ids)):
        if not checked:  # the first register has answered: did the broker skip expired entries?
            checked = True
            _check_expired(task, reader.stats.lost_bytes - lost_before)
        if batch.messages:
            yield from_messages(task.topic, task.key, batch.messages)
    if not checked:
        _check_expired(task, reader.stats.lost_bytes - lost_before)


def _check_expired(task: PartitionRange, lost: int) -> None:
    if lost > 0:
        raise DataLost(
            f"partition {task.key}: offsets {task.start}..{task.start + lost} expired before they were read "
            f"(the broker's oldest is now {task.start + lost}); set option failOnDataLoss to false to read "
            "on from what exists"
        )


def check_columns(columns: Sequence[str]) -> None:
    if "value" not in columns:
        raise ValueError(f"writing to tubemq needs a 'value' column; the DataFrame has {list(columns)}")


def to_outgoing(index: Mapping[str, int], row: Sequence[Any]) -> OutgoingRow:
    """Pick the message fields out of one Row, ``index`` giving each column's position."""
    value = row[index["value"]]
    if value is None:
        raise ValueError("a row has a null 'value': every message needs a body")
    if isinstance(value, str):
        body = value.encode("utf-8")
    elif isinstance(value, bytes | bytearray | memoryview):
        body = bytes(value)
    else:
        raise ValueError(f"a row's 'value' is {type(value).__name__}: it must be string or binary")
    fields = [row[index[name]] if name in index else None for name in _OPTIONAL]
    key, attributes, stream_id, msg_time = fields
    return (
        body,
        str(key) if key is not None else None,
        {str(k): str(v) for k, v in attributes.items()} if attributes else None,
        str(stream_id) if stream_id is not None else None,
        msg_time,
    )


def _chunks(rows: Iterable[Any], columns: Sequence[str]) -> Iterator[list[OutgoingRow]]:
    index = {name: i for i, name in enumerate(columns)}
    chunk: list[OutgoingRow] = []
    for row in rows:
        chunk.append(to_outgoing(index, row))
        if len(chunk) >= WRITE_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


async def _send_chunk(producer: Producer, topic: str, chunk: list[OutgoingRow]) -> int:
    results = await asyncio.gather(
        *(
            producer.send(topic, body, key=key, attributes=attrs, stream_id=stream, msg_time=when)
            for body, key, attrs, stream, when in chunk
        ),
        return_exceptions=True,
    )
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise WriteFailed(
            f"{len(failures)} of {len(chunk)} messages to {topic!r} failed; first: {failures[0]!r}"
        ) from failures[0]
    return len(chunk)


def write_rows(options: SourceOptions, columns: Sequence[str], rows: Iterable[Any]) -> int:
    """Send every row; returns how many; raises :class:`WriteFailed` when any message failed."""
    if options.gateway is not None:
        from gateway.spark import rest

        return sum(rest.send_chunk(options, chunk) for chunk in _chunks(rows, columns))
    assert options.masters is not None
    core = get_core(options.timeout, options.tubemq)
    producer = core.run(core.producer(options.masters, options.topic))
    return sum(core.run(_send_chunk(producer, options.topic, chunk)) for chunk in _chunks(rows, columns))
