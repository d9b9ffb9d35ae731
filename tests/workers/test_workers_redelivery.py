"""``serve --workers 2`` and the consumer operations of #25 (nack, deadlines, seek, group lag): the instance
lives in one worker, and each call that lands on the other one (REST or gRPC) reaches the owner. Real
processes, the workers' private listeners (so which worker answers is not left to the kernel)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.workers_support import WorkerGateway, owner_worker, start_workers


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGateway]:
    gateway = start_workers(tmp_path_factory.mktemp("wr"), 2, "--embedded-topics", "rs:1,rt:1,gs:1,gt:1,ts:1")
    try:
        yield gateway
    finally:
        gateway.stop()


async def _poll(client: httpx.AsyncClient, base: str, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async with asyncio.timeout(20):
        while len(got) < count:
            answer = await client.get(f"{base}/messages", params={"timeout_ms": 500, "format": "utf8"})
            assert answer.status_code == 200, answer.text
            got += answer.json()["messages"]
    return got


async def test_rest_nack_deadlines_seek_and_lag_through_the_other_worker(gw: WorkerGateway) -> None:
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        sent = [f"m{i}" for i in range(4)]
        published = await own.post("/v1/topics/rs/messages", json={"messages": [{"value": v} for v in sent]})
        assert published.status_code == 200, published.text
        created = await own.post(
            "/v1/consumers/wrg",
            json={"topics": ["rs"], "startPosition": "earliest", "retryTopic": "rt", "ackDeadlineMs": 60000},
        )
        assert created.status_code == 201, created.text
        instance = created.json()["instanceId"]
        assert owner_worker(instance) == 0
        base = f"/v1/consumers/wrg/instances/{instance}"
        got = await _poll(other, base, 4)
        assert [m["value"] for m in got] == sent

        extended = await other.post(f"{base}/deadlines", json={"tokens": [got[0]["token"]], "extendMs": 5000})
        assert extended.status_code == 200, extended.text
        assert extended.json()["extended"] == 1

        nacked = await other.post(f"{base}/nacks", json={"tokens": [got[1]["token"]], "delayMs": 0})
        assert nacked.status_code == 200, nacked.text
        assert (nacked.json()["retried"], nacked.json()["failed"]) == (1, [])

        seeked = await other.post(f"{base}/seek", json={"position": "earliest"})
        assert seeked.status_code == 200, seeked.text
        assert [p["currOffset"] for p in seeked.json()["partitions"]] == [0]

        # lag is read from TubeMQ's offsets: every worker answers it alike
        again = await _poll(other, base, 5)
        assert (await other.post(f"{base}/commits", json={})).status_code == 200
        for client in (own, other):
            lag = await client.get("/v1/consumers/wrg/lag")
            assert lag.status_code == 200, lag.text
            assert lag.json()["group"] == "wrg" and lag.json()["lag"] >= 0, lag.json()
        assert set(sent) <= {m["value"] for m in again}  # after the seek (the nacked one comes back too)
        assert (await other.delete(base)).status_code == 204


async def test_rest_seek_by_time_through_the_other_worker(gw: WorkerGateway) -> None:
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        stamped = [{"value": f"t{i}", "msgTime": f"2026112701{i:02d}"} for i in range(4)]
        published = await own.post("/v1/topics/ts/messages", json={"messages": stamped})
        assert published.status_code == 200, published.text
        created = await own.post("/v1/consumers/wtg", json={"topics": ["ts"], "startPosition": "earliest"})
        assert created.status_code == 201, created.text
        instance = created.json()["instanceId"]
        assert owner_worker(instance) == 0
        base = f"/v1/consumers/wtg/instances/{instance}"
        assert [m["value"] for m in await _poll(other, base, 4)] == ["t0", "t1", "t2", "t3"]
        assert (await other.post(f"{base}/commits", json={})).status_code == 200

        seeked = await other.post(
            f"{base}/seek", json={"position": "time", "time": "2026-11-27T01:02:00Z", "timeZone": "UTC"}
        )
        assert seeked.status_code == 200, seeked.text
        assert [m["value"] for m in await _poll(other, base, 2)] == ["t2", "t3"]
        refused = await other.post(f"{base}/seek", json={"position": "time", "time": "01:02"})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "time", refused.text
        assert (await other.delete(base)).status_code == 204


async def test_grpc_nack_deadlines_seek_through_the_other_worker(gw: WorkerGateway) -> None:
    async with gw.pinned(0) as own:
        published = await own.post(
            "/v1/topics/gs/messages", json={"messages": [{"value": "a"}, {"value": "b"}]}
        )
        assert published.status_code == 200, published.text

    def stub_of(worker: int) -> tuple[grpc.aio.Channel, gateway_pb2_grpc.GatewayServiceStub]:
        channel = grpc.aio.insecure_channel(f"unix:{gw.socket_dir / f'g{worker}.sock'}")
        return channel, gateway_pb2_grpc.GatewayServiceStub(channel)

    own_channel, own_stub = stub_of(0)
    other_channel, other = stub_of(1)
    async with own_channel, other_channel:
        created = await own_stub.CreateConsumer(
            pb.CreateConsumerRequest(
                group="wgg", topics=["gs"], start_position=pb.START_POSITION_EARLIEST, retry_topic="gt"
            )
        )
        assert owner_worker(created.instance_id) == 0
        key = {"group": "wgg", "instance_id": created.instance_id}
        got: list[Any] = []
        async with asyncio.timeout(20):
            while len(got) < 2:
                got += (await other.Poll(pb.PollRequest(**key, timeout_ms=500))).messages
        extended = await other.ExtendDeadlines(
            pb.ExtendDeadlinesRequest(**key, tokens=[got[0].token], extend_ms=5000)
        )
        assert extended.extended == 1
        nacked = await other.Nack(pb.NackRequest(**key, tokens=[got[1].token], delay_ms=0))
        assert (nacked.retried, list(nacked.failed)) == (1, [])
        seeked = await other.Seek(pb.SeekRequest(**key, position=pb.START_POSITION_EARLIEST))
        assert [p.curr_offset for p in seeked.partitions] == [0]
        await other.DeleteConsumer(pb.DeleteConsumerRequest(**key))
