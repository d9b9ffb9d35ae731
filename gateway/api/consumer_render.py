"""JSON and SSE bytes of delivered messages (the ``ConsumedMessageOut`` shape), built by hand.

A poll answer can hold thousands of messages; formatting each from a template with the base64 value as raw
bytes costs half of building dicts for ``json.dumps``. Every string that comes from a client or a broker
still goes through the JSON encoder, so the output is always valid, single-line JSON (SSE needs one line).

Values are base64 by default; ``utf8`` gives text and ``json`` the parsed value. A value that cannot be shown
in the asked format (not UTF-8, not JSON) falls back to base64 for that message alone; ``encoding`` says which
was used.

base64 answers are rendered in one C call where the extension is built (gateway/api/_consumer_render.c:
0.2 instead of 1.0 us per 1 KiB message); it writes the numbers and copies the pieces that :func:`_head` and
:func:`_meta` render here, and hands anything odd back to :func:`_render`, the reference.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from types import NotImplementedType
from typing import TYPE_CHECKING, Any, Protocol

from pybase64 import b64encode

from gateway.service.delivered import DeliveredMessage, DeliveredRun
from gateway.service.delivery import Delivery, runs_of
from gateway.tubemq.wire import compiled_or

__all__ = [
    "encode_value",
    "render_event",
    "render_events",
    "render_message",
    "render_poll",
    "render_pushed",
    "to_json",
]

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def to_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return _encode(payload).encode("utf-8")


def render_poll(delivery: Delivery, fmt: str) -> bytes:
    """The body of a poll answer: ``{"messages": [...]}``."""
    if fmt == "base64":
        answer = _loops.render_base64(delivery.runs, False, _head, _meta)
        if isinstance(answer, bytes):
            return answer
    return _poll_body(_render(delivery.runs, fmt, _POLL))


def _poll_body(parts: list[bytes]) -> bytes:
    if not parts:
        return b'{"messages":[]}'
    # One join makes the body: concatenating the brackets around a joined megabyte would copy it twice more
    # into fresh memory (that cost 25 times the join itself).
    parts[0] = b'{"messages":[' + parts[0]
    parts[-1] += b"]}"
    return b",".join(parts)


def render_events(delivery: Delivery, fmt: str) -> bytes:
    """SSE events of the messages of ``delivery``, one after the other (one write for a step)."""
    if fmt == "base64":
        answer = _loops.render_base64(delivery.runs, True, _head, _meta)
        if isinstance(answer, bytes):
            return answer
    return b"".join(_render(delivery.runs, fmt, _EVENT))


def render_event(message: DeliveredMessage, fmt: str) -> bytes:
    """One SSE event: the token as id, the message as data."""
    return render_events(runs_of((message,)), fmt)


def render_message(m: DeliveredMessage, fmt: str) -> bytes:
    """One message as JSON."""
    return _render(runs_of((m,)).runs, fmt, _POLL)[0]


def render_pushed(m: DeliveredMessage, fmt: str) -> bytes:
    """One message as a push request's JSON: a poll answer's message without ``token`` and ``deadline``,
    which settle a polled message and mean nothing to a receiver (the gateway settles a pushed message by
    the answer; handing out the token would let the receiver commit or nack it)."""
    msg = m.message
    offset = b"null" if msg.offset is None else b"%d" % msg.offset
    if fmt == "base64":
        value = b'"encoding":"base64","value":"' + b64encode(msg.body) + b'"'
    elif fmt == "utf8":
        value = _utf8_value(msg.body)
    else:
        value = _other_value(msg.body, fmt)
    head = _head(m.topic, m.partition_key, m.broker_id, m.partition_id)
    meta = _meta(msg.key, msg.stream_id, msg.msg_time, msg.attributes)
    return b'{%b,"offset":%b,"messageId":"%d","deliveryAttempt":%d,%b,%b}' % (
        head,
        offset,
        msg.message_id,
        m.attempt,
        meta,
        value,
    )


# Each message is one %-format of bytes: the parts shared by many messages (its partition's fields, its
# attribute fields) are rendered once per answer and cached; per message only the token, offset, message id
# and value are formatted. ``%b`` takes bytes as they are, so only trusted fragments go there.
_IDS = b'"messageId":"%d","deliveryAttempt":%d,"deadline":%d,%b,'  # id, attempt, deadline, meta
_B64 = b'"encoding":"base64","value":"%b"}'
_OTHER = b"%b}"
_POLL = (
    b'{"token":"%d",%b,"offset":%d,' + _IDS + _B64,
    b'{"token":"%d",%b,"offset":null,' + _IDS + _B64,
    b'{"token":"%d",%b,"offset":%d,' + _IDS + _OTHER,
    b'{"token":"%d",%b,"offset":null,' + _IDS + _OTHER,
)
_EVENT = tuple(b"id: %d\ndata: " + template + b"\n\n" for template in _POLL)


def _render(runs: Sequence[DeliveredRun], fmt: str, templates: tuple[bytes, ...]) -> list[bytes]:
    with_offset, without_offset, other_with_offset, other_without_offset = templates
    event = templates is _EVENT
    # pybase64 (SIMD) takes a third to a half of binascii's time for a 1 KiB value; same output.
    b64 = b64encode
    out: list[bytes] = []
    append = out.append
    # The attribute fields, by the identity of the attributes dict (decoding shares one per attribute
    # text; every message is alive during the call, so ids are not reused) and the fields beside it.
    metas: dict[tuple[int, str | None, str | None, str | None], bytes] = {}
    for run in runs:
        if not run.count:
            continue
        # a run's partition, attempt and deadline once; each message's token counts from the run's first
        head = _head(run.topic, run.partition_key, run.broker_id, run.partition_id)
        attempt = run.attempt
        deadline = run.deadline_ms
        seq = run.first
        for msg in run.messages[run.start : run.start + run.count]:
            attributes = msg.attributes
            meta_key = (id(attributes) if attributes else 0, msg.key, msg.stream_id, msg.msg_time)
            meta = metas.get(meta_key)
            if meta is None:
                meta = metas[meta_key] = _meta(msg.key, msg.stream_id, msg.msg_time, attributes)
            offset = msg.offset
            if fmt == "base64":
                value = b64(msg.body)
                template = with_offset if offset is not None else without_offset
            elif fmt == "utf8":
                value = _utf8_value(msg.body)
                template = other_with_offset if offset is not None else other_without_offset
            else:
                value = _other_value(msg.body, fmt)
                template = other_with_offset if offset is not None else other_without_offset
            if event:
                if offset is None:
                    append(template % (seq, seq, head, msg.message_id, attempt, deadline, meta, value))
                else:
                    append(
                        template % (seq, seq, head, offset, msg.message_id, attempt, deadline, meta, value)
                    )
            elif offset is None:
                append(template % (seq, head, msg.message_id, attempt, deadline, meta, value))
            else:
                append(template % (seq, head, offset, msg.message_id, attempt, deadline, meta, value))
            seq += 1
    return out


def _head(topic: str, partition_key: str, broker_id: int, partition_id: int) -> bytes:
    """The partition's fields of a message (rendered once per run of one partition)."""
    return (
        f'"topic":{_encode(topic)},"partitionKey":{_encode(partition_key)},'
        f'"brokerId":{broker_id},"partitionId":{partition_id}'
    ).encode()


