"""What a poll returns: a batch of decoded messages of one partition, and how its offsets are known.

Offsets are broker **index offsets** (§10.3): byte positions in the index of a topic store, one 28-byte entry
per stored message. All partitions of a store share one index, so a partition's offset moves by 28 for every
message of the store, also for messages of sibling partitions (and entries the broker filtered out); the
broker skips those when reading. The wire therefore carries no per-message offset (§4.6), only

* ``curr_offset``: the offset this read started at (exact), and
* ``max_offset``: the end of the store's index at read time.

A batch is **dense** when its ``fetched_count`` wire messages occupy consecutive index entries: then message
``i`` of the wire list sits at ``curr_offset + 28 * i`` and the batch ends at
``curr_offset + 28 * fetched_count``. A poll can prove density only when the batch reaches the end of the
index (``curr_offset + 28 * fetched_count == max_offset``); then every :class:`ConsumedMessage` carries its
exact ``offset``. Otherwise ``offset`` is None, and the offset the batch ended at is learnt from the confirm
(the committed offset): :meth:`ConsumedBatch.offsets_given_end` turns that into exact per-message offsets
when the batch was dense after all (always the case on a topic with one partition per store and no filter).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.net.outcomes import AnswersDecoder
from gateway.tubemq.wire.frame import Frame
from gateway.tubemq.wire.payload import FLAG_HAS_ATTRIBUTES, PayloadDecodeError, crc32, decode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import SUCCESS_PREFIX, RpcResponse
from gateway.tubemq.wire.speedups import compiled_or

__all__ = [
    "INDEX_ENTRY_SIZE",
    "ConsumedBatch",
    "ConsumedMessage",
    "DecodeStats",
    "DecodedAnswer",
    "answer_reader",
    "decode_messages",
    "decode_messages_py",
    "is_dense_to_end",
    "lag_entries",
    "offset_at_index",
    "read_answer",
]

_Prefix = tuple[int, dict[str, str], str | None, str | None, str | None]

#: bytes per index entry; offsets advance by this much per stored message (§10.3)
INDEX_ENTRY_SIZE = 28
_PREFIX = 4  # int32 attribute length before the attribute text (§4.1)


class WireMessage(Protocol):
    """The fields of a ``TransferedMessage`` that decoding reads."""

    @property
    def messageId(self) -> int: ...

    @property
    def checkSum(self) -> int: ...

    @property
    def payLoadData(self) -> bytes: ...

    @property
    def flag(self) -> int: ...


@dataclass(slots=True)
class ConsumedMessage:
    """One delivered message; treat it as read-only (not frozen: a frozen dataclass costs five times as
    much to build, and a poll builds thousands).

    ``stream_id`` is the ``$msgType$`` attribute (filter item), ``msg_time`` the ``$msgTime$`` text
    (``yyyyMMddHHmm``, producer local time), ``key`` the publish key (``$msgKey$``, decoded), ``attributes``
    the other attribute items: one dict shared by the messages of a batch that carry the same attribute
    text (renderers cache by it), so never change it in place. ``index`` is the
    position in the broker's answer (counting messages dropped on the client); ``offset`` is the message's
    exact index offset, or None when it cannot be known yet (module docstring).
    """

    message_id: int
    body: bytes
    attributes: dict[str, str]
    stream_id: str | None
    msg_time: str | None
    flag: int
    index: int
    offset: int | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumedBatch:
    """Messages of one partition from one GetMessage, to be confirmed with ``confirm_context``.

    ``lag_bytes`` is the broker's ``currDataDlt``: data bytes still unread behind this read (-1 unknown).
    ``fetched_count`` is how many messages the broker sent; ``messages`` can be fewer (CRC failures and
    client-side filter mismatches are dropped, as Java does).
    """

    topic: str
    partition_key: str
    partition_id: int
    broker_id: int
    broker: NodeAddress
    messages: list[ConsumedMessage]
    curr_offset: int
    max_offset: int
    lag_bytes: int
    fetched_count: int
    confirm_context: str
    offsets_exact: bool = False
    body_bytes: int = 0

    def __repr__(self) -> str:
        return (
            f"<ConsumedBatch {self.partition_key} messages={len(self.messages)}/{self.fetched_count} "
            f"curr_offset={self.curr_offset} max_offset={self.max_offset} exact={self.offsets_exact}>"
        )

    @property
    def dense_end(self) -> int:
        """The offset right after this batch if it is dense (module docstring)."""
        return offset_at_index(self.curr_offset, self.fetched_count)

    def offsets_given_end(self, end_offset: int) -> list[int] | None:
        """Exact offsets of ``messages`` given the offset the batch ended at (the committed offset after
        confirming it as consumed, or the next batch's ``curr_offset``); None if the batch was not dense."""
        if self.curr_offset < 0 or end_offset != self.dense_end:
            return None
        return [offset_at_index(self.curr_offset, m.index) for m in self.messages]


def offset_at_index(curr_offset: int, index: int) -> int:
    """Where the wire message at ``index`` of a read from ``curr_offset`` sits in a dense batch; in any
    batch no message at or after ``index`` sits before it (each message takes at least one entry), so a
    read from there skips none of them."""
    return curr_offset + INDEX_ENTRY_SIZE * index


@dataclass(slots=True)
class DecodeStats:
    """Counts of what decoding kept and dropped."""

    kept: int = 0
    bytes: int = 0
    bad_checksum: int = 0
    bad_payload: int = 0
    filtered: int = 0


def parse_prefix(data: bytes, flag: int) -> _Prefix | None:
    """The attribute prefix of a payload with flag bit 0: (where the body starts, user attributes,
    msg_type, msg_time, key); None when the payload cannot be split (PayloadDecodeError)."""
    try:
        decoded = decode_payload(data, flag)
    except PayloadDecodeError:
        return None
    return len(data) - len(decoded.body), decoded.attributes, decoded.msg_type, decoded.msg_time, decoded.key


def decode_messages_py(
    wire: Iterable[WireMessage],
    filters: frozenset[str] | None,
    curr_offset: int,
    exact: bool,
) -> tuple[list[ConsumedMessage], DecodeStats]:
    """Decode a GetMessage answer (§4.6): verify each CRC, split attributes from the body and drop what the
    client filter rejects. With a filter, Java drops messages whose ``$msgType$`` is missing or not
    listed (the broker only compared hashes). ``exact`` says the batch is proven dense: offsets are set.

    The pure-Python reference of :func:`decode_messages` (the compiled loop where the extension is built).
    """
    stats = DecodeStats()
    messages: list[ConsumedMessage] = []
    append = messages.append
    kept_bytes = 0
    # A batch usually repeats a few attribute prefixes (same stream id and minute): parse each one once,
    # and compare a message with the previous one's prefix before slicing and hashing its own.
    prefixes: dict[bytes, _Prefix] = {}
    no_attributes: dict[str, str] = {}  # shared, like the dict of each attribute text
    last_key = b""
    last: _Prefix | None = None
    for index, item in enumerate(wire):
        data = item.payLoadData
        flag = item.flag
        if crc32(data) & 0x7FFFFFFF != item.checkSum:
            stats.bad_checksum += 1
            continue
        if flag & FLAG_HAS_ATTRIBUTES:
            if last is None or not data.startswith(last_key):
                key = (
                    data[: _PREFIX + int.from_bytes(data[:_PREFIX], "big", signed=True)]
                    if len(data) >= _PREFIX
                    else b""
                )
                known = prefixes.get(key)
                if known is None:
                    known = parse_prefix(data, flag)
                    if known is None:
                        stats.bad_payload += 1
                        continue
                    prefixes[key] = known
                last_key, last = key, known
            start, attributes, msg_type, msg_time, msg_key = last
            body = data[start:]
        else:
            body, attributes, msg_type, msg_time, msg_key = data, no_attributes, None, None, None
        if filters and (not msg_type or msg_type not in filters):
            stats.filtered += 1
            continue
        append(
            ConsumedMessage(
                item.messageId,
                body,
                attributes,
                msg_type,
                msg_time,
                flag,
                index,
                curr_offset + INDEX_ENTRY_SIZE * index if exact else None,
                msg_key,
            )
        )
        kept_bytes += len(body)
    stats.bytes = kept_bytes
    stats.kept = len(messages)
    return messages, stats


#: the fields __init__ assigns, in its order: the C loop stores them (slots) in this order
_MESSAGE_FIELDS = tuple(field.name for field in fields(ConsumedMessage))


#: what decode_answer gives: the answer's offsets and counts, the messages kept, the decode counts
_Decoded = tuple[int, int, int, int, list[Any], int, int, int, int]


class BatchLoops(Protocol):
    """What gateway/tubemq/consumer/_batch.c holds, and its twin :class:`_Python`."""

    def set_message_type(self, cls: type, field_names: tuple[str, ...], /) -> None:
        """The message class decode_messages builds (the C loop stores its slots directly, in the order of
        ``field_names``, so it checks the class's shape here and refuses any other)."""

    def set_crc32(self, crc32: Callable[[Any], int], /) -> None:
        """The CRC-32 function the loops check payloads with (``payload.crc32``)."""

    def decode_messages(
        self,
        wire: Iterable[Any],
        filters: frozenset[str] | None,
        curr_offset: int,
        exact: bool,
        parse_prefix: Callable[[bytes, int], _Prefix | None],
        /,
    ) -> tuple[list[Any], int, int, int, int]:
        """:func:`decode_messages_py` with ``parse_prefix`` (this module's) for the attribute prefixes; the
        counts as (kept bytes, bad checksums, bad payloads, filtered)."""

    def decode_answer(
        self,
        buffer: bytes,
        enveloped: bool,
        prefix: bytes,
        method: int,
        filters: frozenset[str] | None,
        parse_prefix: Callable[[bytes, int], _Prefix | None],
        /,
    ) -> _Decoded | None:
        """A GetMessage answer of code 200 read from its bytes (the answer's data, or with ``enveloped`` the
        payload of the usual success frame after ``prefix``) and its messages decoded: its offsets, how many
        messages it held, those kept and the counts; None for any other answer, or one laid out otherwise
        than brokers write it (the caller then parses it with the protobuf library: :func:`read_answer`)."""


class _Python:
    """The reference of the C loops: :func:`decode_messages_py`, which calls :func:`parse_prefix` itself, and
    :func:`read_answer` for whole answers."""

    @staticmethod
    def set_message_type(cls: type, field_names: tuple[str, ...], /) -> None:
        """Nothing to learn: :func:`decode_messages_py` builds each message by calling the class."""

    @staticmethod
    def set_crc32(crc32: Callable[[Any], int], /) -> None:
        """Nothing to learn: :func:`decode_messages_py` calls ``payload.crc32`` itself."""

    @staticmethod
    def decode_messages(
        wire: Iterable[Any],
        filters: frozenset[str] | None,
        curr_offset: int,
        exact: bool,
        parse_prefix: Callable[[bytes, int], _Prefix | None],
        /,
    ) -> tuple[list[Any], int, int, int, int]:
        messages, stats = decode_messages_py(wire, filters, curr_offset, exact)
        return messages, stats.bytes, stats.bad_checksum, stats.bad_payload, stats.filtered

    @staticmethod
    def decode_answer(
        buffer: bytes,
        enveloped: bool,
        prefix: bytes,
        method: int,
        filters: frozenset[str] | None,
        parse_prefix: Callable[[bytes, int], _Prefix | None],
        /,
    ) -> _Decoded | None:
        """None: in Python the answer is parsed with the protobuf library and read by :func:`read_answer`,
        the reference, which is that same way."""
        return None


if TYPE_CHECKING:
    import gateway.tubemq.consumer._batch as _batch

    _stub: BatchLoops = _batch

_loops: BatchLoops = compiled_or("gateway.tubemq.consumer._batch", _Python())
_loops.set_message_type(ConsumedMessage, _MESSAGE_FIELDS)
_loops.set_crc32(crc32)


def decode_messages(
    wire: Iterable[WireMessage],
    filters: frozenset[str] | None,
    curr_offset: int,
    exact: bool,
) -> tuple[list[ConsumedMessage], DecodeStats]:
    """:func:`decode_messages_py`'s result in one call, ``decode_messages`` of the loops chosen at import
    (gateway/tubemq/consumer/_batch.c or its twin, :class:`_Python`)."""
    messages, kept_bytes, bad_checksum, bad_payload, filtered = _loops.decode_messages(
        wire, filters, curr_offset, exact, parse_prefix
    )
    return messages, DecodeStats(len(messages), kept_bytes, bad_checksum, bad_payload, filtered)


@dataclass(frozen=True, slots=True)
class DecodedAnswer:
    """A GetMessage answer of code 200, decoded: its offsets (-1 where the answer has none), how many
    messages the broker sent, and those kept (:func:`decode_messages`)."""

    curr_offset: int
    max_offset: int
    lag_bytes: int
    fetched_count: int
    messages: list[ConsumedMessage]
    stats: DecodeStats

    @property
    def offsets_exact(self) -> bool:
        return is_dense_to_end(self.curr_offset, self.max_offset, self.fetched_count)


def read_answer(answer: broker_pb.GetMessageResponseB2C, filters: frozenset[str] | None) -> DecodedAnswer:
    """A parsed answer of code 200 decoded: the reference of the compiled reader (:func:`answer_reader`),
    and the way of answers that reader leaves to the protobuf library."""
    curr = answer.currOffset if answer.HasField("currOffset") else -1
    max_offset = answer.maxOffset if answer.HasField("maxOffset") else -1
    fetched = len(answer.messages)
    exact = is_dense_to_end(curr, max_offset, fetched)
    messages, stats = decode_messages(answer.messages, filters, curr, exact)
    lag = answer.currDataDlt if answer.HasField("currDataDlt") else -1
    return DecodedAnswer(curr, max_offset, lag, fetched, messages, stats)


def answer_reader(filters: frozenset[str] | None) -> AnswersDecoder | None:
    """What reads a GetMessage answer straight from its bytes in one C pass (the answer's fields, the CRCs,
    the attribute prefixes, the filter, the messages), for ``ConnectionPool.request_decoded``: a
    :class:`DecodedAnswer` for a 200 answer as brokers write it, None for any other (then parsed with the
    protobuf library and decoded by :func:`read_answer`, which gives the same). On the pure path every
    answer is left to that way (the twin's ``decode_answer`` takes none)."""
    decode = _loops.decode_answer

    def read(answers: Sequence[object], method: int) -> list[DecodedAnswer | None]:
        out: list[DecodedAnswer | None] = []
        for item in answers:
            if type(item) is Frame:
                decoded = decode(item.payload, True, SUCCESS_PREFIX, method, filters, parse_prefix)
            elif type(item) is RpcResponse and item.method == method and type(item.data) is bytes:
                decoded = decode(item.data, False, SUCCESS_PREFIX, method, filters, parse_prefix)
            else:
                decoded = None
            out.append(None if decoded is None else _answer_of(decoded))
        return out

    return read


def _answer_of(decoded: _Decoded) -> DecodedAnswer:
    curr, max_offset, lag, fetched, messages, kept_bytes, bad_checksum, bad_payload, filtered = decoded
    stats = DecodeStats(len(messages), kept_bytes, bad_checksum, bad_payload, filtered)
    return DecodedAnswer(curr, max_offset, lag, fetched, messages, stats)


def is_dense_to_end(curr_offset: int, max_offset: int, fetched_count: int) -> bool:
    """True when ``fetched_count`` messages read from ``curr_offset`` fill the index up to ``max_offset``:
    each message takes at least one entry, so they took exactly one each and no entry was skipped."""
    return (
        curr_offset >= 0
        and fetched_count > 0
        and curr_offset + INDEX_ENTRY_SIZE * fetched_count == max_offset
    )


def lag_entries(curr_offset: int, max_offset: int, fetched_count: int) -> int:
    """Index entries of the store still unread after a read of ``fetched_count`` messages from
    ``curr_offset`` (-1 when an offset is unknown). It counts sibling partitions' entries too, so it is an
    upper bound of the partition's unread messages, exact with one partition per store and no filter."""
    if not 0 <= curr_offset <= max_offset:
        return -1
    return max(0, (max_offset - curr_offset) // INDEX_ENTRY_SIZE - fetched_count)
