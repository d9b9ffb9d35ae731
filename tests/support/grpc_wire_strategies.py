"""Hypothesis strategies of the gRPC service's messages, shared by the tests of the hand-written protobuf
(gateway/grpc/consumed_wire.py, publish_wire.py), their C twins and the REST renderers: delivered messages
with odd fields, and publish request messages with any optional fields set."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.delivered import DeliveredMessage
from gateway.tubemq.consumer.batch import ConsumedMessage

__all__ = ["delivered_messages", "publish_messages"]

_int32 = st.integers(-(2**31), 2**31 - 1)
_long_text = st.text(max_size=200)
_text = st.text(max_size=30)
#: attribute maps the messages share by identity (renderers cache by it)
_consumed_attributes = [{}, {"a": "1"}, {"ż": "ółw", "": ""}]
_publish_attributes = st.sampled_from([{}, {"bench": "1"}, {"ż": "ółw", "": ""}])

#: a delivered message, any field at the edges of its type
delivered_messages = st.builds(
    DeliveredMessage,
    seq=st.integers(1, 2**62),
    topic=st.sampled_from(["", "t", "topic-ż"]),
    partition_key=st.sampled_from(["", "1:t:0", "2:t:1"]),
    broker_id=st.sampled_from([0, 1, 2**31 - 1, -1]) | _int32,
    partition_id=st.sampled_from([0, 3]) | _int32,
    message=st.builds(
        ConsumedMessage,
        message_id=st.sampled_from([0, 1, -1]) | st.integers(-(2**63), 2**63 - 1),
        body=st.binary(max_size=300),
        attributes=st.sampled_from(_consumed_attributes)
        | st.dictionaries(_long_text, _long_text, max_size=3),
        stream_id=st.none() | _long_text,
        msg_time=st.none() | st.just("202611232200"),
        flag=st.just(0),
        index=st.just(0),
        offset=st.none() | st.integers(0, 2**62),
        key=st.none() | _long_text,
    ),
    attempt=st.sampled_from([0, 1, 2]) | st.integers(1, 2**31 - 1),
    deadline_ms=st.sampled_from([0, 1]) | st.integers(0, 2**50),
)


@st.composite
def publish_messages(draw: st.DrawFn) -> pb.Message:
    """A publish request's message: a value, each optional field set or not, shared or own attributes."""
    fields: dict[str, Any] = {"value": draw(st.binary(max_size=300))}
    for name, strategy in (("key", _text), ("partition", _int32), ("stream_id", _text), ("msg_time", _text)):
        if draw(st.booleans()):
            fields[name] = draw(strategy)
    fields["attributes"] = draw(st.one_of(_publish_attributes, st.dictionaries(_text, _text, max_size=4)))
    return pb.Message(**fields)
