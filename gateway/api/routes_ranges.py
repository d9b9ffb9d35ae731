"""REST routes for exact offset ranges (used by the Spark source's ``gateway`` option).

``GET /v1/topics/{topic}/partitions`` lists partitions with their offset bounds;
``GET /v1/topics/{topic}/partitions/{partitionKey}/messages?from=&to=&limit=`` reads ``[from, to)`` of one
partition (index offsets), one page at a time: continue with ``from = next`` until ``next == to``.
Values are base64.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from gateway.api.deps import get_runtime
from gateway.service.errors import Unavailable
from gateway.service.ranges import RangeService

router = APIRouter(prefix="/v1/topics", tags=["ranges"])


def _service(request: Request) -> RangeService:
    service: RangeService | None = getattr(request.app.state, "ranges", None)
    if service is None:
        runtime = get_runtime(request)
        if runtime.pool is None or not runtime.masters:
            raise Unavailable("the gateway is starting or stopping; retry shortly", retry_after=1.0)
        service = RangeService(runtime.pool, runtime.masters, access=runtime.security.policy)
        request.app.state.ranges = service
    return service


@router.get(
    "/{topic}/partitions", operation_id="getPartitionOffsets", summary="Partitions with offset bounds"
)
async def get_partitions(topic: str, request: Request) -> dict[str, Any]:
    found = await _service(request).partitions(topic)
    return {
        "topic": topic,
        "partitions": [
            {
                "partitionKey": p.partition.partition_key,
                "brokerId": p.partition.broker.broker_id,
                "broker": str(p.partition.broker.address),
                "partitionId": p.partition.partition_id,
                "minOffset": p.bounds.min_offset,
                "maxOffset": p.bounds.max_offset,
            }
            for p in found
        ],
    }


@router.get(
    "/{topic}/partitions/{partitionKey}/messages",
    operation_id="readRange",
    summary="Read the messages of one partition in [from, to), a page at a time",
)
async def read_range(
    topic: str,
    partitionKey: str,
    request: Request,
    start: Annotated[int, Query(alias="from", ge=0)],
    end: Annotated[int, Query(alias="to", ge=0)],
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> dict[str, Any]:
    page = await _service(request).read(topic, partitionKey, start, end, limit)
    return {
        "topic": topic,
        "partitionKey": partitionKey,
        "from": page.start,
        "to": page.end,
        "next": page.next,
        "messages": [
            {
                "messageId": m.message_id,
                "offset": m.offset,
                "value": base64.b64encode(m.body).decode("ascii"),
                "key": m.key,
                "attributes": m.attributes,
                "streamId": m.stream_id,
                "msgTime": m.msg_time,
            }
            for m in page.messages
        ],
    }
