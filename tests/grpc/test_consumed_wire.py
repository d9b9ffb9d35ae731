"""The hand-built protobuf bytes of delivered messages parse as the PollResponse / SubscribeResponse the
protobuf library builds from the same messages."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.grpc.consumed_wire import encode_consumed
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.proto_wire import varint as _varint
from gateway.service.delivered import DeliveredMessage
from gateway.service.delivery import Delivery, runs_of
from tests.support.grpc_wire_strategies import delivered_messages as messages

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.grpc._consumed_wire")


def reference(m: DeliveredMessage) -> pb.ConsumedMessage:
    msg = m.message
    out = pb.ConsumedMessage(
        token=str(m.seq),
        topic=m.topic,
        partition_key=m.partition_key,
        broker_id=m.broker_id,
        partition_id=m.partition_id,
        message_id=msg.message_id,
        attributes=msg.attributes,
        value=msg.body,
        delivery_attempt=m.attempt,
        deadline=m.deadline_ms,
    )
    optional: dict[str, Any] = {
        "offset": msg.offset,
        "key": msg.key,
        "stream_id": msg.stream_id,
        "msg_time": msg.msg_time,
    }
    for name, value in optional.items():
        if value is not None:
            setattr(out, name, value)
    return out


@settings(max_examples=200)
@given(st.lists(messages, max_size=6))
def test_parses_as_the_library_built_answers(batch: list[DeliveredMessage]) -> None:
    data = encode_consumed(runs_of(batch))
    expected = [reference(m) for m in batch]
    assert pb.PollResponse.FromString(data) == pb.PollResponse(messages=expected)
    assert pb.SubscribeResponse.FromString(data) == pb.SubscribeResponse(messages=expected)
    # presence is kept: an optional field set to its default is still set, an unset one is not
    for got, m in zip(pb.PollResponse.FromString(data).messages, batch, strict=True):
        assert got.HasField("offset") == (m.message.offset is not None)
        assert got.HasField("key") == (m.message.key is not None)
        assert got.HasField("stream_id") == (m.message.stream_id is not None)


def test_an_empty_answer_is_empty() -> None:
    assert encode_consumed(Delivery([])) == b""


def _reference_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


@settings(max_examples=500)
@given(
    st.integers(-(2**63), 2**64 - 1)
    | st.integers(0, 64)
    .flatmap(lambda bits: st.sampled_from([2**bits - 1, 2**bits, -(2**bits)]))
    .filter(lambda v: -(2**63) <= v < 2**64)
)
def test_varints_of_every_length(value: int) -> None:
    # the hand-built answers' varints: every byte length, the boundaries between lengths, negatives
    assert _varint(value) == _reference_varint(value)
