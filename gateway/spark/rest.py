"""The Spark source's ``gateway`` option: plan, read and write through a tubemq-gateway's REST API.

Planning asks ``GET /v1/topics/{topic}/partitions``; a task reads its ``[start, end)`` page by page from
``GET /v1/topics/{topic}/partitions/{key}/messages?from=&to=`` (each page ends where the next starts, so the
cut stays exact); writes go to ``POST /v1/topics/{topic}/messages`` as JSON batches with base64 values, and
a task fails unless the gateway answers 200 (every message stored). One keep-alive client per gateway,
timeout and token serves the process (Spark reuses its Python workers); they are closed at exit.
"""

from __future__ import annotations

import atexit
import base64
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from gateway.spark.arrow import record_batch
from gateway.spark.core import PartitionRange, PlannedPartition
from gateway.spark.failures import WriteFailed
from gateway.spark.options import SourceOptions
from gateway.tubemq.ranges import OffsetBounds
from gateway.tubemq.wire import BrokerInfo, Partition, format_msg_time

__all__ = ["PAGE_MESSAGES", "close_clients", "plan", "read_batches", "send_chunk"]

PAGE_MESSAGES = 5000

_clients: dict[tuple[str, float, str | None], httpx.Client] = {}


def _client(options: SourceOptions) -> httpx.Client:
    assert options.gateway is not None
    key = (options.gateway, options.timeout, options.gateway_token)
    client = _clients.get(key)
    if client is None:
        token = options.gateway_token
        headers = {"Authorization": f"Bearer {token}"} if token else None
        client = httpx.Client(base_url=options.gateway, timeout=options.timeout, headers=headers)
        _clients[key] = client
    return client


def close_clients() -> None:
    """Close the cached gateway clients and their keep-alive sockets (registered to run at exit, so no
    socket is left for the garbage collector to find open); a later call opens new ones."""
    while _clients:
        _, client = _clients.popitem()
        client.close()


atexit.register(close_clients)


def _check(response: httpx.Response) -> Any:
    if response.status_code != 200:
        raise RuntimeError(
            f"gateway answered {response.status_code} to {response.request.url}: {response.text}"
        )
    return response.json()


def plan(options: SourceOptions) -> dict[str, PlannedPartition]:
    """The partitions of every topic of ``options`` by key, with their stores' bounds."""
    planned: dict[str, PlannedPartition] = {}
    for topic in options.topics:
        planned.update(_plan_topic(options, topic))
    return planned


def _plan_topic(options: SourceOptions, topic: str) -> dict[str, PlannedPartition]:
    doc = _check(_client(options).get(f"/v1/topics/{quote(topic)}/partitions"))
    planned: dict[str, PlannedPartition] = {}
    for item in doc["partitions"]:
        # The address is shown only to principals allowed describe_cluster; the gateway reads for us, so
        # only the partition's identity (brokerId:topic:partitionId) matters here.
        host, _, port = (item["broker"] or "").rpartition(":")
        broker = BrokerInfo(item["brokerId"], host, int(port)) if port else BrokerInfo(item["brokerId"], "")
        partition = Partition(broker, topic, item["partitionId"])
        bounds = OffsetBounds(item["minOffset"], item["maxOffset"])
        planned[partition.partition_key] = PlannedPartition(partition, bounds, -2)
    return planned


def read_batches(options: SourceOptions, task: PartitionRange) -> Iterator[Any]:
    client = _client(options)
    path = f"/v1/topics/{quote(task.topic)}/partitions/{quote(task.key)}/messages"
    position = task.start
    while position < task.end:
        page = _check(client.get(path, params={"from": position, "to": task.end, "limit": PAGE_MESSAGES}))
        messages = page["messages"]
        if options.stream_ids:  # the gateway's range API has no stream-id filter: filtered here
            messages = [m for m in messages if m["streamId"] in options.stream_ids]
        if messages:
            yield record_batch(
                task.topic,
                task.key,
                [m["offset"] for m in messages],
                [int(m["messageId"]) for m in messages],
                [m.get("key") for m in messages],
                [base64.b64decode(m["value"]) for m in messages],
                [m["attributes"] for m in messages],
                [m["streamId"] for m in messages],
                [m["msgTime"] for m in messages],
            )
        if page["next"] <= position:
            raise RuntimeError(f"gateway range read of {task.key} made no progress at offset {position}")
        position = page["next"]


def send_chunk(options: SourceOptions, chunk: list[tuple[Any, ...]]) -> int:
    messages = []
    for body, key, attributes, stream_id, msg_time in chunk:
        item: dict[str, Any] = {"value": base64.b64encode(body).decode("ascii"), "encoding": "base64"}
        if key is not None:
            item["key"] = key
        if attributes:
            item["attributes"] = attributes
        if stream_id is not None:
            item["streamId"] = stream_id
        if msg_time is not None:
            item["msgTime"] = format_msg_time(msg_time) if isinstance(msg_time, datetime) else str(msg_time)
        messages.append(item)
    response = _client(options).post(
        f"/v1/topics/{quote(options.topic)}/messages", json={"messages": messages}
    )
    if response.status_code != 200:
        raise WriteFailed(f"gateway stored not every message ({response.status_code}): {response.text[:500]}")
    return len(chunk)
