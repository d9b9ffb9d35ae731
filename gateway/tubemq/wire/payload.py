"""Message payload encoding (§4): attribute prefix, flag, CRC, ``String.hashCode``, ``sentAddr``, msgTime.

A payload is the ``data`` of a SendMessage request and the ``payLoadData`` of a fetched message. When flag
bit 0 is set it starts with ``int32 BE attrLen`` and that many bytes of UTF-8 attribute text
(``$msgType$=t,$msgTime$=yyyyMMddHHmm,$msgKey$=k,key=value,...``), followed by the body; otherwise it is the
body.

**The message key.** TubeMQ has no message key: the Java client's ``Message`` carries a body and attribute
items only (a key is a producer-side partitioning choice that is not stored). The gateway carries the
publish ``key`` as one more reserved item, ``$msgKey$``, named like TubeMQ's own ``$msgType$``/``$msgTime$``
and placed after them, so any consumer gets it back: ours as ``key`` (not among the user attributes), a
Java consumer with ``message.getAttrValue("$msgKey$")``. Attribute text cannot hold ``,`` and ``=`` (they
separate items), so the value is the key with exactly the characters ``%``, ``,``, ``=`` and ``$`` written
as ``%25``, ``%2C``, ``%3D`` and ``%24`` (percent-encoding of their UTF-8 byte); any other key, the usual
case, is stored as it is. A user attribute named ``$msgKey$`` is refused (it would pass for the key).
"""

from __future__ import annotations

import ipaddress
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from gateway.tubemq.errors import InvalidAttribute, InvalidMessage

