"""The idempotency key of a gRPC ``Publish`` (metadata ``idempotency-key``), the fingerprint of its batch,
and what the key keeps of its answer: the gRPC side of :mod:`gateway.service.idempotency`, whose steps
(:meth:`~gateway.service.idempotency.Idempotency.run`) the servicer takes around the publish."""

from __future__ import annotations

import grpc

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.publish_wire import PublishBatch
from gateway.service.errors import InvalidInput
from gateway.service.idempotency import fingerprint, parse_key

__all__ = ["KEY_METADATA", "REPLAYED_METADATA", "batch_fingerprint", "kept", "metadata_key", "no_stream_key"]

#: the call metadata carrying an idempotency key, and the trailer marking a replayed answer
KEY_METADATA = "idempotency-key"
REPLAYED_METADATA = "idempotent-replayed"


def metadata_key(context: grpc.aio.ServicerContext) -> str | None:
    """The call's idempotency key, checked (INVALID_ARGUMENT naming the metadata); None without one."""
    sent = [v for k, v in context.invocation_metadata() or () if k == KEY_METADATA]
    if len(sent) > 1:
        raise InvalidInput(f"send one {KEY_METADATA} metadata entry, not {len(sent)}", field=KEY_METADATA)
    if not sent:
        return None
    value = sent[0]
    return parse_key(value if isinstance(value, str) else value.decode("latin-1"), field=KEY_METADATA)


def no_stream_key(context: grpc.aio.ServicerContext) -> None:
    """Refuse a PublishStream carrying an idempotency key (INVALID_ARGUMENT): a stream's acks are numbered
    by its own sequence, so a key cannot give one back; send keyed batches with Publish."""
    if any(k == KEY_METADATA for k, _ in context.invocation_metadata() or ()):
        raise InvalidInput(
            f"{KEY_METADATA} is taken by Publish only: PublishStream acks number messages by the stream's "
            "own sequence, so a retry cannot be answered with them; publish the batches that need the key "
            "with Publish",
            field=KEY_METADATA,
        )


def batch_fingerprint(batch: PublishBatch) -> bytes:
    """The fingerprint of a Publish request's messages: every field that is stored, message by message
    (a message's attribute count ahead of its items, so that no two batches give the same parts)."""
    parts: list[bytes | str | None] = ["grpc"]
    for m in batch.messages:
        attributes = sorted((m.attributes or {}).items())
        parts += [m.value, m.key, None if m.partition is None else str(m.partition), str(len(attributes))]
        for name, value in attributes:
            parts += [name, value]
        parts += [m.stream_id, m.msg_time]
    return fingerprint(parts)


def kept(answer: pb.PublishResponse | bytes) -> tuple[int, bytes]:
    """What the key keeps of a Publish answer (every answer that reaches here stored some message: a batch
    that failed alike raised): its bytes, with 200 when every message was stored, else 207."""
    if isinstance(answer, bytes):
        return 200, answer
    return 207, answer.SerializeToString()