def _meta(key: str | None, stream_id: str | None, msg_time: str | None, attributes: dict[str, str]) -> bytes:
    """The key and attribute fields of a message (rendered once per run of messages sharing them)."""
    attribute_text = _encode(attributes) if attributes else "{}"
    return (
        f'"key":{_optional(key)},"streamId":{_optional(stream_id)},'
        f'"msgTime":{_optional(msg_time)},"attributes":{attribute_text}'
    ).encode()


#: the ASCII bytes a JSON string escapes (controls, quote, backslash); DEL (0x7f) is left as it is
_JSON_ESCAPED = bytes(range(0x20)) + b'"\\'


def _utf8_value(body: bytes) -> bytes:
    """``_other_value(body, "utf8")``. ASCII with nothing JSON escapes (most text) is its own JSON string:
    it goes in as it is, without a decode, the JSON encoder and the encode back (1.0 instead of 2.4 us for
    1 KiB; one ``translate`` finds an escaped byte faster than any scan of the text)."""
    if body.isascii() and len(body.translate(None, _JSON_ESCAPED)) == len(body):
        return b'"encoding":"utf8","value":"' + body + b'"'
    return _other_value(body, "utf8")


def _other_value(body: bytes, fmt: str) -> bytes:
    value, encoding = encode_value(body, fmt)
    text = f'"{value}"' if encoding == "base64" else _encode(value)
    return f'"encoding":"{encoding}","value":{text}'.encode()


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
    return b64encode(body).decode("ascii"), "base64"


def _optional(text: str | None) -> str:
    return "null" if text is None else _encode(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class ConsumerRenderLoops(Protocol):
    """What gateway/api/_consumer_render.c holds, and its twin :class:`_Python`."""

    def render_base64(
        self,
        runs: Sequence[Any],
        events: bool,
        head_of: Callable[..., bytes],
        meta_of: Callable[..., bytes],
        /,
    ) -> bytes | NotImplementedType:
        """The poll body (or, with ``events``, the SSE events) of the messages of ``runs`` with base64
        values, the text pieces rendered by ``head_of`` and ``meta_of``; NotImplemented for runs holding
        anything the loop does not take (the caller then renders them with the reference)."""


class _Python:
    """The reference of the C loop: :func:`_render`, which renders the pieces with :func:`_head` and
    :func:`_meta` itself."""

    @staticmethod
    def render_base64(
        runs: Sequence[Any],
        events: bool,
        head_of: Callable[..., bytes],
        meta_of: Callable[..., bytes],
        /,
    ) -> bytes | NotImplementedType:
        if events:
            return b"".join(_render(runs, "base64", _EVENT))
        return _poll_body(_render(runs, "base64", _POLL))


if TYPE_CHECKING:
    import gateway.api._consumer_render as _consumer_render

    _stub: ConsumerRenderLoops = _consumer_render

_loops: ConsumerRenderLoops = compiled_or("gateway.api._consumer_render", _Python())
