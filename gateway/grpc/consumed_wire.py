"""The protobuf bytes of delivered messages (``PollResponse`` / ``SubscribeResponse``), built by hand.

Both answers are ``repeated ConsumedMessage messages = 1``, so one encoder serves both. Building a message
object per delivered message and serializing it cost about twice as much as the rest of a consumed
message's way through the gateway; here each message is one bytes format, with the fields that many
messages share encoded once (a run's partition, attempt and deadline once per run, the attributes once per
answer), the token counted from the run's first, and the value appended as it is.
The bytes are handed to grpc as they are (``gateway/grpc/wrapping.py`` passes ``bytes`` answers through its
serializer); a test parses them back against the message built with the protobuf library.

Field numbers and types are those of ``proto/tubemq/gateway/v1/gateway.proto`` (``ConsumedMessage``);
proto3 fields with implicit presence are left out at their default value, ``optional`` ones whenever set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import NotImplementedType
from typing import TYPE_CHECKING, Any, Protocol

from gateway.grpc.proto_wire import text_field as _text
from gateway.grpc.proto_wire import varint as _varint
from gateway.service.delivered import DeliveredRun
from gateway.service.delivery import Delivery
from gateway.tubemq.wire import compiled_or

__all__ = ["encode_consumed", "encode_consumed_py"]


class ConsumedWireLoops(Protocol):
    """What gateway/grpc/_consumed_wire.c holds, and its twin :class:`_Python`."""

    def encode_consumed(self, runs: Sequence[Any], /) -> bytes | NotImplementedType:
        """:func:`encode_consumed_py`'s bytes of the runs, or NotImplemented for runs holding anything the
        loop does not take (the caller then runs the reference on all of them)."""


class _Python:
    """The reference of the C loop, which takes every batch."""

    @staticmethod
    def encode_consumed(runs: Sequence[Any], /) -> bytes | NotImplementedType:
        return _encode_runs(runs)


if TYPE_CHECKING:
    import gateway.grpc._consumed_wire as _consumed_wire

    _stub: ConsumedWireLoops = _consumed_wire


def _head(topic: str, partition_key: str, broker_id: int, partition_id: int) -> bytes:
    """Fields 2-5: topic, partition_key, broker_id, partition_id."""
    return b"".join(
        (
            _text(b"\x12", topic) if topic else b"",
            _text(b"\x1a", partition_key) if partition_key else b"",
            b"\x20" + _varint(broker_id) if broker_id else b"",
            b"\x28" + _varint(partition_id) if partition_id else b"",
        )
    )


def _meta(stream_id: str | None, msg_time: str | None, attributes: Mapping[str, str]) -> bytes:
    """Fields 8-10: stream_id, msg_time, the attributes map (one entry message each)."""
    parts = [
        b"" if stream_id is None else _text(b"\x42", stream_id),
        b"" if msg_time is None else _text(b"\x4a", msg_time),
    ]
    for key, value in attributes.items():
        entry = _text(b"\x0a", key) + _text(b"\x12", value)
        parts.append(b"\x52" + _varint(len(entry)) + entry)
    return b"".join(parts)


def _extra(attempt: int, deadline: int) -> bytes:
    """Fields 13 and 14: delivery_attempt, deadline (left out at 0)."""
    first = b"\x68" + _varint(attempt) if attempt else b""
    return first + (b"\x70" + _varint(deadline) if deadline else b"")


def encode_consumed(delivery: Delivery) -> bytes:
    """The serialized ``PollResponse`` (equally ``SubscribeResponse``) of ``delivery``: one call of the loops
    chosen at import (the C loop hands anything odd back: then the reference below)."""
    answer = _loops.encode_consumed(delivery.runs)
    return answer if isinstance(answer, bytes) else _encode_runs(delivery.runs)


def encode_consumed_py(delivery: Delivery) -> bytes:
    """:func:`encode_consumed` in Python: the reference of gateway/grpc/_consumed_wire.c."""
    return _encode_runs(delivery.runs)


def _encode_runs(runs: Sequence[DeliveredRun]) -> bytes:
    out: list[bytes] = []
    append = out.append
    # by the identity of the attributes dict (shared per attribute text; every message is alive during the
    # call, so ids are not reused) and the fields beside it
    metas: dict[tuple[int, str | None, str | None], bytes] = {}
    keys: dict[str | None, bytes] = {None: b""}
    value_heads: dict[int, bytes] = {0: b""}
    varint = _varint
    for run in runs:
        if not run.count:
            continue
        head = _head(run.topic, run.partition_key, run.broker_id, run.partition_id)
        # 13: delivery_attempt, 14: deadline; the messages of a run share them
        extra = _extra(run.attempt, run.deadline_ms)
        seq = run.first
        for msg in run.messages[run.start : run.start + run.count]:
            attributes = msg.attributes
            meta_key = (id(attributes) if attributes else 0, msg.stream_id, msg.msg_time)
            meta = metas.get(meta_key)
            if meta is None:
                meta = metas[meta_key] = _meta(msg.stream_id, msg.msg_time, attributes)
            key = keys.get(msg.key)
            if key is None:
                key = keys[msg.key] = _text(b"\x62", msg.key or "")  # None is in the cache
            body = msg.body
            size = len(body)
            value_head = value_heads.get(size)
            if value_head is None:
                value_head = value_heads[size] = b"\x5a" + varint(size)
            token = b"%d" % seq
            seq += 1
            offset = msg.offset
            message_id = msg.message_id
            fields = b"\x0a%c%b%b%b%b%b%b%b" % (
                len(token),
                token,
                head,
                b"" if offset is None else b"\x30" + varint(offset),
                b"\x38" + varint(message_id) if message_id else b"",
                meta,
                extra,
                value_head,
            )
            append(b"\x0a" + varint(len(fields) + size + len(key)) + fields)
            append(body)
            if key:
                append(key)
    return b"".join(out)


_loops: ConsumedWireLoops = compiled_or("gateway.grpc._consumed_wire", _Python())
