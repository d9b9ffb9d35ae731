"""JSON and SSE bytes of delivered messages (the ``ConsumedMessageOut`` shape), built by hand.

A poll answer can hold thousands of messages; formatting each from a template with the base64 value as raw
bytes costs half of building dicts for ``json.dumps``. Every string that comes from a client or a broker
still goes through the JSON encoder, so the output is always valid, single-line JSON (SSE needs one line).

Values are base64 by default; ``utf8`` gives text and ``json`` the parsed value. A value that cannot be shown
in the asked format (not UTF-8, not JSON) falls back to base64 for that message alone; ``encoding`` says which
was used.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Sequence
from typing import Any

from gateway.service.instance import DeliveredMessage

__all__ = ["encode_value", "render_event", "render_message", "render_poll", "to_json"]

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def to_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return _encode(payload).encode("utf-8")


def render_poll(messages: Sequence[DeliveredMessage], fmt: str) -> bytes:
    """The body of a poll answer: ``{"messages": [...]}``."""
    heads: dict[tuple[str, str, int, int], str] = {}
    return b'{"messages":[' + b",".join(render_message(m, fmt, heads) for m in messages) + b"]}"


def render_event(message: DeliveredMessage, fmt: str) -> bytes:
    """One SSE event: the token as id, the message as data."""
    return b"id: " + message.token.encode() + b"\ndata: " + render_message(message, fmt) + b"\n\n"


def render_message(
    m: DeliveredMessage, fmt: str, heads: dict[tuple[str, str, int, int], str] | None = None
) -> bytes:
    """One message as JSON; ``heads`` caches the per-partition fields across the messages of one answer."""
    where = (m.topic, m.partition_key, m.broker_id, m.partition_id)
    head = heads.get(where) if heads is not None else None
    if head is None:
        head = (
            f'"topic":{_encode(m.topic)},"partitionKey":{_encode(m.partition_key)},'
            f'"brokerId":{m.broker_id},"partitionId":{m.partition_id}'
        )
        if heads is not None:
            heads[where] = head
    msg = m.message
    attributes = _encode(msg.attributes) if msg.attributes else "{}"
    fields = (
        f'{{"token":"{m.seq}",{head},"offset":{"null" if msg.offset is None else msg.offset},'
        f'"messageId":"{msg.message_id}","key":{_optional(msg.key)},"streamId":{_optional(msg.stream_id)},'
        f'"msgTime":{_optional(msg.msg_time)},"attributes":{attributes},'
    )
    if fmt != "base64":
        value, encoding = encode_value(msg.body, fmt)
        if encoding != "base64":
            return f'{fields}"encoding":"{encoding}","value":{_encode(value)}}}'.encode()
    value_b64 = binascii.b2a_base64(msg.body, newline=False)
    return fields.encode() + b'"encoding":"base64","value":"' + value_b64 + b'"}'


def encode_value(body: bytes, fmt: str) -> tuple[Any, str]:
    """``body`` in ``fmt`` (``base64``, ``utf8``, ``json``) when it can be shown so, else base64 text."""
    if fmt == "utf8":
        try:
            return body.decode("utf-8"), "utf8"
        except UnicodeDecodeError:
            pass
    elif fmt == "json":
        try:
            return json.loads(body, parse_constant=_reject_constant), "json"
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass
    return binascii.b2a_base64(body, newline=False).decode("ascii"), "base64"


def _optional(text: str | None) -> str:
    return "null" if text is None else _encode(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
