"""The compiled reader of a batch's SendMessage answers (``_send_answers.send_answers``) against its reference
(gateway/tubemq/wire/send_answers.py ``decode_send_answers_py``), on any answer bytes.

The C reader may decline an answer (None: the connection then parses it the general way), but what it
reads must be exactly what protobuf reads; and it must read every answer a broker writes (the known fields,
an ASCII errMsg). Called directly, whichever path the process selected, so CI compares both.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.tubemq.errors import ConnectionClosed
from gateway.tubemq.wire.frame import Frame, encode_varint
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.rpc import SUCCESS_PREFIX, RpcResponse, decode_response, response_prefix
from gateway.tubemq.wire.send_answers import decode_send_answers_py
from tests.support.speedups_support import extension

SEND = 13

int64s = st.integers(-(2**63), 2**63 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
texts = st.one_of(st.text(alphabet=st.characters(max_codepoint=127), max_size=20), st.text(max_size=8))


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    """A SendMessageResponseB2P as a broker writes it, any optional field left out."""
    message = broker_pb.SendMessageResponseB2P(
        success=draw(st.booleans()), errCode=draw(int32s), errMsg=draw(texts)
    )
    for name in ("messageId", "appendTime", "appendOffset"):
        if draw(st.booleans()):
            setattr(message, name, draw(int64s))
    if draw(st.booleans()):
        message.requireAuth = draw(st.booleans())
    return message.SerializeToString()


def _varint_field(field: int, value: int) -> bytes:
    return encode_varint(field << 3) + encode_varint(value & (2**64 - 1))


@st.composite
def odd_answers(draw: st.DrawFn) -> bytes:
    """Fields in any order, repeated, with odd values (bools above 1, int32 fields holding 64-bit values),
    wrong wire types, unknown fields, non-ASCII or invalid UTF-8 text, cut short."""
    parts: list[bytes] = [draw(answers())] if draw(st.integers(0, 3)) else []
    for _ in range(draw(st.integers(0, 4))):
        field = draw(st.integers(1, 9))
        kind = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))
        if kind == 0:
            parts.append(_varint_field(field, draw(st.integers(0, 2**64 - 1))))
        elif kind == 1:
            raw = draw(
                st.one_of(st.binary(max_size=12), texts.map(lambda t: t.encode("utf-8", "surrogatepass")))
            )
            parts.append(encode_varint(field << 3 | 2) + encode_varint(len(raw)) + raw)
        elif kind == 2:
            parts.append(
                encode_varint(field << 3 | draw(st.sampled_from([1, 5])))
                + draw(st.binary(min_size=8, max_size=8))
            )
        else:
            parts.append(draw(st.binary(max_size=4)))
    data = b"".join(parts)
    if not draw(st.integers(0, 4)) and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    return data


def _answers() -> ModuleType:
    return extension("gateway.tubemq.wire._send_answers")


def _both(items: list[Any]) -> tuple[list[Any], list[Any]]:
    compiled = _answers().send_answers(items, SEND, RpcResponse, Frame, SUCCESS_PREFIX)
    return compiled, decode_send_answers_py(items, SEND)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(answers(), max_size=6))
def test_every_broker_answer_is_read_as_protobuf_reads_it(datas: list[bytes]) -> None:
    items = [RpcResponse(i, SEND, data) for i, data in enumerate(datas)]
    compiled, reference = _both(items)
    for data, got, want in zip(datas, compiled, reference, strict=True):
        assert want is not None
        message = broker_pb.SendMessageResponseB2P.FromString(data)
        if message.errMsg.isascii():
            assert got == want, data.hex()
        else:
            assert got is None  # declined: parsed the general way


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(odd_answers(), st.binary(max_size=40)), max_size=6))
def test_odd_answer_bytes_are_read_alike_or_declined(datas: list[bytes]) -> None:
    items = [RpcResponse(i, SEND, data) for i, data in enumerate(datas)]
    compiled, reference = _both(items)
    for data, got, want in zip(datas, compiled, reference, strict=True):
        assert got is None or got == want, data.hex()


@pytest.mark.parametrize(
    "item",
    [
        RpcResponse(
            1, 14, broker_pb.SendMessageResponseB2P(success=True, errCode=200, errMsg="").SerializeToString()
        ),
        ConnectionClosed("gone"),
        None,
        ("not", "an", "answer"),
        RpcResponse(1, SEND, b""),
    ],
)
def test_what_is_not_an_answer_of_the_method_is_declined(item: object) -> None:
    compiled, reference = _both([item])
    assert compiled == reference == [None]


def test_a_response_that_is_not_bytes_is_declined() -> None:
    item: Any = RpcResponse(1, SEND, bytearray(b"\x08\x01\x10\xc8\x01\x1a\x00"))  # type: ignore[arg-type]
    assert _answers().send_answers([item], SEND, RpcResponse, Frame, SUCCESS_PREFIX) == [None]


def _envelope(method: int, data: bytes, prefix: bytes = SUCCESS_PREFIX) -> bytes:
    body = b"\x08" + encode_varint(method) + b"\x12" + encode_varint(len(data)) + data
    return prefix + encode_varint(len(body)) + body


@st.composite
def envelopes(draw: st.DrawFn) -> bytes:
    """Answer payloads: the usual envelope of a send answer, or one with another method, another header,
    a body size too large or too small, fields in another order or more of them, trailing bytes, cut."""
    data = draw(st.one_of(answers(), odd_answers()))
    method = draw(st.sampled_from([SEND, SEND, SEND, 14, 200]))
    prefix = draw(st.sampled_from([SUCCESS_PREFIX] * 4 + [response_prefix(1, 3), response_prefix(0, 2)]))
    payload = _envelope(method, data, prefix)
    change = draw(st.integers(0, 9))
    head = len(prefix)
    if change == 1:  # the body's fields the other way round: protobuf reads it, not the fast path
        body = b"\x12" + encode_varint(len(data)) + data + b"\x08" + encode_varint(method)
        payload = prefix + encode_varint(len(body)) + body
    elif change == 2:  # a larger body size than what follows
        payload = prefix + encode_varint(len(payload) - head) + payload[head + 1 :]
    elif change == 3:
        payload += draw(st.binary(min_size=1, max_size=4))
    elif change == 4 and payload:
        payload = payload[: draw(st.integers(0, len(payload) - 1))]
    elif change == 5:
        payload = prefix + draw(st.binary(max_size=30))
    return payload


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), max_size=5))
def test_a_frame_is_read_as_its_decoded_envelope_is(payloads: list[bytes]) -> None:
    frames = [Frame(i, payload) for i, payload in enumerate(payloads)]
    compiled, reference = _both(frames)
    for payload, got, want in zip(payloads, compiled, reference, strict=True):
        assert got is None or got == want, payload.hex()
        if extension("gateway.tubemq.wire._rpc").usual_answer(payload, SUCCESS_PREFIX):
            # the reader files such a frame as it is: decode_response must read it without error, and the
            # batch reader must read it as it reads the decoded answer
            answer = decode_response(Frame(0, payload))
            assert isinstance(answer, RpcResponse)
            assert got == _both([answer])[0][0]


def test_the_usual_envelope_of_a_broker_answer_is_read_from_its_frame() -> None:
    data = broker_pb.SendMessageResponseB2P(
        success=True, errCode=200, errMsg="OK", messageId=9
    ).SerializeToString()
    frame = Frame(5, _envelope(SEND, data))
    assert extension("gateway.tubemq.wire._rpc").usual_answer(frame.payload, SUCCESS_PREFIX)
    assert _both([frame]) == ([(True, 200, "OK", 9, None, None)], [(True, 200, "OK", 9, None, None)])
