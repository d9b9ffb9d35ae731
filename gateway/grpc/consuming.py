"""The consumer RPCs of the GatewayService (CreateConsumer, Poll, Commit, DeleteConsumer, Subscribe).

A mixin of :class:`~gateway.grpc.servicer.GatewayServicer`, over the runtime's
:class:`~gateway.service.consumers.ConsumerService` with the REST semantics. Differences that come from
gRPC itself: a call for an instance another replica owns is relayed to that replica's gRPC server
(:mod:`gateway.grpc.replicas`, with the rules of REST forwarding), one for a sibling worker's instance to
that worker (:mod:`gateway.grpc.siblings`), Commit names ``all_delivered`` explicitly
instead of an absent token list, and Subscribe is a server stream resumed with ``resume_token`` where
REST has Server-Sent Events resumed with ``Last-Event-ID``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from gateway.grpc.consumed_wire import encode_consumed
from gateway.grpc.errors import StreamSuperseded
from gateway.grpc.late_auth import client_subject
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.replicas import GrpcReplicas
from gateway.grpc.siblings import GrpcSiblings, Relay
from gateway.runtime import Runtime
from gateway.service.consumers import ConsumerService, InstanceInfo, InstanceSpec
from gateway.service.delivered import CommitResult, NackResult
from gateway.service.errors import InvalidInput, Unavailable, renamed_fields
from gateway.service.group_lag_view import read_group_lag
from gateway.service.seek import SeekOrder

#: The service's parameter names -> the proto3 JSON names of the gRPC request fields.
_FIELDS = {
    "max_messages": "maxMessages",
    "max_bytes": "maxBytes",
    "timeout": "timeoutMs",
    "resume_after": "resumeToken",
    "delay": "delayMs",
    "extension": "extendMs",
    "time": "timeMs",
    "time_zone": "timeZone",
}


class ConsumerRpcs:
    """Consumer instance RPCs; the servicer provides the runtime, the Subscribe step and the stop flag."""

    _runtime: Runtime
    _step: float
    _stopping: bool
    _siblings: GrpcSiblings | None
    _replicas: GrpcReplicas | None

    def _consumers(self) -> ConsumerService:
        return self._runtime.consumer_service()

    def _sibling_of(self, group: str, instance_id: str, context: grpc.aio.ServicerContext) -> Relay | None:
        """Where the call must be relayed: the sibling worker owning the instance (with the caller's
        verified certificate subject) or the replica owning it; None to serve it here (which answers an
        instance that lives elsewhere FAILED_PRECONDITION). A call a sibling relayed is never relayed again;
        one another replica relayed may still take one hop to a sibling."""
        metadata = dict(context.invocation_metadata() or ())
        if GrpcSiblings.hopped(metadata):
            return None
        owner = self._consumers().locate(group, instance_id)
        if owner is None:
            return None
        if owner.worker is not None:
            siblings = self._siblings
            if siblings is None:
                return None
            return siblings.relay(owner.worker, context, client_subject(context, metadata))
        replicas = self._replicas
        if replicas is None or replicas.relayed(metadata):
            return None
        return replicas.relay(owner, context, client_subject(context, metadata))

    async def CreateConsumer(
        self, request: pb.CreateConsumerRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateConsumerResponse:
        service = self._consumers()
        if self._runtime.draining:
            raise Unavailable(
                "this gateway is shutting down; create the consumer instance through another replica",
                retry_after=1.0,
            )
        info = await service.create(request.group, instance_spec(request))
        return consumer_instance(info)

    async def Poll(
        self, request: pb.PollRequest, context: grpc.aio.ServicerContext
    ) -> pb.PollResponse | bytes:
        relay = self._sibling_of(request.group, request.instance_id, context)
        if relay is not None:
            return await relay.unary("Poll", request, pb.PollResponse)
        with renamed_fields(_FIELDS):
            messages = await self._consumers().poll(
                request.group,
                request.instance_id,
                max_messages=request.max_messages if request.HasField("max_messages") else None,
                max_bytes=request.max_bytes if request.HasField("max_bytes") else None,
                timeout=request.timeout_ms / 1000 if request.HasField("timeout_ms") else None,
            )
        return encode_consumed(messages)  # a serialized PollResponse

    async def Commit(self, request: pb.CommitRequest, context: grpc.aio.ServicerContext) -> pb.CommitResponse:
        if request.all_delivered == bool(request.tokens):
            raise InvalidInput("give either tokens or allDelivered", field="tokens")
        relay = self._sibling_of(request.group, request.instance_id, context)
        if relay is not None:
            return await relay.unary("Commit", request, pb.CommitResponse)
        tokens = None if request.all_delivered else list(request.tokens)
        result = await self._consumers().commit(
            request.group, request.instance_id, tokens, consumed=not request.rollback
        )
        return commit_response(result)

    async def Nack(self, request: pb.NackRequest, context: grpc.aio.ServicerContext) -> pb.NackResponse:
        relay = self._sibling_of(request.group, request.instance_id, context)
        if relay is not None:
            return await relay.unary("Nack", request, pb.NackResponse)
        with renamed_fields(_FIELDS):
            if request.delay_ms < 0:
                raise InvalidInput("delayMs must be >= 0", field="delay")
            result = await self._consumers().nack(
                request.group, request.instance_id, list(request.tokens), delay=request.delay_ms / 1000
            )
        return nack_response(result)

    async def ExtendDeadlines(
        self, request: pb.ExtendDeadlinesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ExtendDeadlinesResponse:
        relay = self._sibling_of(request.group, request.instance_id, context)
        if relay is not None:
            return await relay.unary("ExtendDeadlines", request, pb.ExtendDeadlinesResponse)
        with renamed_fields(_FIELDS):
            result = self._consumers().extend_deadlines(
                request.group, request.instance_id, list(request.tokens), seconds=request.extend_ms / 1000
            )
        return pb.ExtendDeadlinesResponse(
            extended=result.extended, stale=result.stale, deadline=result.deadline_ms
        )

    async def Seek(self, request: pb.SeekRequest, context: grpc.aio.ServicerContext) -> pb.SeekResponse:
        relay = self._sibling_of(request.group, request.instance_id, context)
        if relay is not None:
            return await relay.unary("Seek", request, pb.SeekResponse)
        position = _SEEK_POSITIONS.get(request.position)
        if position is None:
            raise InvalidInput("position must be EARLIEST, LATEST, OFFSETS or TIME", field="position")
        with renamed_fields(_FIELDS):
            order = SeekOrder(
                position,
                offsets=dict(request.offsets) or None,
                partitions=list(request.partitions) or None,
                time=request.time_ms if request.HasField("time_ms") else None,
                time_zone=request.time_zone if request.HasField("time_zone") else None,
            )
            moved = await self._consumers().seek(request.group, request.instance_id, order)
        return pb.SeekResponse(
            partitions=[
                pb.SeekedPartition(
                    partition_key=m.partition_key, curr_offset=m.curr_offset, max_offset=m.max_offset
                )
                for m in moved
            ]
        )

    async def GetGroupLag(
        self, request: pb.GetGroupLagRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetGroupLagResponse:
        runtime = self._runtime
        view = await read_group_lag(
            runtime.lag_reads,
            request.group,
            access=runtime.security.policy,
            ranges=runtime.ranges,
            consumers=runtime.consumers,
            watched=runtime.lag.groups if runtime.lag is not None else (),
        )
        return pb.GetGroupLagResponse(
            group=view.group,
            consumers=view.consumers,
            lag=view.lag,
            source=view.source,
            topics=[
                pb.TopicLag(
                    topic=t.topic,
                    lag=t.lag,
                    partitions=[
                        pb.PartitionLag(
                            partition_key=p.partition_key,
                            broker_id=p.broker_id,
                            partition_id=p.partition_id,
                            committed_offset=p.committed_offset,
                            end_offset=p.end_offset,
                            lag=p.lag,
                            oldest_unconsumed_msg_time=p.oldest_msg_time,
                        )
                        for p in t.partitions
                    ],
                )
                for t in view.topics
            ],
        )

    async def DeleteConsumer(
        self, request: pb.DeleteConsumerRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteConsumerResponse:
        relay = self._sibling_of(request.group, request.instance_id, context)
        if relay is not None:
            return await relay.unary("DeleteConsumer", request, pb.DeleteConsumerResponse)
        await self._consumers().delete(request.group, request.instance_id)
        return pb.DeleteConsumerResponse()

    async def Subscribe(
        self, request: pb.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.SubscribeResponse | bytes]:
        relay = self._sibling_of(request.group, request.instance_id, context)
        if relay is not None:
            async for response in relay.stream("Subscribe", request, pb.SubscribeResponse):
                yield response
            return
        service = self._consumers()
        with renamed_fields(_FIELDS):
            cursor = service.open_stream(request.group, request.instance_id, request.resume_token or None)
            step = service.limits.step(
                request.max_messages if request.HasField("max_messages") else None,
                request.max_bytes if request.HasField("max_bytes") else None,
                cursor.instance.max_bytes,
            )
        async with service.using(cursor.instance):
            while True:
                if cursor.superseded:
                    raise StreamSuperseded("a newer Subscribe took this consumer instance over")
                # A draining or stopping gateway ends its streams so that shutdown does not wait for them.
                if self._stopping or self._runtime.draining:
                    raise Unavailable(
                        "this gateway is shutting down; its consumer instances close with it: create a new "
                        "one through another replica",
                        retry_after=1.0,
                    )
                messages = await cursor.next(step.max_messages, step.max_bytes, self._step)
                if messages:
                    yield encode_consumed(messages)  # a serialized SubscribeResponse
                    continue
                # A broker outage ends the stream with what Poll answers (UNAVAILABLE, its retry delay).
                outage = await service.outage(cursor.instance)
                if outage is not None:
                    raise outage


_START_POSITIONS = {
    pb.START_POSITION_UNSPECIFIED: "latest",
    pb.START_POSITION_LATEST: "latest",
    pb.START_POSITION_EARLIEST: "earliest",
    pb.START_POSITION_OFFSETS: "offsets",
}


_SEEK_POSITIONS = {
    pb.START_POSITION_LATEST: "latest",
    pb.START_POSITION_EARLIEST: "earliest",
    pb.START_POSITION_OFFSETS: "offsets",
    pb.START_POSITION_TIME: "time",
}


def instance_spec(request: pb.CreateConsumerRequest) -> InstanceSpec:
    """The service's instance spec; raises InvalidInput naming the field as REST does."""
    topics: dict[str, list[str] | None] = dict.fromkeys(request.topics)
    for name, stream_ids in request.filters.items():
        if name not in topics:
            raise InvalidInput(
                f"filters name topic {name!r}, which is not in topics", field=f"filters.{name}"
            )
        topics[name] = list(stream_ids.stream_ids)
    position = _START_POSITIONS.get(request.start_position)
    if position is None:
        raise InvalidInput(
            f"startPosition {request.start_position} is not LATEST, EARLIEST or OFFSETS (TIME is for Seek)",
            field="startPosition",
        )
    return InstanceSpec(
        topics=topics,
        start_position=position,
        offsets=dict(request.offsets) or None,
        auto_commit=request.auto_commit,
        max_bytes=request.max_bytes if request.HasField("max_bytes") else None,
        session_key=request.session_key if request.HasField("session_key") else None,
        source_count=request.source_count if request.HasField("source_count") else 1,
        retry_topic=request.retry_topic if request.HasField("retry_topic") else None,
        dead_letter_topic=request.dead_letter_topic if request.HasField("dead_letter_topic") else None,
        max_delivery_attempts=request.max_delivery_attempts
        if request.HasField("max_delivery_attempts")
        else None,
        ack_deadline=request.ack_deadline_ms / 1000 if request.HasField("ack_deadline_ms") else None,
    )


def consumer_instance(info: InstanceInfo) -> pb.CreateConsumerResponse:
    return pb.CreateConsumerResponse(
        instance_id=info.instance_id, group=info.group, auto_commit=info.auto_commit, client_id=info.client_id
    )


def commit_response(result: CommitResult) -> pb.CommitResponse:
    return pb.CommitResponse(
        committed=result.committed,
        rolled_back=result.rolled_back,
        stale=result.stale,
        pending=result.pending,
        awaiting_batch=result.awaiting_batch,
    )


def nack_response(result: NackResult) -> pb.NackResponse:
    return pb.NackResponse(
        retried=result.retried,
        dead_lettered=result.dead_lettered,
        stale=result.stale,
        failed=result.failed,
        error="" if result.error is None else str(result.error),
        pending=result.pending,
    )
