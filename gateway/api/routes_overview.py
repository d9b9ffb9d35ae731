"""``GET /v1/topics`` and ``GET /v1/consumers``: what this gateway knows and holds, for the web console.

``GET /v1/topics`` lists the topics the gateway knows (the embedded cluster's, those published to, those of
its consumer instances, those in its publish counters) that the caller may ``describe``, with the publish
counters of the whole replica (every worker process: read from the merged metrics, the numbers Prometheus
scrapes), and the brokers of their partitions with their shielding (:func:`gateway.service.overview.
topic_overview`). A client gets a publish rate by reading the counters twice.

``GET /v1/consumers`` lists the consumer instances the replica holds that the caller may see (its own; all
with ``admin``) with each held partition's offsets and lag. With worker processes each worker holds its own
instances: the worker that answers asks its siblings (one hop over their private listeners, with the caller's
credentials, like forwarding) and merges their lists; ``incompleteWorkers`` names a sibling that did not
answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.consumer_deps import get_forwarder
from gateway.api.deps import get_runtime
from gateway.api.forwarding import Forwarder, check_passable
from gateway.api.overview_schemas import ConsumersOverviewResponse, TopicsOverviewResponse
from gateway.api.schemas import ErrorResponse
from gateway.api.worker_listener import replica_metrics
from gateway.observability.metrics import OVERFLOW, PREFIX, GatewayMetrics
from gateway.runtime import Runtime
from gateway.service.consumers import Owner
from gateway.service.errors import ServiceError
from gateway.service.overview import (
    PublishCounts,
    route_topics,
    store_key,
    topic_overview,
    visible_group_lags,
    visible_instances,
)

__all__ = ["publish_counts", "router"]

router = APIRouter(tags=["overview"])

_COUNTERS = {
    PREFIX + "published_messages": "messages",
    PREFIX + "published_bytes": "bytes",
    PREFIX + "publish_errors": "errors",
}


def publish_counts(exposition: str) -> dict[str, PublishCounts]:
    """Per topic, the publish counters of a Prometheus text exposition (summed over any ``worker`` label)."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for family in text_string_to_metric_families(exposition):
        kind = _COUNTERS.get(family.name)
        if kind is None:
            continue
        for sample in family.samples:
            topic = sample.labels.get("topic")
            if sample.name.endswith("_total") and topic and topic != OVERFLOW:
                sums[topic][kind] += sample.value
    return {t: PublishCounts(int(v["messages"]), int(v["bytes"]), int(v["errors"])) for t, v in sums.items()}


#: seconds one reading of the counters serves every caller: reading them renders every metric (and with
#: worker processes scrapes every sibling), which a caller polling in a loop must not multiply
COUNTS_MAX_AGE = 1.0


_Counts = dict[str, PublishCounts]


async def _replica_counts(request: Request, runtime: Runtime) -> _Counts:
    state = request.app.state
    cached: tuple[float, asyncio.Future[_Counts]] | None = getattr(state, "publish_counts", None)
    now = time.monotonic()
    if cached is not None and now - cached[0] < COUNTS_MAX_AGE:
        return await asyncio.shield(cached[1])  # concurrent callers share one reading
    reading = asyncio.ensure_future(_read_counts(state.metrics, runtime))
    state.publish_counts = (now, reading)
    try:
        return await asyncio.shield(reading)
    except BaseException:
        if getattr(state, "publish_counts", None) == (now, reading):
            state.publish_counts = None  # a failed reading is not kept
        raise


async def _read_counts(metrics: GatewayMetrics, runtime: Runtime) -> dict[str, PublishCounts]:
    if runtime.worker is not None:
        secret = runtime.settings.consumers.id_secret
        text = (await replica_metrics(metrics, runtime.worker, secret)).decode()
    else:
        text = metrics.render().decode()
    return await asyncio.to_thread(publish_counts, text)


def _known_topics(runtime: Runtime, counted: set[str]) -> set[str]:
    names = set(counted)
    names.update(runtime.embedded_topics())
    if runtime.producer is not None:
        names.update(runtime.producer.published_topics)
    if runtime.consumers is not None:
        for instance in runtime.consumers.held():
            names.update(instance.consumer.topics)
    return names


@router.get(
    "/v1/topics",
    operation_id="listTopics",
    summary="Topics this gateway knows, with publish counters and the brokers they live on",
    response_model=TopicsOverviewResponse,
    responses={503: {"model": ErrorResponse, "description": "the gateway is not started"}},
)
async def list_topics(request: Request) -> JSONResponse:
    """Only topics the caller may `describe`; broker addresses only with `describe_cluster`. The counters
    count since each worker process started; read them twice for a rate."""
    runtime = get_runtime(request)
    runtime.publisher()  # Unavailable while starting or stopping
    producer = runtime.producer
    assert producer is not None
    counts = await _replica_counts(request, runtime)
    # the embedded cluster's topics exist from the start: show their partitions before any publish
    await route_topics(producer, runtime.embedded_topics())
    overview = topic_overview(producer, runtime.security.policy, _known_topics(runtime, set(counts)), counts)
    body = {
        "topics": [
            {
                "topic": t.topic,
                "partitions": t.partitions,
                "brokerIds": t.broker_ids,
                "shieldedBrokers": t.shielded_brokers,
                "publishedMessages": t.published.messages,
                "publishedBytes": t.published.bytes,
                "publishErrors": t.published.errors,
            }
            for t in overview.topics
        ],
        "brokers": [
            {
                "brokerId": b.broker_id,
                "broker": b.address,
                "state": b.state,
                "reason": b.reason,
                "shieldedForSeconds": b.shielded_for,
                "consecutiveFailures": b.consecutive_failures,
                "sends": b.sends,
                "successes": b.successes,
                "partitions": b.partitions,
            }
            for b in overview.brokers
        ],
    }
    return JSONResponse(body)


