"""GET /v1/consumers/{group}/lag and gRPC GetGroupLag: a group's lag from TubeMQ's own offsets (the embedded
cluster serves the brokers' and master's web API with the real servers' fields), the same with and without
a live instance, per topic and partition, with the oldest unconsumed message's msgTime."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime
from tests.support.gateway_support import FAST_CONSUMERS


@pytest.fixture
async def served() -> AsyncIterator[tuple[httpx.AsyncClient, gateway_pb2_grpc.GatewayServiceStub]]:
    settings = Settings(
        http_host="127.0.0.1",
        grpc={"port": 0, "host": "127.0.0.1"},
        embedded={"topics": "lagone:1,lagtwo:2"},
        # the figures count where each partition's reads stopped: no fetch ahead reads a partition further
        consumers={**FAST_CONSUMERS, "prefetch_bytes": 0},
        tubemq={"group_lag_cache_seconds": 0},  # every request reads anew
    )
    runtime = Runtime(settings)
    await runtime.start()
    server = GrpcServer(runtime, grace=0.2)
    try:
        await server.start()
        transport = httpx.ASGITransport(app=create_app(runtime=runtime))
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=20) as http,
            grpc.aio.insecure_channel(server.address) as channel,
        ):
            yield http, gateway_pb2_grpc.GatewayServiceStub(channel)
    finally:
        await server.stop(0)
        await runtime.stop()


async def _consume_and_commit(http: httpx.AsyncClient, path: str, count: int) -> None:
    got = 0
    while got < count:
        polled = await http.get(f"{path}/messages", params={"max_messages": count - got, "timeout_ms": 5000})
        tokens = [m["token"] for m in polled.json()["messages"]]
        if tokens:
            assert (await http.post(f"{path}/commits", json={"tokens": tokens})).json()["committed"] == len(
                tokens
            )
        got += len(tokens)


async def test_lag_is_the_unconsumed_count_with_and_without_a_live_instance(
    served: tuple[httpx.AsyncClient, Any],
) -> None:
    http, stub = served
    missing = await http.get("/v1/consumers/lag-none/lag")
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "group"
    created = await http.post("/v1/consumers/lag-e", json={"topics": ["lagone"], "startPosition": "earliest"})
    path = f"/v1/consumers/lag-e/instances/{created.json()['instanceId']}"
    first = [{"value": f"a{i}"} for i in range(10)]
    await http.post("/v1/topics/lagone/messages", json={"messages": first})
    await _consume_and_commit(http, path, 10)
    later = [{"value": f"b{i}", "msgTime": "202611262301"} for i in range(7)]
    sent = (await http.post("/v1/topics/lagone/messages", json={"messages": later})).json()["results"]
    live = await http.get("/v1/consumers/lag-e/lag")
    assert live.status_code == 200, live.text
    assert (await http.delete(path)).status_code == 204
    gone = await http.get("/v1/consumers/lag-e/lag")
    for answer in (live, gone):
        body = answer.json()
        assert body["group"] == "lag-e" and body["lag"] == 7
        [topic] = body["topics"]
        assert topic["topic"] == "lagone" and topic["lag"] == 7
        [part] = topic["partitions"]
        assert part["partitionKey"] == sent[0]["partitionKey"]
        assert part["committedOffset"] == sent[0]["offset"]
        assert part["endOffset"] == sent[-1]["offset"] + 28 and part["lag"] == 7
        assert part["oldestUnconsumedMsgTime"] == "202611262301"
    assert live.json()["consumers"] == 1 and gone.json()["consumers"] == 0
    answer = await stub.GetGroupLag(pb.GetGroupLagRequest(group="lag-e"))
    assert answer.lag == 7 and answer.consumers == 0
    assert [(p.partition_key, p.lag, p.oldest_unconsumed_msg_time) for p in answer.topics[0].partitions] == [
        (sent[0]["partitionKey"], 7, "202611262301")
    ]
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await stub.GetGroupLag(pb.GetGroupLagRequest(group="lag-none"))
    assert bad.value.code() is grpc.StatusCode.NOT_FOUND
    bad_name = await http.get("/v1/consumers/-bad-/lag")
    assert bad_name.status_code == 400 and bad_name.json()["error"]["field"] == "group"


async def test_a_shared_store_counts_once_with_its_slowest_partition(
    served: tuple[httpx.AsyncClient, Any],
) -> None:
    http, _ = served
    created = await http.post("/v1/consumers/lag-s", json={"topics": ["lagtwo"], "startPosition": "earliest"})
    path = f"/v1/consumers/lag-s/instances/{created.json()['instanceId']}"
    await http.post("/v1/topics/lagtwo/messages", json={"messages": [{"value": "x", "partition": 0}]})
    await _consume_and_commit(http, path, 1)
    await http.post("/v1/topics/lagtwo/messages", json={"messages": [{"value": "y"} for _ in range(5)]})
    await http.delete(path)
    body = (await http.get("/v1/consumers/lag-s/lag")).json()
    [topic] = body["topics"]
    # two partitions of one store: each partition's figure counts the store's entries past its own position
    # (partition 1 never read past the entry of partition 0: 6), so the topic counts the store once, with
    # its slowest partition: an upper bound of the 5 unconsumed, never their sum (11)
    lags = sorted(p["lag"] for p in topic["partitions"])
    assert lags == [5, 6]
    assert topic["lag"] == body["lag"] == 6


@pytest.fixture
async def shared() -> AsyncIterator[tuple[httpx.AsyncClient, gateway_pb2_grpc.GatewayServiceStub, Runtime]]:
    settings = Settings(
        http_host="127.0.0.1",
        grpc={"port": 0, "host": "127.0.0.1"},
        embedded={"topics": "lagone:1"},
        consumers=FAST_CONSUMERS,
        tubemq={"group_lag_interval": 300, "group_lag_cache_seconds": 30, "group_lag_reads_per_second": 4},
    )
    runtime = Runtime(settings)
    await runtime.start()
    server = GrpcServer(runtime, grace=0.2)
    try:
        await server.start()
        transport = httpx.ASGITransport(app=create_app(runtime=runtime))
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=20) as http,
            grpc.aio.insecure_channel(server.address) as channel,
        ):
            yield http, gateway_pb2_grpc.GatewayServiceStub(channel), runtime
    finally:
        await server.stop(0)
        await runtime.stop()


async def test_concurrent_lag_reads_of_one_group_share_one_reading_and_a_caller_is_capped(
    shared: tuple[httpx.AsyncClient, gateway_pb2_grpc.GatewayServiceStub, Runtime],
) -> None:
    """64 concurrent requests for one group's lag (one that committed, one that never did), over REST and
    gRPC, cost one reading each (three web API calls), not three calls per request; a caller starting
    readings of ever new groups is refused past its rate with 429 / RESOURCE_EXHAUSTED."""
    http, stub, runtime = shared
    created = await http.post("/v1/consumers/lag-c", json={"topics": ["lagone"], "startPosition": "earliest"})
    path = f"/v1/consumers/lag-c/instances/{created.json()['instanceId']}"
    await http.post("/v1/topics/lagone/messages", json={"messages": [{"value": f"v{i}"} for i in range(4)]})
    await _consume_and_commit(http, path, 2)
    assert (await http.delete(path)).status_code == 204
    assert runtime.lag_reads is not None
    reader = runtime.lag_reads.reader
    before = reader.requests
    answers = await asyncio.gather(
        *(http.get("/v1/consumers/lag-c/lag") for _ in range(32)),
        *(stub.GetGroupLag(pb.GetGroupLagRequest(group="lag-c")) for _ in range(32)),
    )
    rest = [a for a in answers if isinstance(a, httpx.Response)]
    [(status, lag)] = {(a.status_code, a.json()["lag"]) for a in rest}
    assert status == 200 and lag > 0
    assert {a.lag for a in answers if isinstance(a, pb.GetGroupLagResponse)} == {lag}
    missing = await asyncio.gather(*(http.get("/v1/consumers/lag-never/lag") for _ in range(64)))
    assert {a.status_code for a in missing} == {404}
    assert reader.requests - before == 6  # two readings of three calls
    # a new group per request: the caller's readings are capped (4 a second, a burst of 4)
    spread = [await http.get(f"/v1/consumers/lag-n{i}/lag") for i in range(8)]
    refused = [a for a in spread if a.status_code == 429]
    assert refused and all(a.status_code in (404, 429) for a in spread)
    assert (
        float(refused[0].headers["retry-after"]) > 0
        and "lag readings" in refused[0].json()["error"]["message"]
    )
    codes = []
    for i in range(8):
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await stub.GetGroupLag(pb.GetGroupLagRequest(group=f"lag-g{i}"), timeout=10)
        codes.append(failed.value.code())
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes and set(codes) <= {
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.NOT_FOUND,
    }


async def test_a_group_with_a_live_instance_and_no_offset_at_the_broker_answers_the_gateways_view(
    served: tuple[httpx.AsyncClient, Any],
) -> None:
    """Before any broker holds an offset of a group, a group that exists (an instance here, consumers at
    the master) answers 200 with the gateway's own view, over REST and gRPC; a group nobody knows is 404."""
    http, stub = served
    await http.post("/v1/topics/lagone/messages", json={"messages": [{"value": f"w{i}"} for i in range(3)]})
    created = await http.post("/v1/consumers/lag-w", json={"topics": ["lagone"], "startPosition": "earliest"})
    path = f"/v1/consumers/lag-w/instances/{created.json()['instanceId']}"
    # registered, nothing fetched yet: no broker has an offset of the group, the master lists its consumer
    early = await http.get("/v1/consumers/lag-w/lag")
    assert early.status_code == 200, early.text
    assert early.json() == {"group": "lag-w", "consumers": 1, "lag": 0, "source": "gateway", "topics": []}
    over_grpc = await stub.GetGroupLag(pb.GetGroupLagRequest(group="lag-w"))
    assert (over_grpc.source, over_grpc.consumers, over_grpc.lag) == ("gateway", 1, 0)
    polled = await http.get(f"{path}/messages", params={"max_messages": 1, "timeout_ms": 5000})
    assert len(polled.json()["messages"]) == 1
    later = (await http.get("/v1/consumers/lag-w/lag")).json()
    assert (
        later["source"] == "tubemq" and later["lag"] == 3
    )  # the embedded broker books the group at its fetch
    assert (await http.get("/v1/consumers/lag-nobody/lag")).status_code == 404
