"""The attribute text of a message payload (§4): the reserved ``$msgType$``, ``$msgTime$`` and ``$msgKey$``
items, the user's ``key=value`` items, and the ``yyyyMMddHHmm`` msgTime. :mod:`.payload` puts the text in
front of the body and re-exports these names.

The text is ``$msgType$=t,$msgTime$=yyyyMMddHHmm,$msgKey$=k,key=value,...``.

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

import re
from collections.abc import Mapping
from datetime import datetime

from gateway.tubemq.errors import InvalidAttribute

__all__ = [
    "ITEM_SEP",
    "KV_SEP",
    "MSG_TIME_LENGTH",
    "RESERVED_IN_NAMES",
    "RESERVED_IN_TEXT",
    "TOKEN_MSG_KEY",
    "TOKEN_MSG_TIME",
    "TOKEN_MSG_TYPE",
    "build_attribute_text",
    "decode_key",
    "encode_key",
    "format_msg_time",
    "is_msg_time",
    "join_text",
    "parse_attribute_text",
    "parse_msg_time",
    "validate_attribute_key",
    "validate_attribute_value",
]

TOKEN_MSG_TYPE = "$msgType$"
TOKEN_MSG_TIME = "$msgTime$"
TOKEN_MSG_KEY = "$msgKey$"
MSG_TIME_LENGTH = 12

#: what separates items, and a name from its value
ITEM_SEP = ","
KV_SEP = "="
#: the reserved tokens no attribute name or value may hold, and the one no name may hold besides
RESERVED_IN_TEXT = (TOKEN_MSG_TYPE, TOKEN_MSG_TIME)
RESERVED_IN_NAMES = (TOKEN_MSG_KEY,)


def _check_attribute_text(text: str, what: str) -> None:
    if not text.strip():
        raise InvalidAttribute(f"attribute {what} {text!r} is blank; give a non-blank {what}")
    for bad in (ITEM_SEP, KV_SEP):
        if bad in text:
            raise InvalidAttribute(
                f"attribute {what} {text!r} contains {bad!r}, which separates attributes; remove it"
            )
    for token in RESERVED_IN_TEXT:
        if token in text:
            raise InvalidAttribute(
                f"attribute {what} {text!r} contains the reserved token {token}; "
                "set the message type and time through their own parameters"
            )


def validate_attribute_key(key: str) -> None:
    """Raise InvalidAttribute unless ``key`` is non-blank and free of ',', '=' and the reserved tokens
    (``$msgKey$`` included: the message key has its own parameter)."""
    _check_attribute_text(key, "key")
    for token in RESERVED_IN_NAMES:
        if token in key:
            raise InvalidAttribute(
                f"attribute key {key!r} contains the reserved token {token}, which carries the "
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
    (InvalidAttribute). A message to publish is prepared by :func:`.payload.prepare_message` instead
    (every field checked once, by the publish rules).

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
    return join_text(attributes, msg_type, msg_time, key)


def join_text(
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
    return ITEM_SEP.join(items)


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
    for item in text.split(ITEM_SEP):
        name, sep, value = item.partition(KV_SEP)
        if not sep or not name.strip():
            continue
        if name == TOKEN_MSG_TYPE:
            msg_type = value
        elif name == TOKEN_MSG_TIME:
            msg_time = value if is_msg_time(value) else None
        elif name == TOKEN_MSG_KEY:
            if key is None and value:
                key = decode_key(value)
        else:
            attributes.setdefault(name, value)
    return attributes, msg_type, msg_time, key


# --- msgTime ------------------------------------------------------------------------------------------------


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


def is_msg_time(text: str) -> bool:
    """Whether ``text`` is a valid ``yyyyMMddHHmm`` time."""
    try:
        parse_msg_time(text)
    except ValueError:
        return False
    return True
