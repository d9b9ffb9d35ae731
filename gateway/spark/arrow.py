"""Rows of the ``tubemq`` source as Arrow record batches: one batch per broker batch (or gateway page).

Handing Spark ready ``pyarrow.RecordBatch`` objects skips its per-row tuple conversion. The Arrow schema is
the one Spark derives from ``source.SCHEMA`` (timestamps in microseconds, UTC); ``msg_time`` is the
producer's local wall-clock time (``$msgTime$``) converted to UTC with this process's time zone.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pyarrow as pa  # type: ignore[import-untyped]

from gateway.tubemq.consumer import ConsumedMessage
from gateway.tubemq.errors import InvalidAttribute
from gateway.tubemq.wire import parse_msg_time

__all__ = ["ARROW_SCHEMA", "from_messages", "msg_time_of", "record_batch"]

_TIME = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.string()),
        ("offset", pa.int64()),
        ("message_id", pa.int64()),
        ("key", pa.string()),
        ("value", pa.binary()),
        ("attributes", pa.map_(pa.string(), pa.string())),
        ("stream_id", pa.string()),
        ("msg_time", _TIME),
        ("append_time", _TIME),
    ]
)


def msg_time_of(text: str | None) -> datetime | None:
    """``$msgTime$`` (``yyyyMMddHHmm``, local time) as an aware UTC datetime; None when absent or bad."""
    if not text:
        return None
    try:
        return parse_msg_time(text).astimezone(UTC)
    except InvalidAttribute:
        return None


def record_batch(
    topic: str,
    key: str,
    offsets: Sequence[int | None],
    ids: Sequence[int],
    keys: Sequence[str | None],
    values: Sequence[bytes],
    attributes: Sequence[dict[str, str]],
    stream_ids: Sequence[str | None],
    msg_times: Sequence[str | None],
) -> pa.RecordBatch:
    """One record batch from equally long columns."""
    count = len(ids)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * count, pa.string()),
            pa.array([key] * count, pa.string()),
            pa.array(offsets, pa.int64()),
            pa.array(ids, pa.int64()),
            pa.array(keys, pa.string()),
            pa.array(values, pa.binary()),
            pa.array([list(a.items()) for a in attributes], pa.map_(pa.string(), pa.string())),
            pa.array(stream_ids, pa.string()),
            pa.array([msg_time_of(t) for t in msg_times], _TIME),
            pa.nulls(count, _TIME),
        ],
        schema=ARROW_SCHEMA,
    )


def from_messages(topic: str, key: str, messages: Sequence[ConsumedMessage]) -> pa.RecordBatch:
    return record_batch(
        topic,
        key,
        [m.offset for m in messages],
        [m.message_id for m in messages],
        [m.key for m in messages],
        [m.body for m in messages],
        [m.attributes for m in messages],
        [m.stream_id for m in messages],
        [m.msg_time for m in messages],
    )
