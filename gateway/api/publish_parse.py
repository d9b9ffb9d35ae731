"""Turn REST publish requests (JSON batch or one raw body) into service messages, naming bad fields.

A JSON batch is read in up to two steps. :func:`usual_batch` takes the usual batch, ``{"messages": [...]}``
of messages that hold a non-empty text ``value`` and at most ``attributes`` of text and an ``encoding`` of
utf8, straight to each message's :class:`PreparedMessage` (the publish rules applied): in one C call
(``gateway/api/_publish_parse.c``) where the extension is built, and :func:`usual_batch_py`, its Python twin
with orjson, for what the C loop hands back and where it is not built. Any other body (numbers, which orjson
reads differently past 64 bits; JSON values; an error to name), and any body orjson refuses (lone surrogate
escapes, NaN, a byte order mark), is read by :func:`parse_json_batch_py`, the reference, with the standard
library: its answers and errors are the ones clients always had.

The attribute rules the C loop checks (the separators and the reserved tokens) are handed to it at import
from :mod:`gateway.service.publish_rules`, as the core defines them for the Python rules.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from gateway.service.errors import InvalidInput
from gateway.service.publish import OutgoingMessage, PreparedMessage, new_prepared
from gateway.service.publish_rules import (
    ATTRIBUTE_SEPARATORS,
    RESERVED_IN_NAMES,
    RESERVED_IN_TEXT,
    plain_preparer,
)
from gateway.tubemq.wire import compiled_or

HEADER_KEY = "x-tubemq-key"
HEADER_PARTITION = "x-tubemq-partition"
HEADER_ATTRIBUTES = "x-tubemq-attributes"
HEADER_STREAM_ID = "x-tubemq-stream-id"
HEADER_MSG_TIME = "x-tubemq-msg-time"
#: the headers that set a raw message's options (:func:`parse_raw_message`)
RAW_OPTION_HEADERS = (HEADER_KEY, HEADER_PARTITION, HEADER_ATTRIBUTES, HEADER_STREAM_ID, HEADER_MSG_TIME)

_KNOWN = frozenset({"value", "encoding", "key", "partition", "attributes", "streamId", "msgTime"})


def _opt_str(item: Mapping[str, Any], name: str, prefix: str, index: int) -> str | None:
    value = item.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string", field=f"{prefix}.{name}", index=index)
    return value


def _utf8(text: str, field: str, index: int | None) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(
            "text holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), which is not Unicode text; "
            "send valid Unicode or use encoding base64",
            field=field,
            index=index,
        ) from None


def _decode_value(item: Mapping[str, Any], prefix: str, index: int) -> bytes:
    if "value" not in item:
        raise InvalidInput("value is required", field=f"{prefix}.value", index=index)
    value = item["value"]
    encoding = item.get("encoding", "utf8")
    if encoding == "utf8":
        if not isinstance(value, str):
            raise InvalidInput(
                "value must be a string with encoding utf8 (use encoding json for JSON values)",
                field=f"{prefix}.value",
                index=index,
            )
        return _utf8(value, f"{prefix}.value", index)
    if encoding == "base64":
        if not isinstance(value, str):
            raise InvalidInput("value must be base64 text", field=f"{prefix}.value", index=index)
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("value is not valid base64", field=f"{prefix}.value", index=index) from None
    if encoding == "json":
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        except RecursionError:
            raise InvalidInput(
                "value is nested too deeply; flatten it", field=f"{prefix}.value", index=index
            ) from None
        return _utf8(text, f"{prefix}.value", index)
    raise InvalidInput(
        f"encoding must be utf8, base64 or json, got {encoding!r}", field=f"{prefix}.encoding", index=index
    )


def _attributes(item: Mapping[str, Any], prefix: str, index: int) -> dict[str, str] | None:
    attrs = item.get("attributes")
    if attrs is None:
        return None
    if not isinstance(attrs, dict) or not all(isinstance(v, str) for v in attrs.values()):
        raise InvalidInput(
            "attributes must be an object of string values", field=f"{prefix}.attributes", index=index
        )
    return attrs


def parse_message(item: object, index: int) -> OutgoingMessage:
    if not isinstance(item, dict):
        raise InvalidInput("each message must be a JSON object", field=f"messages[{index}]", index=index)
    if not _KNOWN.issuperset(item):
        unknown = sorted(item.keys() - _KNOWN)[0]
        raise InvalidInput(
            f"unknown field {unknown!r}; allowed: {', '.join(sorted(_KNOWN))}",
            field=f"messages[{index}].{unknown}",
            index=index,
        )
    value = item.get("value")
    if (
        type(value) is str
        and item.get("encoding", "utf8") == "utf8"
        and (len(item) == 1 or (len(item) == 2 and ("attributes" in item or "encoding" in item)))
    ):
        # The usual message: a text value with attributes or an encoding at most. Checked here by the
        # same rules as below, because this runs for every message of every batch.
        attrs = item.get("attributes")
        if attrs is None or (type(attrs) is dict and all(type(v) is str for v in attrs.values())):
            return OutgoingMessage(_utf8(value, f"messages[{index}].value", index), attributes=attrs)
    return _parse_any(item, index)


def _parse_any(item: dict[str, Any], index: int) -> OutgoingMessage:
    """Every field, with its checks (``parse_message`` has already refused unknown fields)."""
    prefix = f"messages[{index}]"
    partition = item.get("partition")
    if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
        raise InvalidInput("partition must be an integer", field=f"{prefix}.partition", index=index)
    return OutgoingMessage(
        value=_decode_value(item, prefix, index),
        key=_opt_str(item, "key", prefix, index),
        partition=partition,
        attributes=_attributes(item, prefix, index),
        stream_id=_opt_str(item, "streamId", prefix, index),
        msg_time=_opt_str(item, "msgTime", prefix, index),
    )


def usual_batch_py(body: bytes, max_messages: int) -> list[PreparedMessage] | None:
    """The usual batch of ``body`` prepared by the publish rules: what :func:`parse_json_batch_py` and then
    ``payload.BatchPreparer`` give for it, when the body is ``{"messages": [...]}`` of 1 to ``max_messages``
    messages each holding a non-empty text ``value``, at most ``attributes`` of text and an ``encoding`` of
    utf8, each valid by the publish rules. None for any other body: the caller then reads it with
    :func:`parse_json_batch_py`, which answers it or names what is wrong (so no error of the body is ever
    this function's to name)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    items = doc.get("messages") if type(doc) is dict and len(doc) == 1 else None
    if type(items) is not list or not items or len(items) > max_messages:
        return None
    prepare = plain_preparer(len(items))
    prepared: list[PreparedMessage] = []
    for item in items:
        if type(item) is not dict:
            return None
        value = item.get("value")
        attrs = item.get("attributes")
        if (
            type(value) is not str
            or not value
            or len(item) != 1 + (type(attrs) is dict) + (item.get("encoding") == "utf8")
            or (attrs is not None and not all(type(v) is str for v in attrs.values()))
        ):
            return None
        # orjson's text is valid Unicode (it refuses lone surrogate escapes): the encode cannot fail
        ready = prepare(value.encode(), attrs)
        if ready is None:
            return None  # it breaks a rule: the reference names it
        prepared.append(ready)
    return prepared


class PublishParseLoops(Protocol):
    """What gateway/api/_publish_parse.c holds, and its twin :class:`_Python`."""

    def set_rules(
        self, separators: bytes, reserved_in_text: tuple[bytes, ...], reserved_in_names: tuple[bytes, ...], /
    ) -> None:
        """The attribute rules the loop checks: the separators and the reserved tokens."""

    def usual_batch(self, body: bytes, max_messages: int, make: Callable[..., Any], /) -> list[Any] | None:
        """:func:`usual_batch_py` with ``make`` building each PreparedMessage; None for any body it hands
        back (the C loop takes fewer than the twin: those :func:`usual_batch_py` reads)."""


class _Python:
    """The twin of the C loop: :func:`usual_batch_py`, which prepares by the rules of
    :mod:`gateway.service.publish_rules` itself."""

    @staticmethod
    def set_rules(
        separators: bytes, reserved_in_text: tuple[bytes, ...], reserved_in_names: tuple[bytes, ...], /
    ) -> None:
        """Nothing to learn: the twin's preparer holds the rules."""

    @staticmethod
    def usual_batch(body: bytes, max_messages: int, make: Callable[..., Any], /) -> list[Any] | None:
        return usual_batch_py(body, max_messages)


if TYPE_CHECKING:
    import gateway.api._publish_parse as _publish_parse

    _stub: PublishParseLoops = _publish_parse

_loops: PublishParseLoops = compiled_or("gateway.api._publish_parse", _Python())
_loops.set_rules(
    ATTRIBUTE_SEPARATORS.encode(),
    tuple(t.encode() for t in RESERVED_IN_TEXT),
    tuple(t.encode() for t in RESERVED_IN_NAMES),
)


def usual_batch(body: bytes, max_messages: int) -> list[PreparedMessage] | None:
    """The usual batch of a body prepared, else None (:func:`usual_batch_py`): in one call of the loops
    chosen at import first, then by the twin for what the C loop hands back."""
    prepared: list[PreparedMessage] | None = _loops.usual_batch(body, max_messages, new_prepared)
    return prepared if prepared is not None else usual_batch_py(body, max_messages)


def parse_json_batch_py(body: bytes) -> list[OutgoingMessage]:
    """:func:`parse_json_batch` with the standard library's JSON reader: the reference, every rule."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}", field="body") from None
    except RecursionError:
        raise InvalidInput(
            "request body is nested too deeply to be a publish request", field="body"
        ) from None
    if not isinstance(doc, dict) or "messages" not in doc:
        raise InvalidInput('request body must be an object {"messages": [...]}', field="messages")
    items = doc["messages"]
    if not isinstance(items, list):
        raise InvalidInput("messages must be an array", field="messages")
    return [parse_message(item, i) for i, item in enumerate(items)]


def parse_attribute_header(text: str) -> dict[str, str]:
    """``k1=v1,k2=v2`` (the TubeMQ attribute syntax) from the X-TubeMQ-Attributes header."""
    attrs: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(
                f"header X-TubeMQ-Attributes item {item!r} must be key=value", field="X-TubeMQ-Attributes"
            )
        attrs[key.strip()] = value.strip()
    return attrs


def stored_parts(kind: str, body: bytes, headers: Mapping[str, str]) -> list[bytes | str | None]:
    """What decides the messages a publish stores, for its idempotency fingerprint: the body's kind
    (``json`` or ``octets``), the body, and for a raw message the headers that set its options."""
    if kind == "octets":
        return [kind, body, *(headers.get(name) for name in RAW_OPTION_HEADERS)]
    return [kind, body]


def parse_raw_message(body: bytes, headers: Mapping[str, str]) -> OutgoingMessage:
    """One raw message: the body is the value, options come from X-TubeMQ-* headers."""
    partition: int | None = None
    if (text := headers.get(HEADER_PARTITION)) is not None:
        try:
            partition = int(text)
        except ValueError:
            raise InvalidInput(
                "header X-TubeMQ-Partition must be an integer", field="X-TubeMQ-Partition"
            ) from None
    attrs = headers.get(HEADER_ATTRIBUTES)
    return OutgoingMessage(
        value=body,
        key=headers.get(HEADER_KEY),
        partition=partition,
        attributes=parse_attribute_header(attrs) if attrs else None,
        stream_id=headers.get(HEADER_STREAM_ID),
        msg_time=headers.get(HEADER_MSG_TIME),
    )
