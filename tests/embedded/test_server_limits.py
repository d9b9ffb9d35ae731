"""RpcServer bounds per link (the embedded master's and brokers' server): backpressure on unsent answers
and running calls, and a deadline on unfinished frames. Raw clients over loopback."""

from __future__ import annotations

import asyncio

import pytest

from gateway.embedded.server import RpcServer
from gateway.tubemq.wire.rpc import encode_request
from tests.support.faultproxy import EchoHandler, heartbeat
from tests.support.raw_client import HEARTBEAT, RawClient
from tests.support.waiting import eventually

BIG_ID = "x" * 8192  # echoed back: every answer is a little over 8 KiB


async def test_a_client_that_does_not_read_its_answers_stops_being_read() -> None:
    async with RpcServer(EchoHandler(), max_unsent_bytes=64 * 1024) as server:
        client = await RawClient.open(server)
        total = 4000  # 32 MiB of answers, far beyond what the sockets' buffers hold
        request = heartbeat(BIG_ID)

        async def pipeline() -> None:
            for serial in range(1, total + 1):
                client.writer.write(encode_request(serial, HEARTBEAT, request, 5000))
                await client.writer.drain()

        sender = asyncio.create_task(pipeline())

        async def paused() -> bool:
            return server.read_pauses > 0

        await eventually(paused, what="the server to stop reading")
        # Stopped long before the client's requests ran out: what is unanswered stays in the sockets.
        assert server.requests_received < total
        # The client reads now: everything is answered, in full.
        answered = 0
        while answered < total:
            await client.answer(wait=10.0)
            answered += 1
        await sender
        assert server.requests_received == total
        await client.close()


async def test_running_calls_are_bounded_per_link() -> None:
    async with RpcServer(EchoHandler(), max_calls=4) as server:
        client = await RawClient.open(server)
        for serial in range(1, 5):
            client.writer.write(encode_request(serial, HEARTBEAT, heartbeat("slow", "delay:0.5"), 5000))
        await client.writer.drain()

        async def four() -> bool:
            return server.requests_received == 4

        await eventually(four, what="four calls running")
        for serial in range(5, 11):
            client.writer.write(encode_request(serial, HEARTBEAT, heartbeat("next"), 5000))
        await client.writer.drain()

        async def paused() -> bool:
            return server.read_pauses > 0

        await eventually(paused, what="the server to stop reading")
        # Reading resumes as the slow calls finish: all ten are answered.
        serials = {(await client.answer(wait=10.0))[0] for _ in range(10)}
        assert serials == set(range(1, 11))
        await client.close()


async def test_an_unfinished_frame_closes_the_link_after_the_frame_timeout() -> None:
    async with RpcServer(EchoHandler(), frame_timeout=0.3) as server:
        client = await RawClient.open(server)
        frame = encode_request(1, HEARTBEAT, heartbeat("whole"), 5000)
        client.writer.write(frame)
        assert (await client.answer())[0] == 1  # a whole frame is fine
        client.writer.write(frame[:20])  # ... but this one never ends
        await client.writer.drain()
        assert await asyncio.wait_for(client.reader.read(), 10.0) == b""  # closed by the server
        assert server.frame_timeouts == 1
        await client.close()


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="frame_timeout"):
        RpcServer(EchoHandler(), frame_timeout=0)
    with pytest.raises(ValueError, match="max_calls"):
        RpcServer(EchoHandler(), max_calls=0)
