"""gRPC calls are refused before their request message is read (issue #22, rows 1 and 7), against a served
``serve --workers 2`` with API keys required, its workers' peak RSS (VmHWM) read from /proc.

* 30 concurrent ``Publish`` calls without credentials, each one 20 MiB value gzip-compressed (about 20 KiB on
  the wire): before, each message was received, decompressed and parsed before the interceptor looked at the
  metadata (the workers' RSS rose by ~465 MB); now they are answered UNAUTHENTICATED from their headers and
  the workers' peak RSS rises by less than 64 MB. A key no rule allows (PERMISSION_DENIED) likewise.
* health ``Watch`` streams need no credentials: they are bounded per worker (``grpc.max_health_watches``),
  the ones above answered RESOURCE_EXHAUSTED at once, so a flood of them cannot grow the workers' memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.auth_support import AuthFiles
from tests.support.workers_support import WorkerGateway, keyed_workers, proc_status, worker_pids

MIB = 1024 * 1024
WATCHES_PER_WORKER = 8
#: a connection per channel (channels of one process otherwise share one), so the kernel spreads them
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


def peak_rss(pid: int) -> int:
    return proc_status(pid, "VmHWM")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    with keyed_workers(
        tmp_path_factory.mktemp("before-auth"),
        2,
        TUBEMQ_GATEWAY_GRPC__MAX_HEALTH_WATCHES=str(WATCHES_PER_WORKER),
        TUBEMQ_GATEWAY_GRPC__HEALTH_INTERVAL="0.2",
    ) as served:
        yield served


async def _publish_all(
    address: str, metadata: tuple[tuple[str, str], ...], calls: int
) -> set[grpc.StatusCode]:
    request = pb.PublishRequest(topic="demo", messages=[pb.Message(value=bytes(20 * MIB))])
    options = [("grpc.max_send_message_length", 64 * MIB), *OWN_CONNECTION]
    codes: set[grpc.StatusCode] = set()
    # several connections, so that the kernel spreads them over both workers
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(6)]
    try:

        async def one(i: int) -> None:
            stub = gateway_pb2_grpc.GatewayServiceStub(channels[i % len(channels)])
            try:
                await stub.Publish(request, metadata=metadata, compression=grpc.Compression.Gzip, timeout=60)
                codes.add(grpc.StatusCode.OK)
            except grpc.aio.AioRpcError as exc:
                codes.add(exc.code())

        await asyncio.gather(*(one(i) for i in range(calls)))
    finally:
        for channel in channels:
            await channel.close()
    return codes


@pytest.mark.parametrize(
    ("who", "code"),
    [(None, grpc.StatusCode.UNAUTHENTICATED), ("nobody", grpc.StatusCode.PERMISSION_DENIED)],
)
async def test_30_compressed_20_mib_publishes_refused_by_their_headers_cost_no_memory(
    served: tuple[WorkerGateway, AuthFiles], who: str | None, code: grpc.StatusCode
) -> None:
    gateway, files = served
    pids = worker_pids(gateway)
    before = sum(peak_rss(pid) for pid in pids)
    metadata = files.metadata(who) if who is not None else ()
    codes = await _publish_all(f"127.0.0.1:{gateway.grpc_port}", metadata, 30)
    rise = sum(peak_rss(pid) for pid in pids) - before
    names = sorted(c.name for c in codes)
    print(f"30 compressed 20 MiB publishes as {who}: {names}, peak RSS +{rise / MIB:.1f} MiB")
    assert codes == {code}
    assert rise < 64 * MIB, f"the workers' peak RSS rose by {rise / MIB:.0f} MiB"


async def test_health_watch_streams_are_bounded_per_worker(served: tuple[WorkerGateway, AuthFiles]) -> None:
    gateway, _ = served
    pids = worker_pids(gateway)
    before = sum(peak_rss(pid) for pid in pids)
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}", options=OWN_CONNECTION) for _ in range(10)
    ]
    calls = []
    try:
        for i in range(200):
            stub = health_pb2_grpc.HealthStub(channels[i % len(channels)])
            calls.append(stub.Watch(health_pb2.HealthCheckRequest(service="")))
        serving = exhausted = 0

        async def first(call: grpc.aio.UnaryStreamCall) -> None:
            nonlocal serving, exhausted
            try:
                answer = await asyncio.wait_for(call.read(), 30)
                assert answer.status == health_pb2.HealthCheckResponse.SERVING
                serving += 1
            except grpc.aio.AioRpcError as exc:
                # refused by the bound; now and then the core resets such a stream (REFUSED_STREAM) instead
                # of passing the status on: refused too
                if exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                    assert "max_health_watches" in (exc.details() or "")
                else:
                    assert exc.code() is grpc.StatusCode.UNAVAILABLE and "RST_STREAM" in (
                        exc.details() or ""
                    ), exc
                exhausted += 1

        await asyncio.gather(*(first(c) for c in calls))
        print(f"200 health Watch streams: {serving} open, {exhausted} RESOURCE_EXHAUSTED")
        # each worker keeps at most its bound open; the rest were answered at once
        assert serving <= 2 * WATCHES_PER_WORKER and serving + exhausted == 200
        assert serving >= WATCHES_PER_WORKER
        rise = sum(peak_rss(pid) for pid in pids) - before
        print(f"peak RSS +{rise / MIB:.1f} MiB")
        assert rise < 32 * MIB, f"the workers' peak RSS rose by {rise / MIB:.0f} MiB"
        # a Check still answers while the Watch streams are held
        check = await health_pb2_grpc.HealthStub(channels[0]).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        assert check.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        for call in calls:
            call.cancel()
        for channel in channels:
            await channel.close()
