"""The usual REST publish batch read and prepared in one C call (gateway/api/_publish_parse.c), and by its
Python twin (``usual_batch_py``), is what the reference gives: the body read by ``parse_json_batch_py`` and
each message prepared by the publish rules (``BatchPreparer``), byte for byte; every other body is handed back
(None) so that the reference answers it, the same 4xx naming the same field, through the real endpoint on the
embedded cluster. The C loop checks the attribute rules it is handed by the Python module that owns them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api import publish_parse, publish_steps
from gateway.api.app import create_app
from gateway.api.publish_parse import usual_batch, usual_batch_py
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.service.publish import new_prepared
from gateway.service.publish_rules import ATTRIBUTE_SEPARATORS, RESERVED_IN_NAMES, RESERVED_IN_TEXT
from gateway.tubemq.wire import PreparedMessage
from gateway.tubemq.wire.speedups import load_extension
from tests.support.grpc_support import gateway_settings
from tests.support.publish_reference import prepared_reference

_compiled = load_extension("gateway.api._publish_parse")
compiled = pytest.mark.skipif(
    _compiled is None, reason="the C extension is not built or is switched off (the pure path)"
)


def c_batch(body: bytes, max_messages: int) -> list[PreparedMessage] | None:
    """The C loop alone (``usual_batch`` hands what it declines to the twin)."""
    assert _compiled is not None
    found: list[PreparedMessage] | None = _compiled.usual_batch(body, max_messages, new_prepared)
    return found


# ASCII attribute text the publish rules accept, and values of any text (escapes, non-ASCII, astral)
_NAME = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=",="), min_size=1)
_ATTRIBUTES = st.dictionaries(_NAME.filter(lambda t: "$msg" not in t), _NAME, max_size=4)
_VALUE = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12) | st.sampled_from(
    ["x" * 1024, 'ż\n\t"\\/😀', "\x00\x1f\x7f"]
)


@st.composite
def usual_bodies(draw: st.DrawFn) -> bytes:
    shared = draw(_ATTRIBUTES)
    messages = []
    for _ in range(draw(st.integers(1, 6))):
        message: dict[str, Any] = {"value": draw(_VALUE)}
        shape = draw(st.integers(0, 4))
        if shape == 1:
            message["attributes"] = shared  # repeated: the memo's case
        elif shape == 2:
            message["attributes"] = draw(_ATTRIBUTES)
        elif shape == 3:
            message["encoding"] = "utf8"
        elif shape == 4:
            message = {"encoding": "utf8", "attributes": shared, **message}
        messages.append(message)
    indent = draw(st.sampled_from([None, 0, 2, "\t"]))
    return json.dumps({"messages": messages}, ensure_ascii=draw(st.booleans()), indent=indent).encode()


@settings(max_examples=300)
@given(usual_bodies())
def test_the_usual_batch_is_taken_and_prepared_as_the_reference_prepares_it(body: bytes) -> None:
    want = prepared_reference(body, 100)
    assert want is not None
    assert usual_batch_py(body, 100) == want
    assert usual_batch(body, 100) == want
    if _compiled is not None:
        assert c_batch(body, 100) == want  # in C, every usual batch


_ODD_MESSAGES = [
    {"value": ""},
    {"value": 5},
    {"value": None},
    {"value": "v", "encoding": "base64"},
    {"value": "v!", "encoding": "base64"},
    {"value": {"a": [1, 2**70]}, "encoding": "json"},
    {"value": "v", "encoding": "UTF8"},
    {"value": "v", "key": "k"},
    {"value": "v", "partition": 1},
    {"value": "v", "partition": 2**64},
    {"value": "v", "streamId": "s"},
    {"value": "v", "msgTime": "202401311530"},
    {"value": "v", "bogus": 1},
    {"value": "v", "attributes": None},
    {"value": "v", "attributes": {"a": 1}},
    {"value": "v", "attributes": {"a,b": "1"}},
    {"value": "v", "attributes": {"a": "1=2"}},
    {"value": "v", "attributes": {" ": "1"}},
    {"value": "v", "attributes": {"a": "\x1c\t "}},
    {"value": "v", "attributes": {"$msgKey$": "1"}},
    {"value": "v", "attributes": {"a": "$msgType$"}},
    {"value": "v", "attributes": {"x$msgTime$": "1"}},
    {"value": "v", "attributes": {"a": "$msgKey$"}},  # a value may hold it
    {"value": "v", "attributes": {"ż": "1"}},
    {"value": "v", "attributes": {"a": "\u2003"}},
    {"attributes": {"a": "1"}},
    "text",
    [],
]
_RAW_DAMAGE = [
    (b'"value": "', b'"value": "\\ud800'),
    (b'"value": "', b'"value": "\\udc00x'),
    (b'"value": "', b'"value": "\\ud83d\\u0041'),
    (b'"value": "', b'"value": "\xed\xa0\x80'),
    (b'"value": "', b'"value": "\xc0\x80'),
    (b'"value": "', b'"value": "\xf4\x90\x80\x80'),
    (b'"value": "', b'"value": "\xe2\x82'),
    (b'"value": "', b'"value": "\x01'),
    (b'"value": "', b'"value": "\\x'),
    (b'"value": "', b'"value": "\\u12g4'),
    (b'{"value"', b'{"value": "dup", "value"'),
    (b'{"value"', b'{"v\\u0061lue": "a", "value"'),
    (b'"attributes": {', b'"attributes": {"a": "1", "a": "2", '),
    (b'"attributes": {', b'"attributes": {"a": "\\u00e9", '),
    (b'{"messages"', b'{"other": 1, "messages"'),
    (b'{"messages"', b'\xef\xbb\xbf{"messages"'),
    (b'"messages": [', b'"messages": [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]], '),
]


@st.composite
def odd_bodies(draw: st.DrawFn) -> bytes:
    usual = draw(usual_bodies())
    doc = json.loads(usual)
    if draw(st.booleans()):
        doc["messages"].insert(
            draw(st.integers(0, len(doc["messages"]))), draw(st.sampled_from(_ODD_MESSAGES))
        )
    body = json.dumps(doc, ensure_ascii=draw(st.booleans())).encode()
    if draw(st.booleans()) and not isinstance(doc["messages"][0], str):
        old, new = draw(st.sampled_from(_RAW_DAMAGE))
        body = body.replace(old, new, 1)
    cut = draw(st.integers(0, 3))
    if cut == 1:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif cut == 2:
        body += draw(st.sampled_from([b"x", b"}", b",", b"\x00", b" \n"]))
    return body


@settings(max_examples=600)
@given(odd_bodies(), st.integers(1, 8))
def test_any_other_body_is_handed_back_or_prepared_as_the_reference_prepares_it(
    body: bytes, max_messages: int
) -> None:
    twin = usual_batch_py(body, max_messages)
    if twin is not None:
        assert twin == prepared_reference(body, max_messages), body
    if _compiled is not None:
        taken = c_batch(body, max_messages)
        assert taken is None or taken == twin, body  # what the C loop takes, the twin takes alike
    assert usual_batch(body, max_messages) == twin


@compiled
def test_the_c_loop_checks_the_rules_it_is_handed() -> None:
    assert _compiled is not None
    body = json.dumps({"messages": [{"value": "a", "attributes": {"k": "a;b", "$x": "1"}}]}).encode()
    assert c_batch(body, 3) == prepared_reference(body, 3) != None  # noqa: E711 - valid by today's rules
    separators, in_text, in_names = (
        ATTRIBUTE_SEPARATORS.encode(),
        tuple(t.encode() for t in RESERVED_IN_TEXT),
        tuple(t.encode() for t in RESERVED_IN_NAMES),
    )
    try:
        _compiled.set_rules(separators + b";", in_text, in_names)
        assert c_batch(body, 3) is None
        _compiled.set_rules(separators, in_text, (*in_names, b"$x"))
        assert c_batch(body, 3) is None
        _compiled.set_rules(separators, (*in_text, b"a;"), in_names)
        assert c_batch(body, 3) is None
        with pytest.raises(ValueError, match="reserved token"):
            _compiled.set_rules(separators, (b"",), in_names)
    finally:
        _compiled.set_rules(separators, in_text, in_names)
    assert c_batch(body, 3) == prepared_reference(body, 3)


@compiled
@pytest.mark.parametrize("message", [*_ODD_MESSAGES[:-3], "text", []], ids=repr)
def test_a_message_the_reference_must_read_is_handed_back(message: object) -> None:
    body = json.dumps({"messages": [{"value": "a"}, message]}).encode()
    if message == {"value": "v", "attributes": {"a": "$msgKey$"}}:
        assert c_batch(body, 10) == prepared_reference(body, 10) != None  # noqa: E711 - taken: it is valid
    else:
        assert c_batch(body, 10) is None


@compiled
@pytest.mark.parametrize("damage", _RAW_DAMAGE, ids=repr)
def test_damaged_bytes_are_handed_back(damage: tuple[bytes, bytes]) -> None:
    body = json.dumps({"messages": [{"value": "a", "attributes": {"b": "1"}}]}).encode()
    old, new = damage
    assert old in body
    assert c_batch(body.replace(old, new, 1), 10) is None


@compiled
def test_bounds_and_envelope() -> None:
    body = json.dumps({"messages": [{"value": "a"}] * 3}).encode()
    assert c_batch(body, 3) is not None
    assert c_batch(body, 2) is None  # more than the batch's bound: the service names it
    assert c_batch(b'{"messages": []}', 3) is None
    assert c_batch(b"", 3) is None
    assert c_batch(b'{"messages": [{"value": "a"}]} {}', 3) is None
    assert c_batch(b'  {"messages" :[ {"value":"a"} ] }\r\n', 3) == [PreparedMessage(b"a", 0, None, None, 1)]
    escaped = b'{"messages": [{"value": "a\\u0000", "attributes": {"a": "\\u0001", "\\u0062": "1"}}]}'
    assert c_batch(escaped, 3) == prepared_reference(escaped, 3) != None  # noqa: E711 - valid text, any escape
    attrs = {f"k{i}": "v" for i in range(65)}  # more attributes than the C reads: the reference's
    assert c_batch(json.dumps({"messages": [{"value": "a", "attributes": attrs}]}).encode(), 3) is None


# --- through the endpoint: the compiled reader on and off answer alike ----------------------------------

TOPICS = [TopicSpec("demo", 4)]
DEEP = b'{"messages": [{"value": "a", "attributes": {"k": ' + b"[" * 5000 + b"]" * 5000 + b"}}]}"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data") as cluster:
        runtime = Runtime(gateway_settings(cluster, limits={"max_batch_messages": 5}))
        await runtime.start()
        app = create_app(runtime=runtime)
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
                yield c
        finally:
            await runtime.stop()


def _answer(response: httpx.Response) -> tuple[int, object]:
    """Status and body, without what differs between two publishes (offsets, ids, times, partitions)."""
    doc = response.json()
    doc.pop("requestId", None)
    for result in doc.get("results", []):
        for name in ("offset", "messageId", "appendTime", "partition", "partitionKey", "partitionId"):
            result.pop(name, None)
    return response.status_code, doc


def _bodies(limit: int) -> list[bytes]:
    usual = [{"value": "a", "attributes": {"k": "v"}}, {"value": "ż😀"}]
    bodies = [json.dumps({"messages": [*usual, message]}).encode() for message in _ODD_MESSAGES]
    bodies += [
        json.dumps({"messages": usual}).replace('"value"', '"value"', 1).encode().replace(o, n, 1)
        for o, n in _RAW_DAMAGE
    ]
    bodies += [
        json.dumps({"messages": usual}).encode(),
        json.dumps({"messages": usual * 3}).encode(),  # 6: more than the batch holds
        json.dumps({"messages": [*usual, {"value": "x" * (limit + 1)}]}).encode(),  # oversized
        json.dumps({"messages": [*usual, {"value": "x" * (limit - 3), "attributes": {"k": "v"}}]}).encode(),
        json.dumps(
            {"messages": [{"value": "x" * (limit - 3), "attributes": {"k": "v"}}]}
        ).encode(),  # = limit
        DEEP,
        b'{"messages": [{"value": "a", "partition": ' + b"9" * 5000 + b"}]}",
        b"\xff\xfe{}",
    ]
    return bodies


async def test_the_endpoint_answers_alike_with_the_compiled_reader_on_and_off(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = (await client.get("/v1/topics/demo")).json()["maxMessageSize"]
    headers = {"content-type": "application/json"}
    taken = 0
    for body in _bodies(limit):
        got = await client.post("/v1/topics/demo/messages", content=body, headers=headers)
        with monkeypatch.context() as patch:
            patch.setattr(publish_steps, "usual_batch", publish_parse.usual_batch_py)
            twin = await client.post("/v1/topics/demo/messages", content=body, headers=headers)
            patch.setattr(publish_steps, "usual_batch", lambda body, max_messages: None)
            want = await client.post("/v1/topics/demo/messages", content=body, headers=headers)
        assert _answer(got) == _answer(twin) == _answer(want), body[:200]
        taken += usual_batch(body, 5) is not None
    assert taken >= 5  # the usual reader took the usual bodies (and the oversized usual one)
