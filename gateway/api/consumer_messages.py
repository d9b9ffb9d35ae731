"""The consumer routes that read and settle messages: poll, commit (or roll back), nack, extend deadlines,
seek.

Registered on the consumers router, in its order, by ``gateway/api/routes_consumers.py``. An instance of
another replica or worker is forwarded to its owner (``consumer_deps.locate_owner``).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, NamedTuple

from fastapi import Body, Query, Request
from fastapi.responses import Response

from gateway.api.client_gone import until_client_gone
from gateway.api.consumer_deps import (
    FIELDS,
    ConsumersDep,
    ForwarderDep,
    InstanceId,
    json_response,
    locate_owner,
)
from gateway.api.consumer_render import render_poll
from gateway.api.consumer_schemas import CommitRequest, DeadlineRequest, NackRequest, SeekRequest, ValueFormat
from gateway.api.deps import get_runtime
from gateway.api.forwarding import Forwarder
from gateway.service.consumers import ConsumerService
from gateway.service.errors import renamed_fields
from gateway.service.seek import SeekOrder


class PollQuery(NamedTuple):
    """A poll's query parameters, checked (the route's, or ``gateway/api/direct_poll.py``'s reading)."""

    max_messages: int | None = None
    max_bytes: int | None = None
    timeout_ms: int | None = None
    format: ValueFormat = "base64"


async def poll_messages(
    group: str,
    instance_id: InstanceId,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
    max_messages: Annotated[int | None, Query(ge=1, description="at most this many messages")] = None,
    max_bytes: Annotated[
        int | None, Query(ge=1, description="value bytes (before encoding); one larger message comes alone")
    ] = None,
    timeout_ms: Annotated[int | None, Query(ge=0, description="wait this long for a first message")] = None,
    format: Annotated[ValueFormat, Query(description="how values are shown")] = "base64",
) -> Response:
    """Answers as soon as messages are there, else after `timeout_ms` with none. The first poll of a new
    instance waits for its partition assignment."""
    query = PollQuery(max_messages, max_bytes, timeout_ms, format)
    return await answer_poll(group, instance_id, query, request, service, forwarder, request)


async def answer_poll(
    group: str,
    instance_id: str,
    query: PollQuery,
    request: Request,
    service: ConsumerService,
    forwarder: Forwarder,
    client: Request | asyncio.Future[None],
) -> Response:
    """The poll's answer, on either way through HTTP (the route above, and ``gateway/api/direct_poll.py``):
    served here or forwarded to the instance's owner, ended early (499) once ``client`` went away
    (:func:`~gateway.api.client_gone.until_client_gone`)."""
    timeout = None if query.timeout_ms is None else query.timeout_ms / 1000
    owner = locate_owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        wait = service.limits.timeout if timeout is None else timeout
        # A client that gives up cancels the hop too: the owner's poll ends when the hop's link closes.
        return await until_client_gone(
            client, forwarder.forward(request, owner, extra_wait=max(wait, service.assignment_wait))
        )
    with renamed_fields(FIELDS):
        polled = await until_client_gone(
            client,
            service.poll(
                group,
                instance_id,
                max_messages=query.max_messages,
                max_bytes=query.max_bytes,
                timeout=timeout,
            ),
        )
    if isinstance(polled, Response):
        return polled
    return Response(render_poll(polled, query.format), media_type="application/json")


async def commit_messages(
    group: str,
    instance_id: InstanceId,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
    body: Annotated[CommitRequest | None, Body()] = None,
) -> Response:
    """`{"tokens": [...]}` commits those messages, `{}` everything delivered so far. A batch goes to the
    broker as consumed once all its messages are committed. `"consumed": false` rolls back instead."""
    owner = locate_owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner)
    chosen = body or CommitRequest.model_validate({})
    result = await service.commit(group, instance_id, chosen.tokens, consumed=chosen.consumed)
    return json_response(
        {
            "committed": result.committed,
            "rolledBack": result.rolled_back,
            "stale": result.stale,
            "pending": result.pending,
            "awaitingBatch": result.awaiting_batch,
        }
    )


async def nack_messages(
    group: str,
    instance_id: InstanceId,
    body: NackRequest,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
) -> Response:
    """Each named message is republished to the instance's retryTopic (or, at its maxDeliveryAttempts, to
    its deadLetterTopic) and settled once a broker acknowledged that; its batch's other messages are not
    redelivered. It comes back no earlier than `delayMs` from now with `deliveryAttempt` one higher."""
    owner = locate_owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        # the owner republishes to the retry topic: a publish's own time, besides reaching the owner
        producer = get_runtime(request).settings.producer
        return await forwarder.forward(request, owner, extra_wait=producer.send_timeout)
    with renamed_fields(FIELDS):
        result = await service.nack(group, instance_id, body.tokens, delay=body.delayMs / 1000)
    return json_response(
        {
            "retried": result.retried,
            "deadLettered": result.dead_lettered,
            "stale": result.stale,
            "failed": result.failed,
            "error": None if result.error is None else str(result.error),
            "pending": result.pending,
        }
    )


async def extend_deadlines(
    group: str,
    instance_id: InstanceId,
    body: DeadlineRequest,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
) -> Response:
    """The named messages are not redelivered before `extendMs` from now (unless rolled back or lost with
    their partition); a message's batch holds its partition meanwhile."""
    owner = locate_owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner)
    with renamed_fields(FIELDS):
        result = service.extend_deadlines(group, instance_id, body.tokens, seconds=body.extendMs / 1000)
    return json_response({"extended": result.extended, "stale": result.stale, "deadline": result.deadline_ms})


async def seek_partitions(
    group: str,
    instance_id: InstanceId,
    body: SeekRequest,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
) -> Response:
    """With the rules of `startPosition`: `earliest`, `latest` or `time` for `partitions` (default: all the
    instance holds), or `offsets` (broker index offsets, as publish returns them; the broker clamps to what
    it keeps). `time` lands each partition on its first message whose msgTime is at or after the time's
    minute (docs/consumers.md, Seek).
    What the instance fetched or delivered of those partitions and did not commit is rolled back first
    (those tokens become stale); the group's next reads start at the new position."""
    owner = locate_owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.forward(request, owner, extra_wait=service.seek_wait)
    with renamed_fields(FIELDS):
        order = SeekOrder(
            body.position,
            offsets=body.offsets,
            partitions=body.partitions,
            time=body.time,
            time_zone=body.timeZone,
        )
        moved = await service.seek(group, instance_id, order)
    return json_response(
        {
            "partitions": [
                {"partitionKey": m.partition_key, "currOffset": m.curr_offset, "maxOffset": m.max_offset}
                for m in moved
            ]
        }
    )
