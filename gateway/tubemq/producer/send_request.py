"""The producer's SendMessage request (method 13), written field by field as the Java client fills it
(§3.6, §4, §7): :class:`SendRequestTemplate` encodes what stays the same for a producer and topic once.

Every value (ids, tokens, checksums) comes in as an argument, so the bytes can be compared with frames
captured from the Java client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gateway.tubemq.wire.frame import encode_varint
from gateway.tubemq.wire.payload import PreparedMessage
from gateway.tubemq.wire.speedups import compiled_or

__all__ = ["NO_CHECKSUM", "SendRequestLoops", "SendRequestTemplate"]

NO_CHECKSUM = -1
"""``SendMessageRequestP2B.checkSum`` meaning "do not verify"; every client sends it (§4.3)."""


class SendRequestLoops(Protocol):
    """What gateway/tubemq/producer/_send_request.c holds, and its twin :class:`_Python`."""

    def encode_sends(
        self,
        prefix: bytes,
        fields: bytes,
        auth: bytes,
        partition_ids: Sequence[int],
        messages: Sequence[Any],
        /,
    ) -> list[bytes]:
        """For each message: ``prefix``, its partition, its data and flag, ``fields``, its msgType and
        msgTime when not blank, ``auth`` (ints as int64 two's complement varints); ValueError unless there
        is one partition id per message."""


class _Python:
    """The reference of the C loop."""

    @staticmethod
    def encode_sends(
        prefix: bytes, fields: bytes, auth: bytes, partition_ids: Sequence[int], messages: Sequence[Any], /
    ) -> list[bytes]:
        if len(partition_ids) != len(messages):
            raise ValueError("one partition id per message")
        return [
            _request(
                prefix + _int(partition_id) + b"\x22", fields, auth, m.data, m.flag, m.msg_type, m.msg_time
            )
            for partition_id, m in zip(partition_ids, messages, strict=True)
        ]


if TYPE_CHECKING:
    import gateway.tubemq.producer._send_request as _send_request

    _stub: SendRequestLoops = _send_request


class SendRequestTemplate:
    """The one encoder of ``SendMessageRequestP2B`` (method 13): the serialized request of each message of a
    topic, written directly.

    The fields that stay the same for a producer and topic (client id, topic, checksum, sent address, the
    ``authInfo`` tokens: ``visitAuthorizedToken``, ``authAuthorizedToken`` when given) are encoded once;
    each message writes only its partition, ``data``/``flag`` (``payload.prepare_message``), msgType and
    msgTime (which repeat the payload's ``$msgType$``/``$msgTime$``: the broker filters on field 8) around
    them, in field-number order as protobuf does (tests compare the bytes with protobuf's and Java's).
    """

    __slots__ = ("_heads", "_prefix", "_tail")

    def __init__(
        self,
        client_id: str,
        topic: str,
        *,
        sent_addr: int,
        visit_token: int,
        auth_token: str | None = None,
    ) -> None:
        auth = _tag(1, 0) + _int(visit_token)
        if auth_token:
            auth += _text(2, auth_token)
        self._prefix = _text(1, client_id) + _text(2, topic) + _tag(3, 0)
        # checkSum (6) and sentAddr (7) follow flag (5); authInfo (10) closes the message.
        self._tail = (
            _tag(6, 0) + _int(NO_CHECKSUM) + _tag(7, 0) + _int(sent_addr),
            _tag(10, 2) + _len(auth) + auth,
        )
        self._heads: dict[int, bytes] = {}

    def encode(
        self, partition_id: int, data: bytes, flag: int, msg_type: str | None, msg_time: str | None
    ) -> bytes:
        """The serialized request of one message (``msg_type``/``msg_time``: None or blank = absent)."""
        head = self._heads.get(partition_id)
        if head is None:
            head = self._prefix + _int(partition_id) + b"\x22"
            if len(self._heads) < 4096:
                self._heads[partition_id] = head
        fields, auth = self._tail
        return _request(head, fields, auth, data, flag, msg_type, msg_time)

    def encode_many(self, partition_ids: Sequence[int], messages: Sequence[PreparedMessage]) -> list[bytes]:
        """The serialized request of each message to its partition: one call, ``encode_sends`` of the loops
        chosen at import (gateway/tubemq/producer/_send_request.c or its twin, :class:`_Python`)."""
        fields, auth = self._tail
        return _loops.encode_sends(self._prefix, fields, auth, partition_ids, messages)

    def encode_many_py(
        self, partition_ids: Sequence[int], messages: Sequence[PreparedMessage]
    ) -> list[bytes]:
        """:meth:`encode` of each message, in Python."""
        if len(partition_ids) != len(messages):
            raise ValueError("one partition id per message")
        encode = self.encode
        return [
            encode(partition_id, m.data, m.flag, m.msg_type, m.msg_time)
            for partition_id, m in zip(partition_ids, messages, strict=True)
        ]


_UINT64_MASK = (1 << 64) - 1
_FLAGS = {0: b"\x00", 1: b"\x01"}  # a payload's flag: without or with attributes


def _tag(field: int, wire_type: int) -> bytes:
    return encode_varint(field << 3 | wire_type)


def _int(value: int) -> bytes:
    """An int32/int64 field value: negatives take ten bytes (two's complement on 64 bits)."""
    return encode_varint(value & _UINT64_MASK)


def _len(raw: bytes) -> bytes:
    return encode_varint(len(raw))


def _text(field: int, value: str) -> bytes:
    raw = value.encode("utf-8")
    return _tag(field, 2) + encode_varint(len(raw)) + raw


def _request(
    head: bytes,
    fields: bytes,
    auth: bytes,
    data: bytes,
    flag: int,
    msg_type: str | None,
    msg_time: str | None,
) -> bytes:
    """One message's request after its ``head`` (the template's prefix and the message's partition)."""
    parts = [head, encode_varint(len(data)), data, b"\x28", _FLAGS.get(flag) or _int(flag), fields]
    if msg_type:
        parts.append(_text(8, msg_type))
    if msg_time:
        parts.append(_text(9, msg_time))
    parts.append(auth)
    return b"".join(parts)


_loops: SendRequestLoops = compiled_or("gateway.tubemq.producer._send_request", _Python())
