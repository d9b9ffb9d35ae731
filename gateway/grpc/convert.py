"""Conversions between the gRPC messages and the service layer's types (no I/O, no grpc)."""

from __future__ import annotations

from gateway.grpc.errors import error_status
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.publish import OutgoingMessage, PublishOutcome, TopicView
from gateway.tubemq.producer import SendResult


def outgoing(message: pb.Message) -> OutgoingMessage:
    """A service message from a protobuf one; unset optional fields stay None (empty strings do not)."""
    return OutgoingMessage(
        value=message.value,
        key=message.key if message.HasField("key") else None,
        partition=message.partition if message.HasField("partition") else None,
        attributes=dict(message.attributes) if message.attributes else None,
        stream_id=message.stream_id if message.HasField("stream_id") else None,
        msg_time=message.msg_time if message.HasField("msg_time") else None,
    )


def receipt(result: SendResult) -> pb.Receipt:
    return pb.Receipt(
        partition_key=result.partition_key,
        broker_id=result.broker_id,
        partition_id=result.partition_id,
        offset=result.append_offset,
        message_id=result.message_id,
        append_time_ms=result.append_time_ms,
    )


def publish_result(outcome: PublishOutcome) -> pb.PublishResult:
    if outcome.result is not None:
        return pb.PublishResult(index=outcome.index, stored=receipt(outcome.result))
    assert outcome.error is not None
    return pb.PublishResult(index=outcome.index, error=error_status(outcome.error))


def topic(view: TopicView) -> pb.GetTopicResponse:
    return pb.GetTopicResponse(
        topic=view.topic,
        max_message_size=view.max_message_size,
        partitions=[
            pb.Partition(
                index=p.index,
                broker_id=p.broker_id,
                broker=p.broker or "",
                partition_id=p.partition_id,
                partition_key=p.key,
            )
            for p in view.partitions
        ],
        shielded_brokers=view.shielded_brokers,
    )


def peer_host(peer: str | None) -> str | None:
    """The client's host from a gRPC peer string (``ipv4:10.0.0.7:5123``, ``ipv6:[::1]:5123``,
    ``unix:/path``): the address anonymous callers' quotas are keyed by."""
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        host = rest.rpartition(":")[0] if rest.startswith("[") else rest
        return host.strip("[]") or None
    return peer
