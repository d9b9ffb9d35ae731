"""Load for the dashboard tests: publishes over HTTP and gRPC and consumes with commits through one gateway,
and the wait until every panel's query has data in a real Prometheus scraping it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc
import httpx

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.prometheus_support import concrete, query


@dataclass
class Target:
    http: str  # host:port
    grpc: str  # host:port


async def publish_and_poll(target: Target, stop: asyncio.Event) -> int:
    """Publish to two topics over HTTP and gRPC, and consume one with commits, until ``stop``; returns
    how many messages were polled."""
    polled = 0
    async with (
        httpx.AsyncClient(base_url=f"http://{target.http}", timeout=10) as client,
        grpc.aio.insecure_channel(target.grpc) as channel,
    ):
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        spec = {"topics": ["demo"], "startPosition": "earliest"}
        created = await client.post("/v1/consumers/dash", json=spec)
        assert created.status_code == 201, created.text
        instance = f"/v1/consumers/dash/instances/{created.json()['instanceId']}"
        # a group that consumed once and left: lag with no consumer (its panel and alert)
        idle = await client.post("/v1/consumers/idle", json={"topics": ["orders"]})
        assert idle.status_code == 201, idle.text
        await client.get(f"/v1/consumers/idle/instances/{idle.json()['instanceId']}/messages")
        await client.delete(f"/v1/consumers/idle/instances/{idle.json()['instanceId']}")
        joined = await stub.CreateConsumer(pb.CreateConsumerRequest(group="dashg", topics=["orders"]))
        grpc_instance = joined.instance_id
        n = 0
        while not stop.is_set():
            for topic in ("demo", "orders"):
                batch = {"messages": [{"value": f"{topic}-{n}-{i}", "key": f"k{i}"} for i in range(5)]}
                answer = await client.post(f"/v1/topics/{topic}/messages", json=batch)
                assert answer.status_code == 200, answer.text
            sent = await stub.Publish(pb.PublishRequest(topic="orders", messages=[pb.Message(value=b"rpc")]))
            assert sent.failed == 0
            await stub.Poll(pb.PollRequest(group="dashg", instance_id=grpc_instance, timeout_ms=20))
            got = await client.get(f"{instance}/messages", params={"timeout_ms": 200, "max_messages": 20})
            assert got.status_code == 200, got.text
            tokens = [m["token"] for m in got.json()["messages"]]
            if tokens:
                polled += len(tokens)
                committed = await client.post(f"{instance}/commits", json={"tokens": tokens})
                assert committed.status_code == 200, committed.text
            n += 1
            await asyncio.sleep(0.05)
        await client.delete(instance)
    return polled


async def until_every_panel_has_data(
    prom: httpx.AsyncClient, queries: list[tuple[str, str]], load: asyncio.Task[int]
) -> None:
    """Wait until each (panel title, query) answers at least one series; several scrapes of a gateway
    under load are needed before every rate has samples."""
    deadline = time.monotonic() + 30
    while True:
        assert not load.done(), load.exception() if load.done() else None
        empty = []
        for title, expr in queries:
            if not await query(prom, concrete(expr)):
                empty.append(f"{title}: {concrete(expr)}")
        if not empty:
            return
        assert time.monotonic() < deadline, "panels without data:\n" + "\n".join(empty)
        await asyncio.sleep(0.5)
