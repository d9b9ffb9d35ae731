"""Publish requests read, and their receipts written, as protobuf bytes by hand (Publish, PublishStream).

Reading a ``PublishRequest`` into protobuf objects and then copying every field out into the service's
:class:`~gateway.service.publish.OutgoingMessage` cost about 2.8 us per message (``dict()`` of a protobuf map
alone 1.4 us), and building a ``PublishResult`` / ``Receipt`` object per message for the answer another 2.5
us: together a sixth of a batched gRPC publish's CPU, and what made it dearer than the same batch over REST
(bench/bench_grpc_floor.py). Here:

* :func:`decode_publish` reads the request bytes straight into service messages (a message's attributes are
  read once per request when messages repeat them, as a batch's messages usually do, and those messages share
  the one mapping, which nothing downstream changes). It reads the encoding the protobuf libraries write
  (each field once, known fields, valid UTF-8); anything else (unknown fields, other wire types, repeated
  scalars, malformed bytes) is handed whole to the protobuf library and converted from its message, so every
  request is read as ``protobuf`` reads it, errors included.
* :func:`publish_response` and :func:`stream_acks` write the answer's bytes from one format per receipt when
  every message was stored (:func:`encode_stored`: in one C call where the extension is built, 3.7 us per
  receipt in Python on the loaded bench machine); an answer holding errors is built with the protobuf
  classes.

The servicer gets a :class:`PublishBatch` in place of the protobuf request (the method handlers' request
deserializers are replaced in :func:`publish_handlers`). Field numbers are those of
``proto/tubemq/gateway/v1/gateway.proto``; tests/grpc/test_publish_wire.py holds both directions against the
protobuf library under hypothesis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import NotImplementedType
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from gateway.grpc.convert import outgoing, publish_result
from gateway.grpc.errors import error_status
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.proto_wire import read_varint, text_field, varint
from gateway.service.errors import ServiceError
from gateway.service.publish import OutgoingMessage, PublishOutcome
from gateway.tubemq.producer import SendResult
from gateway.tubemq.wire import compiled_or

__all__ = [
    "PublishBatch",
    "decode_publish",
    "decode_publish_py",
    "decode_stream_publish",
    "encode_stored",
    "encode_stored_py",
    "failed_acks",
    "leading_topic",
    "publish_handlers",
    "publish_response",
    "stream_acks",
]


@dataclass(slots=True)
class PublishBatch:
    """A ``PublishRequest`` or ``PublishStreamRequest`` (they share their fields), read into the service's
    messages."""

    topic: str
    messages: list[OutgoingMessage]
    #: a ``PublishStreamRequest``'s ``idempotency_key`` (None: none)
    key: str | None = None

    def release(self) -> None:
        """Drop the messages once their publish ended: grpc.aio keeps a call's last request (its request
        reader holds it until collected, and a refusal's traceback holds the handler's frames), which for
        a 20 MiB message would stay in memory long after the call ended."""
        self.messages.clear()


class _Irregular(Exception):
    """The request is not in the plain encoding: read it with the protobuf library."""


class PublishWireLoops(Protocol):
    """What gateway/grpc/_publish_wire.c holds, and its twin :class:`_Python`."""

    def decode_publish(self, raw: bytes, message_class: Any, /) -> tuple[str, list[Any]] | NotImplementedType:
        """The topic and messages (``message_class`` each) of a request in the plain encoding (each field
        once, known fields, valid UTF-8), NotImplemented for any other (the caller then reads it with the
        protobuf library)."""

    def encode_receipts(self, outcomes: Sequence[Any], first: int, tag: int, /) -> bytes | NotImplementedType:
        """:func:`encode_stored_py`'s bytes, or NotImplemented for outcomes holding anything the loop does
        not take, a failed one included (the caller then runs the reference, which says what is wrong)."""


class _Python:
    """The reference of the C loops: :func:`_decode` (which builds ``OutgoingMessage`` itself) and
    :func:`encode_stored_py`."""

    @staticmethod
    def decode_publish(raw: bytes, message_class: Any, /) -> tuple[str, list[Any]] | NotImplementedType:
        try:
            batch = _decode(raw)
        except (_Irregular, IndexError, ValueError):  # UnicodeDecodeError is a ValueError
            return NotImplemented  # type: ignore[no-any-return]  # typeshed derives its type from Any
        return batch.topic, batch.messages

    @staticmethod
    def encode_receipts(outcomes: Sequence[Any], first: int, tag: int, /) -> bytes | NotImplementedType:
        return encode_stored_py(tag, first, outcomes)


if TYPE_CHECKING:
    import gateway.grpc._publish_wire as _publish_wire

    _stub: PublishWireLoops = _publish_wire


def decode_publish(raw: bytes) -> PublishBatch:
    """The batch of a serialized ``PublishRequest`` (equally a ``PublishStreamRequest``): the plain encoding
    read in one call of the loops chosen at import, anything else by the protobuf library."""
    read = _loops.decode_publish(raw, OutgoingMessage)
    return PublishBatch(*read) if isinstance(read, tuple) else _parsed(raw)


def decode_publish_py(raw: bytes) -> PublishBatch:
    """:func:`decode_publish` in Python: the reference of ``decode_publish`` in ``_publish_wire.c``."""
    try:
        return _decode(raw)
    except (_Irregular, IndexError, ValueError):  # UnicodeDecodeError is a ValueError
        return _parsed(raw)


def _parsed(raw: bytes) -> PublishBatch:
    """A ``PublishRequest`` read by the protobuf library (DecodeError for what it cannot read)."""
    request = pb.PublishRequest.FromString(raw)
    return PublishBatch(request.topic, [outgoing(m) for m in request.messages])


def decode_stream_publish(raw: bytes) -> PublishBatch:
    """The batch of a serialized ``PublishStreamRequest``: :func:`decode_publish` reads the plain encoding
    (topic and messages); one with an ``idempotency_key`` (a field the plain encoding has not) is read by the
    protobuf library."""
    read = _loops.decode_publish(raw, OutgoingMessage)
    if isinstance(read, tuple):
        return PublishBatch(*read)
    request = pb.PublishStreamRequest.FromString(raw)
    messages = [outgoing(m) for m in request.messages]
    return PublishBatch(request.topic, messages, request.idempotency_key or None)


def leading_topic(head: bytes) -> str | None:
    """The topic of the ``PublishRequest`` whose first bytes are ``head``, when it is the request's first
    field (the protobuf libraries write fields in number order) and whole within ``head``; else None."""
    if len(head) < 2 or head[0] != 0x0A:
        return None
    try:
        size, start = read_varint(head, 1)
        if start + size > len(head):
            return None
        return head[start : start + size].decode()
    except (IndexError, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def _length(raw: bytes, pos: int, end: int) -> tuple[int, int]:
    """A length prefix at ``raw[pos]``: (start, stop) of the bytes it announces, within ``end``."""
    size = raw[pos]
    if size < 0x80:
        start = pos + 1
    else:
        size, start = read_varint(raw, pos)
    stop = start + size
    if stop > end:
        raise _Irregular
    return start, stop


def _decode(raw: bytes) -> PublishBatch:
    end = len(raw)
    pos = 0
    topic: str | None = None
    messages: list[OutgoingMessage] = []
    append = messages.append
    # the attributes of a request's messages, by their encoded bytes: read once, shared by the messages
    attribute_maps: dict[bytes, dict[str, str]] = {}
    while pos < end:
        tag = raw[pos]
        start, stop = _length(raw, pos + 1, end)
        if tag == 0x12:  # messages (2)
            append(_message(raw, start, stop, attribute_maps))
        elif tag == 0x0A and topic is None:  # topic (1)
            topic = raw[start:stop].decode()
        else:
            raise _Irregular
        pos = stop
    return PublishBatch(topic or "", messages)


def _message(raw: bytes, pos: int, end: int, attribute_maps: dict[bytes, dict[str, str]]) -> OutgoingMessage:
    value = b""
    key = stream_id = msg_time = None
    partition = None
    attributes: dict[str, str] | None = None
    seen = 0  # the fields read, a bit each: a repeated one is left to the protobuf library
    while pos < end:
        tag = raw[pos]
        if tag == 0x18:  # partition (3): int32
            if seen & 8:
                raise _Irregular
            seen |= 8
            partition, pos = read_varint(raw, pos + 1)
            if pos > end:
                raise _Irregular
            if partition > 0x7FFFFFFF:  # an int32 keeps the low 32 bits, as a signed number
                partition = (partition + 0x80000000 & 0xFFFFFFFF) - 0x80000000
            continue
        size = raw[pos + 1]  # the length, inline: this runs for every field of every message
        if size < 0x80:
            start = pos + 2
        else:
            size, start = read_varint(raw, pos + 1)
        stop = start + size
        if stop > end:
            raise _Irregular
        if tag == 0x0A and not seen & 2:  # value (1)
            seen |= 2
            value = raw[start:stop]
        elif tag == 0x22:  # attributes (4): one map entry per field; a message's entries are adjacent
            if seen & 16:
                raise _Irregular
            seen |= 16
            while stop < end and raw[stop] == 0x22:
                stop = _length(raw, stop + 1, end)[1]
            entries = raw[pos:stop]
            attributes = attribute_maps.get(entries)
            if attributes is None:
                attributes = attribute_maps[entries] = _attributes(raw, pos, stop)
        elif tag == 0x12 and not seen & 4:  # key (2)
            seen |= 4
            key = raw[start:stop].decode()
        elif tag == 0x2A and not seen & 32:  # stream_id (5)
            seen |= 32
            stream_id = raw[start:stop].decode()
        elif tag == 0x32 and not seen & 64:  # msg_time (6)
            seen |= 64
            msg_time = raw[start:stop].decode()
        else:
            raise _Irregular
        pos = stop
    return OutgoingMessage(value, key, partition, attributes or None, stream_id, msg_time)


def _attributes(raw: bytes, pos: int, end: int) -> dict[str, str]:
    """The map entries (fields 4) in ``raw[pos:end]``."""
    attributes: dict[str, str] = {}
    while pos < end:
        start, stop = _length(raw, pos + 1, end)  # raw[pos] is 0x22
        name = text = ""
        at = start
        while at < stop:
            tag = raw[at]
            first, last = _length(raw, at + 1, stop)
            if tag == 0x0A:
                name = raw[first:last].decode()
            elif tag == 0x12:
                text = raw[first:last].decode()
            else:
                raise _Irregular
            at = last
        attributes[name] = text
        pos = stop
    return attributes


# --- answers ----------------------------------------------------------------------------------------------


class _Receipts:
    """Stored results as ``PublishResult`` / ``PublishAck`` bytes (field 1: the message's position, field 2:
    its ``Receipt``); what the messages of one answer share (a partition's fields, the append time) is
    encoded once per answer."""

    __slots__ = ("_partitions", "_times")

    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int, int], bytes] = {}
        self._times: dict[int, bytes] = {}

    def __call__(self, position: int, r: SendResult) -> bytes:
        where = (r.partition_key, r.broker_id, r.partition_id)
        head = self._partitions.get(where)
        if head is None:  # Receipt fields 1-3
            head = self._partitions[where] = b"%b%b%b" % (
                text_field(b"\x0a", r.partition_key) if r.partition_key else b"",
                b"\x10" + varint(r.broker_id) if r.broker_id else b"",
                b"\x18" + varint(r.partition_id) if r.partition_id else b"",
            )
        appended = self._times.get(r.append_time_ms)
        if appended is None:  # field 6
            appended = self._times[r.append_time_ms] = (
                b"\x30" + varint(r.append_time_ms) if r.append_time_ms else b""
            )
        offset, message_id = r.append_offset, r.message_id
        stored = b"%b%b%b%b" % (
            head,
            b"\x20" + varint(offset) if offset else b"",
            b"\x28" + varint(message_id) if message_id else b"",
            appended,
        )
        return b"%b\x12%b%b" % (b"\x08" + varint(position) if position else b"", varint(len(stored)), stored)


def encode_stored(tag: int, first: int, outcomes: Sequence[PublishOutcome]) -> bytes:
    """Stored ``outcomes`` as repeated field ``tag`` (its key byte) of ``PublishResult`` / ``PublishAck``,
    each at position ``first + index``: one call of the loops chosen at import (the C loop hands anything odd
    back, a failed outcome included: then the reference below)."""
    encoded = _loops.encode_receipts(outcomes, first, tag)
    return encoded if isinstance(encoded, bytes) else encode_stored_py(tag, first, outcomes)


def encode_stored_py(tag: int, first: int, outcomes: Sequence[PublishOutcome]) -> bytes:
    """:func:`encode_stored` in Python: the reference of ``encode_receipts`` in ``_publish_wire.c``."""
    stored = _Receipts()
    key = bytes((tag,))
    parts = []
    for outcome in outcomes:
        if outcome.result is None:
            raise ValueError(f"outcome {outcome.index} was not stored")
        result = stored(first + outcome.index, outcome.result)
        parts.append(b"%b%b%b" % (key, varint(len(result)), result))
    return b"".join(parts)


def publish_response(topic: str, outcomes: Sequence[PublishOutcome]) -> pb.PublishResponse | bytes:
    """The ``PublishResponse`` of ``outcomes``: its bytes when every message was stored, else the message."""
    if any(o.result is None for o in outcomes):
        results = [publish_result(o) for o in outcomes]
        return pb.PublishResponse(topic=topic, results=results, failed=sum(1 for o in outcomes if not o.ok))
    return (text_field(b"\x0a", topic) if topic else b"") + encode_stored(0x12, 0, outcomes)


def stream_acks(first: int, outcomes: Sequence[PublishOutcome]) -> bytes:
    """The ``acks`` (field 1 of ``PublishStreamResponse``) of one request's ``outcomes``, its first message
    being the stream's ``first``: bytes that joined with other requests' make the response."""
    if all(o.result is not None for o in outcomes):
        return encode_stored(0x0A, first, outcomes)
    stored = _Receipts()
    parts = []
    for outcome in outcomes:
        sequence = first + outcome.index
        if outcome.result is not None:
            ack = stored(sequence, outcome.result)
        else:
            assert outcome.error is not None
            ack = pb.PublishAck(sequence=sequence, error=error_status(outcome.error)).SerializeToString()
        parts.append(b"\x0a%b%b" % (varint(len(ack)), ack))
    return b"".join(parts)


def failed_acks(first: int, count: int, error: ServiceError) -> bytes:
    """The acks of a request whose ``count`` messages all failed with ``error``."""
    status = error_status(error)
    parts = []
    for i in range(count):
        ack = pb.PublishAck(sequence=first + i, error=status).SerializeToString()
        parts.append(b"\x0a%b%b" % (varint(len(ack)), ack))
    return b"".join(parts)


# --- registration -----------------------------------------------------------------------------------------


def publish_handlers(handlers: Mapping[str, grpc.RpcMethodHandler]) -> dict[str, grpc.RpcMethodHandler]:
    """``handlers`` (method name -> handler, as the generated ``add_*_to_server`` builds them) with the
    publish methods' requests read by :func:`decode_publish` and :func:`decode_stream_publish`."""
    replaced = dict(handlers)
    replaced["Publish"] = replaced["Publish"]._replace(request_deserializer=decode_publish)
    replaced["PublishStream"] = replaced["PublishStream"]._replace(request_deserializer=decode_stream_publish)
    return replaced


_loops: PublishWireLoops = compiled_or("gateway.grpc._publish_wire", _Python())
