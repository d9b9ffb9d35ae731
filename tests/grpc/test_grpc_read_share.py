"""One caller cannot take the whole room for gRPC publish messages being received: each caller's reads hold
at most its share of it (a quarter of the fraction of ``limits.max_inflight_publish_bytes`` that its share of
the calls in progress is of ``limits.max_concurrent_requests``, a message being received costing about four
times its size; always room for one read), against a served ``serve --workers 2`` with API keys.

``carol`` opens 24 PublishStream streams over six connections and never sends their messages: each stream
waits for its first message holding room for it (``grpc.max_message_bytes``, 4 MiB). Each worker's share of
the cap is 32 MiB, a caller's share of it 8 MiB (a quarter, as a quarter of the calls is its share of them),
of which its reads may hold 2 MiB: carol's reads hold one message's room (4 MiB) per worker and the rest of
her streams wait for her share. ``alice``'s publishes,
sent meanwhile on both workers, are read at once and stored; without the share, carol's streams held every
byte of room and alice's calls waited ``limits.body_timeout`` (3 s here) and were answered UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.auth_support import AuthFiles
from tests.support.workers_support import WorkerGateway, keyed_workers

MIB = 1024 * 1024
#: a connection per channel (channels of one process otherwise share one), so the kernel spreads them
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    with keyed_workers(
        tmp_path_factory.mktemp("read-share"),
        2,
        TUBEMQ_GATEWAY_EMBEDDED__TOPICS="demo:2,other_a:2",
        TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES=str(64 * MIB),
        TUBEMQ_GATEWAY_LIMITS__BODY_TIMEOUT="3",
    ) as served:
        yield served


async def test_a_caller_holding_streams_open_unread_leaves_room_for_the_others(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    address = f"127.0.0.1:{gateway.grpc_port}"
    silent = asyncio.Event()
    channels = [grpc.aio.insecure_channel(address, options=OWN_CONNECTION) for _ in range(6)]

    async def nothing() -> AsyncIterator[pb.PublishStreamRequest]:
        await silent.wait()
        return
        yield  # an async generator that sends no message

    try:
        streams = [
            gateway_pb2_grpc.GatewayServiceStub(channels[i % len(channels)]).PublishStream(
                nothing(), metadata=files.metadata("carol"), timeout=30
            )
            for i in range(24)
        ]
        await asyncio.sleep(1.0)  # the streams are open and waiting for their messages (no assertion on time)

        async def publish(i: int) -> tuple[str, float]:
            stub = gateway_pb2_grpc.GatewayServiceStub(channels[i % len(channels)])
            request = pb.PublishRequest(topic="demo", messages=[pb.Message(value=b"alice %d" % i)])
            started = asyncio.get_running_loop().time()
            try:
                answer = await stub.Publish(request, metadata=files.metadata("alice"), timeout=20)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name, asyncio.get_running_loop().time() - started
            assert answer.failed == 0
            return "OK", asyncio.get_running_loop().time() - started

        results = await asyncio.gather(*(publish(i) for i in range(12)))
        print(results)
        assert [code for code, _ in results] == ["OK"] * 12
        silent.set()
        for stream in streams:
            stream.cancel()
    finally:
        for channel in channels:
            await channel.close()
