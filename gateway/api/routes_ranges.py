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
from fastapi.responses import JSONResponse

from gateway.api.deps import get_runtime
from gateway.api.range_schemas import PartitionOffsetsResponse, RangePage
from gateway.api.schemas import ErrorResponse
from gateway.service.ranges import RangeService

router = APIRouter(prefix="/v1/topics", tags=["ranges"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "a parameter is invalid; `error.field` names it"},
    404: {"model": ErrorResponse, "description": "the topic is not deployed, or has no such partition now"},
    503: {"model": ErrorResponse, "description": "no master or broker answered in time; see Retry-After"},
}


def _service(request: Request) -> RangeService:
    return get_runtime(request).range_service()


# The answers are built as plain dicts and sent as they are (a page holds up to 10000 messages): the models
# only document them (response_model=None, responses={200: ...}).
@router.get(
    "/{topic}/partitions",
    operation_id="getPartitionOffsets",
    summary="Partitions with offset bounds",
    response_model=None,
    responses={200: {"model": PartitionOffsetsResponse, "description": "every partition"}, **_ERRORS},
)
async def get_partitions(topic: str, request: Request) -> JSONResponse:
    found = await _service(request).partitions(topic)
    body = {
        "topic": topic,
        "partitions": [
            {
                "partitionKey": p.partition.partition_key,
                "brokerId": p.partition.broker.broker_id,
                "broker": p.broker,
                "partitionId": p.partition.partition_id,
                "minOffset": p.bounds.min_offset,
                "maxOffset": p.bounds.max_offset,
            }
            for p in found
        ],
    }
    return JSONResponse(body)


@router.get(
    "/{topic}/partitions/{partitionKey}/messages",
    operation_id="readRange",
    summary="Read the messages of one partition in [from, to), a page at a time",
    response_model=None,
    responses={200: {"model": RangePage, "description": "one page of the range"}, **_ERRORS},
)
async def read_range(
    topic: str,
    partitionKey: str,
    request: Request,
    start: Annotated[int, Query(alias="from", ge=0)],
    end: Annotated[int, Query(alias="to", ge=0)],
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> JSONResponse:
    page = await _service(request).read(topic, partitionKey, start, end, limit)
    body = {
        "topic": topic,
        "partitionKey": partitionKey,
        "from": page.start,
        "to": page.end,
        "next": page.next,
        "messages": [
            {
                "messageId": str(m.message_id),
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
    return JSONResponse(body)
