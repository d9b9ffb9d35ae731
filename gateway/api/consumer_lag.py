"""The consumer route that reads a group's lag from TubeMQ's own offsets (getGroupLag), and its answer body.

Registered on the consumers router, in its order, by ``gateway/api/routes_consumers.py``.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from gateway.api.consumer_deps import json_response
from gateway.api.deps import get_runtime
from gateway.service.group_lag_view import GroupLagView, read_group_lag


async def get_group_lag(group: str, request: Request) -> Response:
    """Per topic and partition: the committed offset, the end, the lag in messages and the msgTime of the
    oldest unconsumed message where known. Read from the brokers, so right whether or not any instance
    (of any gateway or client) is alive. A reading is shared by the requests for the group within
    `tubemq.group_lag_cache_seconds`; a caller starting more than `tubemq.group_lag_reads_per_second`
    readings a second is answered 429."""
    runtime = get_runtime(request)
    view = await read_group_lag(
        runtime.lag_reads,
        group,
        access=runtime.security.policy,
        ranges=runtime.ranges,
        consumers=runtime.consumers,
        watched=runtime.lag.groups if runtime.lag is not None else (),
    )
    return json_response(lag_body(view))


def lag_body(view: GroupLagView) -> dict[str, Any]:
    return {
        "group": view.group,
        "consumers": view.consumers,
        "lag": view.lag,
        "source": view.source,
        "topics": [
            {
                "topic": t.topic,
                "lag": t.lag,
                "partitions": [
                    {
                        "partitionKey": p.partition_key,
                        "brokerId": p.broker_id,
                        "partitionId": p.partition_id,
                        "committedOffset": p.committed_offset,
                        "endOffset": p.end_offset,
                        "lag": p.lag,
                        "oldestUnconsumedMsgTime": p.oldest_msg_time,
                    }
                    for p in t.partitions
                ],
            }
            for t in view.topics
        ],
    }
