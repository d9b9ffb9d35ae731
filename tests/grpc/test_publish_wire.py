"""The hand-read publish requests and hand-written receipts of gateway/grpc/publish_wire.py hold to what the
protobuf library reads and writes: any bytes are read into the same service messages as parsing them with
``gateway_pb2`` and converting them (or refused alike), and the answers' bytes are the library's own."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.grpc import publish_wire
from gateway.grpc.convert import outgoing, publish_result
from gateway.grpc.errors import error_status
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.proto_wire import read_varint, varint
from gateway.grpc.publish_wire import (
    PublishBatch,
    decode_publish,
    decode_stream_publish,
    failed_acks,
    publish_handlers,
    publish_response,
    stream_acks,
)
from gateway.service.errors import InvalidInput, Unavailable
from gateway.service.publish import PublishOutcome
from gateway.tubemq.producer import SendResult
from tests.support.grpc_wire_strategies import publish_messages as messages

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.grpc._publish_wire")

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=30)
shared_attributes = st.sampled_from([{}, {"bench": "1"}, {"ż": "ółw", "": ""}])


def reference(raw: bytes) -> PublishBatch:
    """What the servicer read before: the protobuf library's parse, each message converted."""
    request = pb.PublishRequest.FromString(raw)
    return PublishBatch(request.topic, [outgoing(m) for m in request.messages])


@settings(max_examples=300)
@given(topic=text, batch=st.lists(messages(), max_size=12))
def test_requests_read_as_the_protobuf_library_reads_them(topic: str, batch: list[pb.Message]) -> None:
    for kind in (pb.PublishRequest, pb.PublishStreamRequest):
        raw = kind(topic=topic, messages=batch).SerializeToString()
        assert decode_publish(raw) == reference(raw)
        # what the library writes never needs the library to read it
        assert publish_wire._decode(raw) == reference(raw)


def test_messages_repeating_attributes_share_one_mapping() -> None:
    one = pb.Message(value=b"v", attributes={"a": "1", "b": "2"})
    batch = decode_publish(pb.PublishRequest(topic="t", messages=[one] * 3).SerializeToString())
    first = batch.messages[0].attributes
    assert first == {"a": "1", "b": "2"}
    assert all(m.attributes is first for m in batch.messages)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    return varint(number << 3 | wire_type) + payload


def _bytes_field(number: int, data: bytes) -> bytes:
    return _field(number, 2, varint(len(data)) + data)


IRREGULAR = [
    # a message with an unknown field, one with a repeated scalar, attributes split by another field
    _bytes_field(2, _bytes_field(1, b"v") + _bytes_field(9, b"?")),
    _bytes_field(
        2, _bytes_field(1, b"v") + _bytes_field(1, b"w") + _bytes_field(2, b"k") + _bytes_field(2, b"")
    ),
    _bytes_field(2, _bytes_field(4, _bytes_field(1, b"a")) + _bytes_field(1, b"v") + _bytes_field(4, b"")),
    # a negative partition, the topic twice, a topic after the messages, an unknown top-level field
    _bytes_field(2, _bytes_field(1, b"v") + _field(3, 0, varint(-5))),
    _bytes_field(1, b"t1") + _bytes_field(1, b"t2"),
    _bytes_field(2, _bytes_field(1, b"v")) + _bytes_field(1, b"t"),
    _field(7, 0, b"\x01") + _bytes_field(2, _bytes_field(1, b"v")),
    # a map entry with an unknown field, a non-canonical (longer) varint length
    _bytes_field(2, _bytes_field(4, _bytes_field(1, b"a") + _bytes_field(3, b"x"))),
    _bytes_field(2, b"\x0a\x81\x00v"),
]

MALFORMED = [
    b"\x12\x05\x0a\x09abc",  # a length past the end of its message
    b"\x12\x03\x0a\x02\xff\xfe",  # a value longer than its message
    b"\x0a\x02\xff\xfe",  # a topic that is not UTF-8
    b"\x12\x04\x12\x02\xc3\x28",  # a key that is not UTF-8
    b"\x12",  # ends inside a tag's field
    b"\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # an 11-byte varint
]


@pytest.mark.parametrize("raw", IRREGULAR + MALFORMED)
def test_irregular_and_malformed_requests_are_read_or_refused_as_the_library_does(raw: bytes) -> None:
    _same(raw)


@settings(max_examples=300)
@given(
    batch=st.lists(messages(), min_size=1, max_size=4),
    cut=st.integers(0, 10_000),
    flip=st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
)
@example(batch=[pb.Message(value=b"v", attributes={"a": "b"})], cut=3, flip=(4, 0x80))
def test_damaged_requests_are_read_or_refused_as_the_library_does(
    batch: list[pb.Message], cut: int, flip: tuple[int, int]
) -> None:
    raw = bytearray(pb.PublishRequest(topic="t", messages=batch).SerializeToString())
    where, byte = flip
    raw[where % len(raw)] = byte
    _same(bytes(raw[: len(raw) - cut % len(raw)]))


