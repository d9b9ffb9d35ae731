"""The consumer routes of an instance's life: create (join the group), describe, delete (leave the group).

Registered on the consumers router, in its order, by ``gateway/api/routes_consumers.py``.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway.api.consumer_deps import (
    ConsumersDep,
    ForwarderDep,
    InstanceId,
    json_response,
    locate_owner,
    public_base,
)
from gateway.api.consumer_schemas import CreateConsumerRequest
from gateway.api.deps import get_runtime
from gateway.service.consumers import InstanceSpec
from gateway.service.errors import InvalidInput, Unavailable


async def create_consumer(
    group: str, body: CreateConsumerRequest, request: Request, service: ConsumersDep
) -> JSONResponse:
    """The instance lives in this gateway; its id works on every replica. It is closed after the lease
    (idle time) and its partitions go back to the group."""
    if get_runtime(request).draining:
        raise Unavailable(
            "this gateway is shutting down; create the consumer instance through another replica",
            retry_after=1.0,
        )
    topics: dict[str, list[str] | None] = dict.fromkeys(body.topics)
    for topic, stream_ids in (body.filters or {}).items():
        if topic not in topics:
            raise InvalidInput(
                f"filters name topic {topic!r}, which is not in topics", field=f"filters.{topic}"
            )
        topics[topic] = stream_ids
    spec = InstanceSpec(
        topics=topics,
        start_position=body.startPosition,
        offsets=body.offsets,
        auto_commit=body.autoCommit,
        max_bytes=body.maxBytes,
        session_key=body.sessionKey,
        source_count=body.sourceCount,
        retry_topic=body.retryTopic,
        dead_letter_topic=body.deadLetterTopic,
        max_delivery_attempts=body.maxDeliveryAttempts,
        ack_deadline=None if body.ackDeadlineMs is None else body.ackDeadlineMs / 1000,
    )
    info = await service.create(group, spec)
    base_url = service.base_url(group, info.instance_id, public_base(request))
    return JSONResponse(
        {"instanceId": info.instance_id, "baseUrl": base_url, "group": group, "autoCommit": info.auto_commit},
        status_code=201,
        headers={"Location": base_url},
    )


async def describe_consumer(
    group: str, instance_id: InstanceId, request: Request, service: ConsumersDep, forwarder: ForwarderDep
) -> Response:
    owner = locate_owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner)
    state = service.describe(group, instance_id)
    return json_response(
        {
            "instanceId": instance_id,
            "baseUrl": service.base_url(group, instance_id, public_base(request)),
            "group": group,
            "autoCommit": state.info.auto_commit,
            "partitions": [
                {
                    "partitionKey": p.partition_key,
                    "topic": p.topic,
                    "brokerId": p.broker_id,
                    "partitionId": p.partition_id,
                    "currOffset": p.curr_offset,
                    "maxOffset": p.max_offset,
                    "inUse": p.in_use,
                }
                for p in state.partitions
            ],
            "pendingMessages": state.pending,
            "bufferedMessages": state.buffered,
        }
    )


async def delete_consumer(
    group: str, instance_id: InstanceId, request: Request, service: ConsumersDep, forwarder: ForwarderDep
) -> Response:
    """Releases the instance's partitions; messages delivered and not committed are redelivered to the group
    (with autoCommit, what was delivered is committed first)."""
    owner = locate_owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner, extra_wait=service.leave_wait)
    await service.delete(group, instance_id)
    return Response(status_code=204)
