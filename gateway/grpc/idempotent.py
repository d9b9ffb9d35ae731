"""The idempotency key of a gRPC ``Publish`` (metadata ``idempotency-key``) and of a ``PublishStream`` batch
(its ``idempotency_key``), the fingerprint of a batch, and what the key keeps of the answer (the batch's
``PublishResponse``, whichever way it came, so a stream's batch and a Publish of the same messages share a
key): the gRPC side of :mod:`gateway.service.idempotency`, whose steps
(:meth:`~gateway.service.idempotency.Idempotency.run`) are taken around the publish."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.proto_wire import varint
from gateway.grpc.publish_wire import PublishBatch, publish_response, stream_acks
from gateway.service.errors import InvalidInput, renamed_fields
from gateway.service.idempotency import Idempotency, Replay, fingerprint, parse_key
from gateway.service.publish import PublishOutcome

__all__ = [
    "KEY_METADATA",
    "REPLAYED_METADATA",
    "batch_fingerprint",
    "kept",
    "keyed_stream_acks",
    "metadata_key",
    "no_stream_key",
]

#: the ``PublishStreamRequest`` field of a batch's key, as errors name it (proto3 JSON)
KEY_FIELD = "idempotencyKey"

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
    """Refuse a PublishStream whose metadata carries an idempotency key (INVALID_ARGUMENT): one key cannot
    answer a stream's several batches; each batch carries its own (``idempotency_key``)."""
    if any(k == KEY_METADATA for k, _ in context.invocation_metadata() or ()):
        raise InvalidInput(
            f"{KEY_METADATA} metadata is taken by Publish only: on PublishStream give each batch its own key "
            "in PublishStreamRequest.idempotency_key",
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


async def keyed_stream_acks(
    keys: Idempotency,
    topic: str,
    batch: PublishBatch,
    first: int,
    publish: Callable[[], Awaitable[list[PublishOutcome]]],
) -> bytes:
    """The acks of a PublishStream batch carrying an idempotency key (its first message being the stream's
    ``first``): the steps of :meth:`Idempotency.run` around ``publish``, keeping the batch's
    ``PublishResponse`` when some message was stored; a replay is acked from that answer, ``replayed`` set.
    Raises what the steps raise (the caller acks every message of the batch with it)."""
    key = parse_key(batch.key, field=KEY_FIELD)
    assert key is not None

    def stored(outcomes: list[PublishOutcome]) -> tuple[int, bytes] | None:
        if not any(o.ok for o in outcomes):
            return None  # nothing stored: the key is freed for a retry
        return kept(publish_response(topic, outcomes))

    with renamed_fields({"idempotency_key": KEY_FIELD}):
        answer = await keys.run(topic, key, batch_fingerprint(batch), publish, stored)
    if isinstance(answer, Replay):
        return _replayed_acks(first, answer.body)
    return stream_acks(first, answer)


def _replayed_acks(first: int, body: bytes) -> bytes:
    """The acks of a batch from its recorded ``PublishResponse``, numbered from ``first``, marked replayed."""
    parts = []
    for result in pb.PublishResponse.FromString(body).results:
        ack = pb.PublishAck(sequence=first + result.index, replayed=True)
        if result.HasField("stored"):
            ack.stored.CopyFrom(result.stored)
        else:
            ack.error.CopyFrom(result.error)
        data = ack.SerializeToString()
        parts.append(b"\x0a%b%b" % (varint(len(data)), data))
    return b"".join(parts)
