"""The rows of a write task as messages, cut into batches bounded in rows and bytes.

A Spark ``Row`` becomes an :data:`OutgoingRow` (:func:`to_outgoing`, :func:`picker`): ``value`` (binary or
string) is required; ``key``, ``attributes``, ``stream_id`` and ``msg_time`` (timestamp or ``yyyyMMddHHmm``
text) are used when present, every other column is ignored.

A task sends its rows in batches (:func:`batches`): a batch ends at ``writeBatchRows`` rows, or before the
row that would take it past ``writeBatchBytes``; a row larger than that alone is a batch of one, so every
row can be sent. A row's bytes (:func:`row_bytes`) are its value plus the text of its key, attribute names
and values, stream id and msg_time: what it holds in memory, and within a few separator characters what
TubeMQ counts against a topic's message size. A task holds at most two batches: the one being sent and
the next, read from Spark meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

__all__ = ["OutgoingRow", "batches", "check_columns", "picker", "row_bytes", "to_outgoing"]

T = TypeVar("T")

OutgoingRow = tuple[bytes, str | None, dict[str, str] | None, str | None, datetime | str | None]
"""(value, key, attributes, stream_id, msg_time) of one message to send."""

_OPTIONAL = ("key", "attributes", "stream_id", "msg_time")
_MSG_TIME_CHARS = len("yyyyMMddHHmm")


def check_columns(columns: Sequence[str]) -> None:
    if "value" not in columns:
        raise ValueError(f"writing to tubemq needs a 'value' column; the DataFrame has {list(columns)}")


def to_outgoing(index: Mapping[str, int], row: Sequence[Any]) -> OutgoingRow:
    """Pick the message fields out of one Row, ``index`` giving each column's position."""
    return picker(index)(row)


def picker(index: Mapping[str, int]) -> Callable[[Sequence[Any]], OutgoingRow]:
    """:func:`to_outgoing` for rows of one DataFrame, the columns' positions looked up once."""
    at = index["value"]
    key_at, attributes_at, stream_at, time_at = (index.get(name) for name in _OPTIONAL)

    def pick(row: Sequence[Any]) -> OutgoingRow:
        value = row[at]
        if value is None:
            raise ValueError("a row has a null 'value': every message needs a body")
        if isinstance(value, str):
            body = value.encode("utf-8")
        elif isinstance(value, bytes | bytearray | memoryview):
            body = bytes(value)
        else:
            raise ValueError(f"a row's 'value' is {type(value).__name__}: it must be string or binary")
        key = None if key_at is None else row[key_at]
        attributes = None if attributes_at is None else row[attributes_at]
        stream_id = None if stream_at is None else row[stream_at]
        return (
            body,
            str(key) if key is not None else None,
            {str(k): str(v) for k, v in attributes.items()} if attributes else None,
            str(stream_id) if stream_id is not None else None,
            None if time_at is None else row[time_at],
        )

    return pick


def row_bytes(row: OutgoingRow) -> int:
    """What one row counts against ``writeBatchBytes``: its value plus the text of its other fields."""
    body, key, attributes, stream_id, msg_time = row
    size = len(body)
    if key is not None:
        size += len(key)
    if attributes:
        size += sum(len(name) + len(value) for name, value in attributes.items())
    if stream_id is not None:
        size += len(stream_id)
    if msg_time is not None:
        size += _MSG_TIME_CHARS if isinstance(msg_time, datetime) else len(msg_time)
    return size


def batches(sized: Iterable[tuple[T, int]], max_rows: int, max_bytes: int) -> Iterator[list[T]]:
    """``(item, bytes)`` pairs, in order, as lists of at most ``max_rows`` items and ``max_bytes`` bytes (an
    item larger than ``max_bytes`` alone is a list of one); a list is handed on as soon as it is full, so
    only one is held here at a time."""
    if max_rows < 1 or max_bytes < 1:
        raise ValueError(f"a batch needs room for a row: max_rows={max_rows}, max_bytes={max_bytes}")
    batch: list[T] = []
    held = 0
    for item, size in sized:
        if batch and held + size > max_bytes:
            yield batch
            batch, held = [], 0
        batch.append(item)
        held += size
        if len(batch) >= max_rows:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch
