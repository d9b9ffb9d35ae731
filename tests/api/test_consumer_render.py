"""The hand-built JSON of delivered messages is valid single-line JSON with the documented shape."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.consumer_render import (
    _other_value,
    _utf8_value,
    render_event,
    render_events,
    render_message,
    render_poll,
    render_pushed,
)
from gateway.service.delivered import DeliveredMessage
from gateway.service.delivery import runs_of
from gateway.tubemq.consumer.batch import ConsumedMessage

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.api._consumer_render")

text = st.text(max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
bodies = st.binary(max_size=64) | text.map(str.encode) | json_values.map(lambda v: json.dumps(v).encode())

messages = st.builds(
    DeliveredMessage,
    seq=st.integers(1, 2**40),
    topic=text,
    partition_key=text,
    broker_id=st.integers(0, 2**31),
    partition_id=st.integers(0, 2**16),
    message=st.builds(
        ConsumedMessage,
        message_id=st.integers(-(2**63), 2**63 - 1),
        body=bodies,
        attributes=st.dictionaries(text, text, max_size=3),
        stream_id=st.none() | text,
        msg_time=st.none() | text,
        flag=st.just(0),
        index=st.integers(0, 100),
        offset=st.none() | st.integers(0, 2**50),
        key=st.none() | text,
    ),
    attempt=st.integers(1, 1000),
    deadline_ms=st.integers(0, 2**45),
)


def _not_json(name: str) -> Any:
    raise ValueError(name)


def expected(m: DeliveredMessage, fmt: str) -> dict[str, Any]:
    body = m.message.body
    value: Any = base64.b64encode(body).decode()
    encoding = "base64"
    if fmt == "utf8":
        with contextlib.suppress(UnicodeDecodeError):
            value, encoding = body.decode("utf-8"), "utf8"
    elif fmt == "json":
        # RFC 8259: NaN and Infinity are not JSON (Python's loads takes them)
        with contextlib.suppress(ValueError):
            value, encoding = json.loads(body, parse_constant=_not_json), "json"
    return {
        "token": str(m.seq),
        "topic": m.topic,
        "partitionKey": m.partition_key,
        "brokerId": m.broker_id,
        "partitionId": m.partition_id,
        "offset": m.message.offset,
        "messageId": str(m.message.message_id),
        "key": m.message.key,
        "streamId": m.message.stream_id,
        "msgTime": m.message.msg_time,
        "attributes": m.message.attributes,
        "deliveryAttempt": m.attempt,
        "deadline": m.deadline_ms,
        "value": value,
        "encoding": encoding,
    }


@settings(max_examples=30)
@given(st.lists(messages, max_size=4), st.sampled_from(["base64", "utf8", "json"]))
def test_poll_body_is_the_documented_json(batch: list[DeliveredMessage], fmt: str) -> None:
    body = render_poll(runs_of(batch), fmt)
    assert json.loads(body) == {"messages": [expected(m, fmt) for m in batch]}


@settings(max_examples=30)
@given(messages, st.sampled_from(["base64", "utf8", "json"]))
def test_one_message_is_one_line_and_one_event(message: DeliveredMessage, fmt: str) -> None:
    line = render_message(message, fmt)
    assert b"\n" not in line and b"\r" not in line
    assert json.loads(line) == expected(message, fmt)
    event = render_event(message, fmt)
    assert event == b"id: " + str(message.seq).encode() + b"\ndata: " + line + b"\n\n"


@settings(max_examples=50)
@given(messages, st.sampled_from(["base64", "utf8", "json"]))
def test_a_pushed_message_is_the_polled_one_less_what_settles_it(message: DeliveredMessage, fmt: str) -> None:
    pushed = json.loads(render_pushed(message, fmt))
    polled = expected(message, fmt)
    assert "token" in polled and "deadline" in polled
    assert pushed == {k: v for k, v in polled.items() if k not in ("token", "deadline")}


@settings(max_examples=30)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 2), st.none() | text, st.none() | st.integers(0, 99)),
        max_size=8,
    ),
    st.sampled_from(["base64", "utf8", "json"]),
)
def test_shared_attribute_dicts_and_interleaved_partitions_render_per_message(
    picks: list[tuple[int, int, str | None, int | None]], fmt: str
) -> None:
    # Decoding shares one attributes dict among messages of the same attribute text; the renderer caches
    # by it and by the partition run, so messages that share some fields and differ in others must each
    # come out as themselves.
    shared = [{}, {"a": "1"}, {"a": "1", "b": "\u2028"}]
    wheres = [("t", "1:t:0", 1, 0), ("t", "1:t:1", 1, 1), ("u", "2:u:0", 2, 0)]
    batch = [
        DeliveredMessage(
            i + 1,
            *wheres[where],
            ConsumedMessage(i, b"v%d" % i, shared[attrs], "s" if key else None, None, 0, i, offset, key),
        )
        for i, (attrs, where, key, offset) in enumerate(picks)
    ]
    assert json.loads(render_poll(runs_of(batch), fmt)) == {"messages": [expected(m, fmt) for m in batch]}
    events = render_events(runs_of(batch), fmt)
    assert events == b"".join(render_event(m, fmt) for m in batch)


def test_values_that_do_not_fit_the_format_fall_back_to_base64() -> None:
    def one(body: bytes, fmt: str) -> tuple[Any, str]:
        m = DeliveredMessage(1, "t", "1:t:0", 1, 0, ConsumedMessage(1, body, {}, None, None, 0, 0))
        out = json.loads(render_message(m, fmt))
        return out["value"], out["encoding"]

    assert one(b"\xff", "utf8") == ("/w==", "base64")
    assert one(b"NaN", "json") == ("TmFO", "base64")
    assert one(b"-Infinity", "json") == ("LUluZmluaXR5", "base64")
    assert one(b"[" * 100_000, "json")[1] == "base64"
    assert one(b' {"a": [1, 2]} ', "json") == ({"a": [1, 2]}, "json")
    assert one("żółw".encode(), "utf8") == ("żółw", "utf8")


@settings(max_examples=300)
@given(
    bodies
    | st.lists(st.sampled_from([b"a", b" ", b'"', b"\\", b"\x00", b"\x1f", b"\x7f", b"\n", b"\xc5\xbc"])).map(
        b"".join
    )
)
def test_plain_ascii_utf8_values_go_in_as_they_are_with_the_same_bytes(body: bytes) -> None:
    # the shortcut for text that needs no escaping gives byte for byte what the JSON encoder gives
    assert _utf8_value(body) == _other_value(body, "utf8")
