"""Fair shares of one process's budgets, HTTP and gRPC together (issue #22, rows 1 and 3), against a served
gateway with API keys required (real sockets, HTTP and gRPC):

* one principal trickling publish bodies holds at most its share of ``limits.max_concurrent_requests``
  (``max_concurrent_per_caller``, default a quarter): the others keep being served;
* a body must arrive at ``limits.min_body_rate`` on average: a byte every fraction of ``body_timeout`` no
  longer holds a request for as long as the client likes;
* gRPC calls and publish bytes count into the same budgets as HTTP: requests held over HTTP leave no room
  for gRPC calls, HTTP publish bytes none for a gRPC Publish (whose message is received only once the most
  it may weigh fits).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.auth_support import SecureGateway, secure_gateway
from tests.support.waiting import eventually

PUBLISH = "/v1/topics/demo/messages"


async def hold_publish(gw: SecureGateway, who: str, length: int, sent: bytes = b"x") -> tuple[Any, Any]:
    """A publish of ``length`` bytes of which only ``sent`` is sent: the request stays in progress."""
    port = int(gw.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = [
        f"POST {PUBLISH} HTTP/1.1",
        "host: 127.0.0.1",
        "content-type: application/octet-stream",
        f"content-length: {length}",
        f"authorization: {gw.files.headers(who)['Authorization']}",
    ]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + sent)
    await writer.drain()
    return reader, writer


async def status_of(reader: asyncio.StreamReader, wait: float = 20.0) -> tuple[int, dict[str, Any]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait)
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
    }
    body = await reader.readexactly(int(headers["content-length"]))
    return int(lines[0].split()[1]), json.loads(body) if body else {}


async def still_open(reader: asyncio.StreamReader) -> bool:
    try:
        await asyncio.wait_for(reader.read(1), 0.3)
    except TimeoutError:
        return True
    return False


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[SecureGateway]:
    limits = {"max_concurrent_requests": 8, "body_timeout": 20}  # each principal's share: 2
    async with secure_gateway(tmp_path, limits=limits) as gateway:
        yield gateway


async def test_a_principal_trickling_bodies_holds_only_its_share(gw: SecureGateway) -> None:
    held = [await hold_publish(gw, "alice", 100_000) for _ in range(8)]
    try:
        await asyncio.sleep(0.3)
        open_ones = [await still_open(reader) for reader, _ in held]
        refused = [
            await status_of(reader)
            for (reader, _), is_open in zip(held, open_ones, strict=True)
            if not is_open
        ]
        assert sum(open_ones) == 2 and len(refused) == 6, refused
        assert all(status == 503 and "share" in body["error"]["message"] for status, body in refused)
        # everyone else is still served, over HTTP and gRPC
        assert (await gw.http.get("/v1/topics/demo", headers=gw.files.headers("bob"))).status_code == 200
        assert (
            await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"), metadata=gw.files.metadata("bob"))
        ).topic
        # and alice's share is the same budget over gRPC: no gRPC call for her while she holds it
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"), metadata=gw.files.metadata("alice"))
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE and "share" in (
            caught.value.details() or ""
        )
    finally:
        for _, writer in held:
            writer.close()


async def test_a_body_slower_than_the_minimum_rate_is_408(tmp_path: Path) -> None:
    limits = {"body_timeout": 1.0, "min_body_rate": 1000}
    async with secure_gateway(tmp_path, limits=limits) as gw:
        reader, writer = await hold_publish(gw, "alice", 2000)  # due within 1 + 2000 / 1000 = 3 s
        try:

            async def trickle() -> None:
                while True:
                    await asyncio.sleep(0.4)  # never a pause of body_timeout
                    writer.write(b"x")
                    await writer.drain()

            dripping = asyncio.create_task(trickle())
            try:
                status, body = await status_of(reader, wait=15.0)
            finally:
                dripping.cancel()
            assert status == 408 and "bytes/s" in body["error"]["message"], body
        finally:
            writer.close()


async def test_grpc_calls_and_publish_bytes_count_in_the_http_budgets(tmp_path: Path) -> None:
    limits = {
        "max_concurrent_requests": 3,
        "max_concurrent_per_caller": 0,
        "max_inflight_publish_bytes": 1_000_000,
        "body_timeout": 20,
    }
    async with secure_gateway(tmp_path, limits=limits) as gw:
        # 800 kB of an HTTP publish body held: a gRPC Publish of 300 kB does not fit beside it
        _, writer = await hold_publish(gw, "alice", 900_000, bytes(800_000))
        try:
            await asyncio.sleep(0.3)
            request = pb.PublishRequest(topic="demo", messages=[pb.Message(value=bytes(300_000))])
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.stub.Publish(request, metadata=gw.files.metadata("bob"))
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "bytes of publish requests" in (caught.value.details() or "")
            # a gRPC message is received only once the most it may weigh fits (its size is not known before):
            # not even a small one while 800 kB of the 1 MB are held
            small = pb.PublishRequest(topic="demo", messages=[pb.Message(value=b"fits")])
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.stub.Publish(small, metadata=gw.files.metadata("bob"))
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
            # three requests in progress over HTTP: no gRPC call either
            more = [await hold_publish(gw, "bob", 10) for _ in range(2)]
            await asyncio.sleep(0.3)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await gw.stub.Publish(small, metadata=gw.files.metadata("carol"))
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "maximum of 3" in (caught.value.details() or "")
            for _, w in more:
                w.close()
        finally:
            writer.close()

        async def published() -> bool:
            try:
                return bool((await gw.stub.Publish(small, metadata=gw.files.metadata("bob"))).results)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() is grpc.StatusCode.UNAVAILABLE
                return False

        await eventually(published, what="a gRPC publish once the HTTP bodies are gone")


async def test_a_grpc_message_of_another_method_above_the_control_bound_is_refused(gw: SecureGateway) -> None:
    request = pb.CreateConsumerRequest(group="g", topics=["demo" + "x" * 100_000])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.CreateConsumer(request, metadata=gw.files.metadata("alice"))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_control_body_bytes" in (caught.value.details() or "")