__all__ = [
    "FLAG_HAS_ATTRIBUTES",
    "MAX_KEY_LENGTH",
    "MAX_STREAM_ID_LENGTH",
    "TOKEN_MSG_KEY",
    "TOKEN_MSG_TIME",
    "TOKEN_MSG_TYPE",
    "DecodedPayload",
    "PayloadDecodeError",
    "PreparedMessage",
    "build_attribute_text",
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
TOKEN_MSG_TYPE = "$msgType$"
TOKEN_MSG_TIME = "$msgTime$"
TOKEN_MSG_KEY = "$msgKey$"
MSG_TIME_LENGTH = 12

_ITEM_SEP = ","
_KV_SEP = "="
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


# --- attributes -------------------------------------------------------------------------------------


def _check_attribute_text(text: str, what: str) -> None:
    if not text.strip():
        raise InvalidAttribute(f"attribute {what} {text!r} is blank; give a non-blank {what}")
    for bad in (_ITEM_SEP, _KV_SEP):
        if bad in text:
            raise InvalidAttribute(
                f"attribute {what} {text!r} contains {bad!r}, which separates attributes; remove it"
            )
    for token in (TOKEN_MSG_TYPE, TOKEN_MSG_TIME):
        if token in text:
            raise InvalidAttribute(
                f"attribute {what} {text!r} contains the reserved token {token}; "
                "set the message type and time through their own parameters"
            )


def validate_attribute_key(key: str) -> None:
    """Raise InvalidAttribute unless ``key`` is non-blank and free of ',', '=' and the reserved tokens
    (``$msgKey$`` included: the message key has its own parameter)."""
    _check_attribute_text(key, "key")
    if TOKEN_MSG_KEY in key:
        raise InvalidAttribute(
            f"attribute key {key!r} contains the reserved token {TOKEN_MSG_KEY}, which carries the "
            "message key; set the key through its own parameter"
        )


# --- the message key ($msgKey$) -------------------------------------------------------------------

_KEY_SPECIAL = re.compile("[%,=$]")
_KEY_ESCAPES = {"%": "%25", ",": "%2C", "=": "%3D", "$": "%24"}
_KEY_UNESCAPE = re.compile("%(25|2[Cc]|3[Dd]|24)")
_KEY_UNESCAPES = {"25": "%", "2C": ",", "2c": ",", "3D": "=", "3d": "=", "24": "$"}


def encode_key(key: str) -> str:
    """The ``$msgKey$`` value of a message key (module docstring): one C-speed scan for the usual key."""
    if _KEY_SPECIAL.search(key) is None:
        return key
    return _KEY_SPECIAL.sub(lambda m: _KEY_ESCAPES[m.group()], key)


def decode_key(value: str) -> str:
    """The message key of a ``$msgKey$`` value; any ``%`` not starting one of the four escapes (a Java
    producer's own value) stays as it is."""
    if "%" not in value:
        return value
    return _KEY_UNESCAPE.sub(lambda m: _KEY_UNESCAPES[m.group(1)], value)


def validate_attribute_value(value: str) -> None:
    """Raise InvalidAttribute unless ``value`` is non-blank and free of ',', '=' and the reserved tokens."""
    _check_attribute_text(value, "value")


def build_attribute_text(
    attributes: Mapping[str, str] | None,
    msg_type: str | None = None,
    msg_time: str | None = None,
    key: str | None = None,
) -> str:
    """Build the attribute text like the Java client: ``$msgType$`` first, ``$msgTime$`` second, then
    ``$msgKey$`` (a non-empty ``key``, escaped by :func:`encode_key`), then the user items in insertion
    order. Blank ``msg_type``/``msg_time`` are left out; both are trimmed. Each part is checked
    (InvalidAttribute). A message to publish is prepared by :func:`prepare_message` instead (every field
    checked once, by the publish rules).

    The Java producer checks ``len(body) + len(text)`` (text in characters) against the topic's limit.
    """
    if msg_type is not None:
        msg_type = msg_type.strip() or None
        if msg_type is not None:
            validate_attribute_value(msg_type)
    if msg_time is not None:
        msg_time = msg_time.strip() or None
        if msg_time is not None:
            parse_msg_time(msg_time)
    if attributes:
        for name, value in attributes.items():
            validate_attribute_key(name)
            validate_attribute_value(value)
    return _join_text(attributes, msg_type, msg_time, key)


def _join_text(
    attributes: Mapping[str, str] | None, msg_type: str | None, msg_time: str | None, key: str | None
) -> str:
    """The attribute text of parts already checked (and trimmed); see :func:`build_attribute_text`."""
    items: list[str] = []
    if msg_type:
        items.append(f"{TOKEN_MSG_TYPE}={msg_type}")
    if msg_time:
        items.append(f"{TOKEN_MSG_TIME}={msg_time}")
    if key:
        items.append(f"{TOKEN_MSG_KEY}={encode_key(key)}")
    if attributes:
        for name, value in attributes.items():
            items.append(f"{name}={value}")
    return _ITEM_SEP.join(items)


def parse_attribute_text(text: str) -> tuple[dict[str, str], str | None, str | None, str | None]:
    """Split attribute text into (user items, msg_type, msg_time, key).

    Items without '=' or with a blank key are ignored and the first of duplicate keys wins, like the Java
    consumer's lookup. A ``$msgTime$`` that is not ``yyyyMMddHHmm`` is dropped, as Java does; ``$msgKey$``
    is decoded (:func:`decode_key`) and never among the user items.
    """
    attributes: dict[str, str] = {}
    msg_type: str | None = None
    msg_time: str | None = None
    key: str | None = None
    for item in text.split(_ITEM_SEP):
        name, sep, value = item.partition(_KV_SEP)
        if not sep or not name.strip():
            continue
        if name == TOKEN_MSG_TYPE:
            msg_type = value
        elif name == TOKEN_MSG_TIME:
            msg_time = value if _is_msg_time(value) else None
        elif name == TOKEN_MSG_KEY:
            if key is None and value:
                key = decode_key(value)
        else:
            attributes.setdefault(name, value)
    return attributes, msg_type, msg_time, key


# --- a message to publish: the publish rules ------------------------------------------------------

MAX_KEY_LENGTH = 1024
MAX_STREAM_ID_LENGTH = 256
_SEPARATORS = (_ITEM_SEP, _KV_SEP, TOKEN_MSG_TYPE, TOKEN_MSG_TIME)
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
    elif msg_time is not None and not _is_msg_time(msg_time):
        raise InvalidMessage(f"msgTime {msg_time[:40]!r} must be yyyyMMddHHmm, e.g. 202401311530", "msgTime")
    if not (attributes or msg_type or msg_time or key):  # the plain message: the body is the payload
        return PreparedMessage(bytes(body), 0, None, None, len(body), key, partition)
    text = _join_text(attributes, msg_type, msg_time, key)
    data, flag = _encode(body, text)
    return PreparedMessage(data, flag, msg_type, msg_time, len(body) + len(text), key, partition)


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


def crc32_checksum(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 (as ``java.util.zip.CRC32``) masked to 31 bits, the ``checkSum`` of a fetched message."""
    return zlib.crc32(data) & 0x7FFFFFFF


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


def format_msg_time(when: datetime | None = None) -> str:
    """Format ``yyyyMMddHHmm``; ``None`` means now. Aware datetimes are converted to local time first,
    because the Java producer stamps its local wall-clock time."""
    if when is None:
        when = datetime.now()
    elif when.tzinfo is not None:
        when = when.astimezone()
    return f"{when.year:04d}{when.month:02d}{when.day:02d}{when.hour:02d}{when.minute:02d}"


def parse_msg_time(text: str) -> datetime:
    """Parse ``yyyyMMddHHmm`` into a naive (local) datetime; raises InvalidAttribute (a ValueError)."""
    if len(text) != MSG_TIME_LENGTH or not text.isascii() or not text.isdigit():
        raise InvalidAttribute(f"msgTime {text!r} must be 12 digits in the form yyyyMMddHHmm")
    try:
        return datetime(int(text[:4]), int(text[4:6]), int(text[6:8]), int(text[8:10]), int(text[10:12]))
    except ValueError as exc:
        raise InvalidAttribute(f"msgTime {text!r} is not a valid yyyyMMddHHmm time: {exc}") from None


def _is_msg_time(text: str) -> bool:
    try:
        parse_msg_time(text)
    except ValueError:
        return False
    return True
