"""Message payloads (§4): attribute prefix, flag, CRC, publish rules, ``String.hashCode``, ``sentAddr``.

A payload is the ``data`` of a SendMessage request and the ``payLoadData`` of a fetched message. When flag
bit 0 is set it starts with ``int32 BE attrLen`` and that many bytes of UTF-8 attribute text
(``$msgType$=t,$msgTime$=yyyyMMddHHmm,$msgKey$=k,key=value,...``), followed by the body; otherwise it is the
body.

The attribute text (the reserved items, the message key, msgTime) is :mod:`.attributes`; this module
re-exports its names. Here: the payload's prefix, flag and CRC, the publish rules of a message to send
(:func:`prepare_message`), and the scalar fields ``String.hashCode`` and ``sentAddr``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from gateway.tubemq.errors import InvalidAttribute, InvalidMessage
from gateway.tubemq.wire.attributes import (
    ITEM_SEP,
    KV_SEP,
    RESERVED_IN_TEXT,
    TOKEN_MSG_KEY,
    TOKEN_MSG_TIME,
    TOKEN_MSG_TYPE,
    build_attribute_text,
    decode_key,
    encode_key,
    format_msg_time,
    is_msg_time,
    join_text,
    parse_attribute_text,
    parse_msg_time,
    validate_attribute_key,
    validate_attribute_value,
)

__all__ = [
    "FLAG_HAS_ATTRIBUTES",
    "MAX_KEY_LENGTH",
    "MAX_STREAM_ID_LENGTH",
    "TOKEN_MSG_KEY",
    "TOKEN_MSG_TIME",
    "TOKEN_MSG_TYPE",
    "BatchPreparer",
    "DecodedPayload",
    "PayloadDecodeError",
    "PreparedMessage",
    "build_attribute_text",
    "crc32",
    "crc32_checksum",
    "decode_key",
    "decode_payload",
    "encode_key",
    "encode_payload",
    "format_msg_time",
    "ipv4_to_sent_addr",
    "java_string_hash",
    "parse_attribute_text",
    "parse_msg_time",
    "prepare_message",
    "validate_attribute_key",
    "validate_attribute_value",
]

FLAG_HAS_ATTRIBUTES = 0x1
_PREFIX_LEN = 4


class PayloadDecodeError(ValueError):
    """A payload cannot be split into attributes and body (truncated prefix, bad length or UTF-8)."""


@dataclass(frozen=True, slots=True)
class DecodedPayload:
    """A decoded payload: the body, the user attributes and the reserved ``$msgType$``/``$msgTime$``/
    ``$msgKey$`` (the key decoded)."""

    body: bytes
    attributes: dict[str, str]
    msg_type: str | None = None
    msg_time: str | None = None
    key: str | None = None


# --- a message to publish: the publish rules ------------------------------------------------------

MAX_KEY_LENGTH = 1024
MAX_STREAM_ID_LENGTH = 256
_SEPARATORS = (ITEM_SEP, KV_SEP, *RESERVED_IN_TEXT)
_SEPARATORS_RE = re.compile("|".join(re.escape(token) for token in _SEPARATORS))


@dataclass(slots=True)
class PreparedMessage:
    """A message ready to send, prepared once by :func:`prepare_message`: the SendMessage ``data`` and
    ``flag``, the ``msgType``/``msgTime`` fields (trimmed; None = absent), ``size`` as the topic's limit
    counts it (body plus attribute text in characters, as the Java producer counts it) and the message's
    pin: a ``key`` or a ``partition`` (an index or a ``brokerId:topic:partitionId`` key), else None."""

    data: bytes
    flag: int
    msg_type: str | None
    msg_time: str | None
    size: int
    key: str | None = None
    partition: int | str | None = None


def prepare_message(
    body: bytes,
    attributes: Mapping[str, str] | None = None,
    stream_id: str | None = None,
    msg_time: str | datetime | None = None,
    key: str | None = None,
    partition: int | str | None = None,
) -> PreparedMessage:
    """Check every field of a message to publish by the publish rules, then encode it once.

    The rules, in this order (the first broken one raises :class:`InvalidMessage` naming its field): a
    non-empty body; a key of 1-1024 characters; a partition index >= 0; attributes mapping strings to
    strings, each name and value non-blank and free of ``,``, ``=`` and the reserved tokens; a streamId
    (``$msgType$``, trimmed) of 1-256 characters, not blank, free of ``,``, ``=`` and the reserved tokens;
    a msgTime of ``yyyyMMddHHmm`` (a datetime is formatted so). Text must be valid Unicode (no lone
    surrogates). Whether ``size`` fits the topic is the sender's check (it knows the topic's limit).
    """
    if not body:
        raise InvalidMessage("value must not be empty", "value")
    if key is not None:
        if not key or len(key) > MAX_KEY_LENGTH:
            raise InvalidMessage(f"key must be 1-{MAX_KEY_LENGTH} characters", "key")
        _check_unicode(key, "key", "key")
    if isinstance(partition, int) and partition < 0:
        raise InvalidMessage("partition must be >= 0", "partition")
    if attributes:
        _check_attributes(attributes)
    msg_type = None if stream_id is None else _check_stream_id(stream_id)
    if isinstance(msg_time, datetime):
        msg_time = format_msg_time(msg_time)
    elif msg_time is not None and not is_msg_time(msg_time):
        raise InvalidMessage(f"msgTime {msg_time[:40]!r} must be yyyyMMddHHmm, e.g. 202401311530", "msgTime")
    if not (attributes or msg_type or msg_time or key):  # the plain message: the body is the payload
        return PreparedMessage(bytes(body), 0, None, None, len(body), key, partition)
    text = join_text(attributes, msg_type, msg_time, key)
    data, flag = _encode(body, text)
    return PreparedMessage(data, flag, msg_type, msg_time, len(body) + len(text), key, partition)


class BatchPreparer:
    """:func:`prepare_message` for the messages of one batch, with the same results and errors, preparing the
    attribute text of each distinct ``(attributes, stream_id, msg_time)`` once: a batch's messages mostly
    share theirs, so the checks and the text are not redone for every message. The first
    message of each goes through :func:`prepare_message`, whose prefix the others then reuse; a message it
    does not cover (a key, whose text is its own; a datetime msgTime; attributes that are not a dict; no
    body; a negative partition) goes through :func:`prepare_message` too. One per batch: it remembers at
    most 64 texts."""

    __slots__ = ("_texts",)

    def __init__(self) -> None:
        # (attribute items, stream_id, msg_time) -> (prefix, flag, msg_type, msg_time, attribute characters)
        self._texts: dict[object, tuple[bytes, int, str | None, str | None, int]] = {}

    def prepare(
        self,
        body: bytes,
        attributes: Mapping[str, str] | None = None,
        stream_id: str | None = None,
        msg_time: str | datetime | None = None,
        key: str | None = None,
        partition: int | str | None = None,
    ) -> PreparedMessage:
        """What ``prepare_message(body, attributes, stream_id, msg_time, key, partition)`` gives or raises."""
        if (
            key is not None
            or not body
            or (attributes is not None and type(attributes) is not dict)
            or (msg_time is not None and type(msg_time) is not str)
            or (type(partition) is int and partition < 0)
        ):
            return prepare_message(body, attributes, stream_id, msg_time, key, partition)
        try:
            memo = (tuple(attributes.items()) if attributes else None, stream_id, msg_time)
            known = self._texts.get(memo)
        except TypeError:  # an unhashable attribute value: the reference names what is wrong
            return prepare_message(body, attributes, stream_id, msg_time, key, partition)
        if known is None:
            ready = prepare_message(body, attributes, stream_id, msg_time, None, partition)
            if len(self._texts) < 64:
                prefix = ready.data[: len(ready.data) - len(body)]
                self._texts[memo] = (
                    prefix,
                    ready.flag,
                    ready.msg_type,
                    ready.msg_time,
                    ready.size - len(body),
                )
            return ready
        prefix, flag, msg_type, time_text, extra = known
        data = prefix + body if prefix else bytes(body)
        return PreparedMessage(data, flag, msg_type, time_text, len(body) + extra, None, partition)


def _check_unicode(value: str, what: str, field: str) -> None:
    """Refuse text that cannot travel as UTF-8 (lone surrogates, which JSON escapes can carry)."""
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidMessage(
            f"{what} holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), which is not text; "
            "send valid Unicode",
            field,
        ) from None


def _check_attributes(attributes: Mapping[str, str]) -> None:
    for name, value in attributes.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidMessage("attributes must map strings to strings", "attributes")
        if not name.isascii():
            _check_unicode(name, "an attribute key", "attributes")
        try:
            validate_attribute_key(name)
        except InvalidAttribute as exc:
            raise InvalidMessage(str(exc), "attributes") from None
        if not value.isascii():
            _check_unicode(value, f"attribute {name!r}", f"attributes.{name}")
        try:
            validate_attribute_value(value)
        except InvalidAttribute as exc:
            raise InvalidMessage(str(exc), f"attributes.{name}") from None


def _check_stream_id(stream_id: str) -> str:
    """The ``$msgType$`` of a valid streamId (trimmed)."""
    trimmed = stream_id.strip()
    if not trimmed or len(stream_id) > MAX_STREAM_ID_LENGTH:
        raise InvalidMessage(f"streamId must be 1-{MAX_STREAM_ID_LENGTH} non-blank characters", "streamId")
    _check_unicode(stream_id, "streamId", "streamId")
    if _SEPARATORS_RE.search(stream_id) is not None:  # one scan for the usual, clean value
        for token in _SEPARATORS:
            if token in stream_id:
                raise InvalidMessage(
                    f"streamId {stream_id!r} contains {token!r}, which TubeMQ reserves as a separator",
                    "streamId",
                )
    return trimmed


# --- payload ----------------------------------------------------------------------------------------


def encode_payload(
    body: bytes,
    attributes: Mapping[str, str] | None = None,
    msg_type: str | None = None,
    msg_time: str | None = None,
    key: str | None = None,
) -> tuple[bytes, int]:
    """Return ``(data, flag)`` for a SendMessage request.

    A prefix (and flag bit 0) is written only when the attribute text is non-empty; without attributes
    the body itself is returned. ``msg_type`` and ``msg_time`` are trimmed (send the same trimmed values
    in the request's ``msgType``/``msgTime`` fields). Raises InvalidAttribute for bad keys or values.
    """
    return _encode(body, build_attribute_text(attributes, msg_type, msg_time, key))


def _encode(body: bytes, text: str) -> tuple[bytes, int]:
    if not text:
        return bytes(body), 0
    raw = text.encode("utf-8")
    return b"".join((len(raw).to_bytes(_PREFIX_LEN, "big"), raw, body)), FLAG_HAS_ATTRIBUTES


def decode_payload(data: bytes | bytearray | memoryview, flag: int) -> DecodedPayload:
    """Split a payload by its flag into body and attributes; raises PayloadDecodeError when the prefix is
    truncated, its length is negative or exceeds the payload, or its text is not UTF-8."""
    if not flag & FLAG_HAS_ATTRIBUTES:
        return DecodedPayload(bytes(data), {})
    view = memoryview(data)
    if len(view) < _PREFIX_LEN:
        raise PayloadDecodeError(
            f"payload of {len(view)} bytes is too short for the 4-byte attribute length (flag {flag})"
        )
    attr_len = int.from_bytes(view[:_PREFIX_LEN], "big", signed=True)
    end = _PREFIX_LEN + attr_len
    if attr_len < 0 or end > len(view):
        raise PayloadDecodeError(f"attribute length {attr_len} does not fit a payload of {len(view)} bytes")
    try:
        text = str(view[_PREFIX_LEN:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadDecodeError(f"attribute text is not valid UTF-8: {exc}") from None
    attributes, msg_type, msg_time, key = parse_attribute_text(text)
    return DecodedPayload(bytes(view[end:]), attributes, msg_type, msg_time, key)


# CRC-32 (as ``zlib.crc32`` and ``java.util.zip.CRC32``) of any buffer: ISA-L's where it is installed (the
# gateway depends on it), which folds with carry-less multiplies where zlib's loop reads a table, in a quarter
# of zlib's time on a 1 KiB payload with the call; else zlib's (the core needs no more than the stdlib).
try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal is a dependency of the gateway, not of the core
    from zlib import crc32


def crc32_checksum(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 masked to 31 bits, the ``checkSum`` of a fetched message."""
    return crc32(data) & 0x7FFFFFFF


# --- scalar helpers ---------------------------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()``: ``h = 31*h + c`` over UTF-16 code units, wrapped to a signed int32.

    The broker's filter key of a message is this hash of its trimmed ``msgType``.
    """
    raw = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def ipv4_to_sent_addr(ip: str) -> int:
    """The ``sentAddr`` of an IPv4 address: its 32 bits as a signed int32 (192.168.1.10 -> -1062731510)."""
    try:
        packed = ipaddress.IPv4Address(ip).packed
    except ValueError:
        raise ValueError(f"sentAddr needs a dotted IPv4 address, got {ip!r}") from None
    return int.from_bytes(packed, "big", signed=True)