def _local_instances(runtime: Runtime) -> list[dict[str, Any]]:
    service = runtime.consumer_service()
    worker = service.worker
    return [
        {
            "instanceId": o.instance_id,
            "group": o.group,
            "owner": o.owner,
            "worker": worker,
            "topics": o.topics,
            "autoCommit": o.auto_commit,
            "pendingMessages": o.pending,
            "bufferedMessages": o.buffered,
            "idleSeconds": round(o.idle_seconds, 3),
            "lag": o.lag,
            "partitions": [
                {
                    "partitionKey": p.partition.partition_key,
                    "topic": p.partition.topic,
                    "brokerId": p.partition.broker_id,
                    "partitionId": p.partition.partition_id,
                    "store": p.store,
                    "currOffset": p.partition.curr_offset,
                    "maxOffset": p.partition.max_offset,
                    "readPosition": p.position,
                    "deliveredTo": p.delivered,
                    "endOffset": p.end,
                    "lag": p.lag,
                    "inUse": p.partition.in_use,
                }
                for p in o.partitions
            ],
        }
        for o in visible_instances(
            service,
            runtime.security.policy,
            service.now(),
            runtime.lag.readings if runtime.lag is not None else None,
        )
    ]


def _local_groups(runtime: Runtime) -> list[dict[str, Any]]:
    return [
        {
            "group": g.group,
            "consumers": g.consumers,
            "readAt": round(g.read_at * 1000),
            "lag": g.lag,
            "partitions": [
                {
                    "partitionKey": f"{p.broker_id}:{p.topic}:{p.partition_id}",
                    "topic": p.topic,
                    "brokerId": p.broker_id,
                    "partitionId": p.partition_id,
                    "store": store_key(p.topic, p.broker_id, p.partition_id),
                    "committedOffset": p.committed,
                    "endOffset": p.end,
                    "lag": p.lag_messages,
                }
                for p in g.partitions
            ],
        }
        for g in visible_group_lags(runtime.lag, runtime.security.policy)
    ]


def _newest_per_group(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each worker watches the groups its own consumers joined: one group, the newest reading."""
    newest: dict[str, dict[str, Any]] = {}
    for g in groups:
        if g["group"] not in newest or g["readAt"] > newest[g["group"]]["readAt"]:
            newest[g["group"]] = g
    return [newest[name] for name in sorted(newest)]


@router.get(
    "/v1/consumers",
    operation_id="listConsumers",
    summary="Consumer instances this gateway holds, with the lag of each held partition",
    response_model=ConsumersOverviewResponse,
    responses={503: {"model": ErrorResponse, "description": "the gateway is not started"}},
)
async def list_consumers(request: Request) -> JSONResponse:
    """The caller's own instances (every instance for a caller allowed `admin`), of this replica only.
    Lag has one definition here, in the metrics and in `GET /v1/consumers/{group}/lag`: messages (index
    entries of 28 bytes) from the group's read position to the end of the partition's store; a total counts
    each `store` once, with its slowest partition. An instance's partition has `readPosition` and
    `endOffset`, the newest known (its last fetch's `currOffset` / `maxOffset`, or the group's last reading
    at the broker, whichever is further on), and `lag` between them (null until both are known). `groups`:
    the lag of the groups this replica has served, read from TubeMQ's own offsets every
    tubemq.group_lag_interval seconds (it stays when the consumers leave), for the topics the caller may
    consume with the group (every group with `admin`); when nothing moves, a group and its instances show
    the same lag."""
    runtime = get_runtime(request)
    instances = _local_instances(runtime)
    groups = _local_groups(runtime)
    incomplete: list[int] = []
    forwarder = await get_forwarder(request)
    service = runtime.consumer_service()
    if runtime.worker is not None and not forwarder.was_hopped(request):
        # a header the hops could not carry is the caller's mistake (400 naming it), not a sibling's silence
        check_passable(request)
        siblings = sorted(runtime.worker.siblings())
        answers = await asyncio.gather(
            *(_sibling_instances(request, forwarder, Owner(service.advertised_url, i)) for i in siblings)
        )
        for index, found in zip(siblings, answers, strict=True):
            if found is None:
                incomplete.append(index)
            else:
                instances.extend(found[0])
                groups.extend(found[1])
        instances.sort(key=lambda i: (i["group"], i["instanceId"]))
        groups = _newest_per_group(groups)
    return JSONResponse({"instances": instances, "groups": groups, "incompleteWorkers": incomplete})


async def _sibling_instances(
    request: Request, forwarder: Forwarder, owner: Owner
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    try:
        answer = await forwarder.forward(request, owner)
    except ServiceError:
        return None
    if answer.status_code != 200:
        return None
    try:
        body = json.loads(bytes(answer.body))
        found, groups = body["instances"], body["groups"]
    except (ValueError, KeyError, TypeError):
        return None
    return (found, groups) if isinstance(found, list) and isinstance(groups, list) else None