@given(st.binary(max_size=60))
def test_any_bytes_are_read_or_refused_as_the_library_does(raw: bytes) -> None:
    _same(raw)


def _same(raw: bytes) -> None:
    try:
        expected = reference(raw)
    except DecodeError:
        with pytest.raises(DecodeError):
            decode_publish(raw)
        return
    assert decode_publish(raw) == expected


@given(st.integers(0, 2**64 - 1))
def test_varints_read_back(value: int) -> None:
    data = b"\x07" + varint(value) + b"\x07"
    assert read_varint(data, 1) == (value, len(data) - 1)


# --- answers ----------------------------------------------------------------------------------------------

results = st.builds(
    SendResult,
    topic=st.just("t"),
    partition_id=int32,
    partition_key=st.sampled_from(["", "1:t:0", "2:t:1", "ż:t:9"]),
    broker_id=int32,
    message_id=int64,
    append_time_ms=st.sampled_from([0, 1_700_000_000_000, -1]),
    append_offset=int64,
    partition_index=st.integers(0, 100),
)


@given(topic=text, stored=st.lists(results, max_size=20), start=st.integers(0, 2**40))
def test_answers_are_the_librarys_bytes(topic: str, stored: list[SendResult], start: int) -> None:
    outcomes = [PublishOutcome(i, result=r) for i, r in enumerate(stored)]
    expected = pb.PublishResponse(topic=topic, results=[publish_result(o) for o in outcomes])
    assert publish_response(topic, outcomes) == expected.SerializeToString()
    acks = [pb.PublishAck(sequence=start + o.index, stored=publish_result(o).stored) for o in outcomes]
    assert stream_acks(start, outcomes) == pb.PublishStreamResponse(acks=acks).SerializeToString()


@given(stored=st.lists(results, min_size=1, max_size=5), failed=st.integers(0, 4))
def test_answers_with_errors(stored: list[SendResult], failed: int) -> None:
    error = Unavailable("broker busy", retry_after=1.0)
    outcomes = [PublishOutcome(i, result=r) for i, r in enumerate(stored)]
    outcomes[failed % len(outcomes)] = PublishOutcome(failed % len(outcomes), error=error)
    answer = publish_response("t", outcomes)
    assert isinstance(answer, pb.PublishResponse) and answer.failed == 1
    assert list(answer.results) == [publish_result(o) for o in outcomes]
    acks = pb.PublishStreamResponse.FromString(stream_acks(3, outcomes)).acks
    assert [a.sequence for a in acks] == [3 + i for i in range(len(outcomes))]
    assert [a.WhichOneof("outcome") for a in acks] == ["stored" if o.ok else "error" for o in outcomes]
    assert acks[failed % len(outcomes)].error == error_status(error)
    refused = InvalidInput("topic is required", field="topic")
    everything = pb.PublishStreamResponse.FromString(failed_acks(7, 3, refused)).acks
    assert [(a.sequence, a.error) for a in everything] == [(7 + i, error_status(refused)) for i in range(3)]


def test_the_publish_methods_read_their_requests_by_hand() -> None:
    handlers = {
        name: pb_handler
        for name, pb_handler in (
            ("Publish", _handler(pb.PublishRequest)),
            ("PublishStream", _handler(pb.PublishStreamRequest)),
            ("GetTopic", _handler(pb.GetTopicRequest)),
        )
    }
    replaced = publish_handlers(handlers)
    assert replaced["Publish"].request_deserializer is decode_publish
    assert replaced["PublishStream"].request_deserializer is decode_stream_publish
    assert replaced["GetTopic"] is handlers["GetTopic"]


@given(st.text(max_size=20), st.lists(st.binary(max_size=8), max_size=3), st.text(max_size=12))
def test_a_stream_request_is_read_with_its_idempotency_key(topic: str, values: list[bytes], key: str) -> None:
    request = pb.PublishStreamRequest(
        topic=topic, messages=[pb.Message(value=v) for v in values], idempotency_key=key
    )
    batch = decode_stream_publish(request.SerializeToString())
    plain = decode_publish(pb.PublishRequest(topic=topic, messages=request.messages).SerializeToString())
    assert (batch.topic, batch.messages, batch.key) == (plain.topic, plain.messages, key or None)


def _handler(kind: Any) -> Any:
    import grpc

    async def behaviour(request: Any, context: Any) -> None:
        return None

    return grpc.unary_unary_rpc_method_handler(
        behaviour, request_deserializer=kind.FromString, response_serializer=kind.SerializeToString
    )
