"""The gRPC server around the servicer: health, reflection, interceptors, auth hook, events, stopping."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.grpc.errors import AuthError
from gateway.grpc.interceptors import GrpcCallFinished
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime
from gateway.service.publish import PublishService, TopicView
from tests.support.files import ROOT
from tests.support.grpc_support import TOPICS, Gateway, detail_of, message, running_gateway, trailer
from tests.support.reflection_client import ReflectionClient

GATEWAY = "tubemq.gateway.v1.GatewayService"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data") as c:
        yield c


@pytest.fixture
async def gw(cluster: EmbeddedCluster) -> AsyncIterator[Gateway]:
    async with running_gateway(cluster, health_interval=0.05) as gateway:
        yield gateway


async def test_health_follows_readiness(gw: Gateway) -> None:
    health = health_pb2_grpc.HealthStub(gw.channel)
    for service in ("", GATEWAY):
        answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert caught.value.details().startswith("service: unknown service 'no.such.Service'")
    assert detail_of(caught.value).resource == ("grpc service", "no.such.Service")
    listed = await health.List(health_pb2.HealthListRequest())
    assert set(listed.statuses) == {"", GATEWAY}

    watch = health.Watch(health_pb2.HealthCheckRequest(service=GATEWAY))
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
    gw.runtime.draining = True
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
    answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
    gw.runtime.draining = False
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
    unknown = health.Watch(health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert (await unknown.read()).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
    unknown.cancel()
    # stopping reports NOT_SERVING and ends the watch instead of holding the stop for its grace
    started = time.monotonic()
    stopping = asyncio.create_task(gw.server.stop(5.0))
    assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert (await watch.read()) is grpc.aio.EOF
    await stopping
    assert time.monotonic() - started < 4.0


REFLECTION = {f"grpc.reflection.{v}.ServerReflection" for v in ("v1", "v1alpha")}


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_lists_and_describes_the_services(gw: Gateway, version: str) -> None:
    client = ReflectionClient(gw.channel, version)
    assert await client.services() == {GATEWAY, "grpc.health.v1.Health", *REFLECTION}
    ours = await client.resolve(GATEWAY)
    assert (ours.name, ours.package) == ("tubemq/gateway/v1/gateway.proto", "tubemq.gateway.v1")
    assert "google/rpc/status.proto" in ours.dependency  # served too: the pool below has it
    service = client.pool.FindServiceByName(GATEWAY)
    methods = {m.name for m in service.methods}
    assert methods == set(pb.DESCRIPTOR.services_by_name["GatewayService"].methods_by_name)
    assert {"Publish", "PublishStream", "GetTopic"} <= methods
    for method in service.methods:
        assert method.input_type.full_name == f"tubemq.gateway.v1.{method.name}Request"
        assert method.output_type.full_name == f"tubemq.gateway.v1.{method.name}Response"
    status = client.pool.FindMessageTypeByName("tubemq.gateway.v1.PublishResult").fields_by_name["error"]
    assert status.message_type.full_name == "google.rpc.Status"


async def test_reflection_v1_describes_itself(gw: Gateway) -> None:
    client = ReflectionClient(gw.channel, "v1")
    found = await client.resolve("grpc.reflection.v1.ServerReflection")
    assert (found.name, found.package) == ("grpc/reflection/v1/reflection.proto", "grpc.reflection.v1")
    method = client.pool.FindServiceByName("grpc.reflection.v1.ServerReflection").methods[0]
    assert method.name == "ServerReflectionInfo" and method.client_streaming and method.server_streaming
    assert method.input_type.full_name == "grpc.reflection.v1.ServerReflectionRequest"
    answer = method.output_type.fields_by_name["file_descriptor_response"].message_type
    assert answer.full_name == "grpc.reflection.v1.FileDescriptorResponse"


async def test_a_reflection_client_calls_the_api_from_json(gw: Gateway) -> None:
    # What grpcurl does: no generated code, descriptors from reflection v1, requests in proto3 JSON.
    client = ReflectionClient(gw.channel, "v1")
    topic = await client.call_json(f"{GATEWAY}/GetTopic", '{"topic": "demo"}')
    expected = await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"))
    assert topic["topic"] == "demo" and len(topic["partitions"]) == len(expected.partitions) > 0
    body = '{"topic": "demo", "messages": [{"value": "aGVsbG8=", "key": "k1", "streamId": "s1"}]}'
    published = await client.call_json(f"{GATEWAY}/Publish", body)
    assert published["results"][0]["stored"]["partitionKey"].split(":")[1] == "demo"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await client.call_json(f"{GATEWAY}/Publish", '{"topic": "demo", "messages": [{"value": ""}]}')
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert detail_of(caught.value).field == "messages[0].value"


async def test_request_ids_are_kept_when_sane_and_replaced_otherwise(gw: Gateway) -> None:
    call = gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"), metadata=(("x-request-id", "abc-123"),))
    await call
    assert dict(await call.trailing_metadata())["x-request-id"] == "abc-123"
    for bad in ("has spaces;and{braces}", "x" * 129):
        call = gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"), metadata=(("x-request-id", bad),))
        await call
        replaced = dict(await call.trailing_metadata())["x-request-id"]
        assert replaced != bad and len(replaced) == 32


async def test_every_call_emits_an_event(gw: Gateway) -> None:
    seen: list[GrpcCallFinished] = []
    with gw.runtime.events.subscribe(seen.append, GrpcCallFinished):
        await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"), metadata=(("x-request-id", "ev-1"),))
        with pytest.raises(grpc.aio.AioRpcError):
            await gw.stub.GetTopic(pb.GetTopicRequest(topic="x"), metadata=(("x-request-id", "ev-2"),))
        responses = gw.stub.PublishStream(_one("demo", "s"))
        assert len([r async for r in responses]) == 1
    assert [(e.method, e.code, e.request_id) for e in seen[:2]] == [
        (f"/{GATEWAY}/GetTopic", "OK", "ev-1"),
        (f"/{GATEWAY}/GetTopic", "INVALID_ARGUMENT", "ev-2"),
    ]
    assert (seen[2].method, seen[2].code) == (f"/{GATEWAY}/PublishStream", "OK")
    assert all(e.duration >= 0 for e in seen)


async def _one(topic: str, value: str) -> AsyncIterator[pb.PublishStreamRequest]:
    yield pb.PublishStreamRequest(topic=topic, messages=[message(value)])


async def test_auth_hook_refuses_and_admits(cluster: EmbeddedCluster) -> None:
    async def authorize(method: str, metadata: Mapping[str, str | bytes]) -> None:
        if method.startswith("/grpc.health."):
            return
        token = metadata.get("authorization")
        if token is None:
            raise AuthError("send an authorization header")
        if token != "Bearer good":
            raise AuthError("this token may not publish", denied=True)

    async with running_gateway(cluster, authorize=authorize) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"))
        assert missing.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert detail_of(missing.value).code == "unauthenticated"
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await gw.stub.PublishStream(_one("demo", "x"), metadata=(("authorization", "Bearer bad"),)).read()
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        topic = await gw.stub.GetTopic(
            pb.GetTopicRequest(topic="demo"), metadata=(("authorization", "Bearer good"),)
        )
        assert topic.topic == "demo"
        health = health_pb2_grpc.HealthStub(gw.channel)
        assert (
            await health.Check(health_pb2.HealthCheckRequest())
        ).status == health_pb2.HealthCheckResponse.SERVING


class _BrokenPublishService(PublishService):
    async def topic(self, topic: str) -> TopicView:
        raise RuntimeError("a bug")


async def test_a_bug_is_internal_with_the_request_id(gw: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    real = gw.runtime.publish
    assert real is not None and gw.runtime.producer is not None
    gw.runtime.publish = _BrokenPublishService(gw.runtime.producer)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"), metadata=(("x-request-id", "bug-1"),))
    finally:
        gw.runtime.publish = real
    error = caught.value
    assert error.code() is grpc.StatusCode.INTERNAL
    assert "bug-1" in error.details() and "a bug" not in error.details()
    assert detail_of(error).code == "internal"
    assert trailer(error, "x-request-id") == "bug-1"
    assert any(r.exc_info and "a bug" in str(r.exc_info[1]) for r in caplog.records)


async def test_unstarted_runtime_is_unavailable_and_not_serving(cluster: EmbeddedCluster) -> None:
    runtime = Runtime(Settings(masters=str(cluster.master_address)))
    server = GrpcServer(runtime)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Publish(pb.PublishRequest(topic="demo", messages=[message("a")]))
            assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
            assert detail_of(caught.value).retry_after_seconds == 1
            with pytest.raises(grpc.aio.AioRpcError) as consumer:
                await stub.Poll(pb.PollRequest(group="g", instance_id="i"))
            assert consumer.value.code() is grpc.StatusCode.UNAVAILABLE
            health = health_pb2_grpc.HealthStub(channel)
            answer = await health.Check(health_pb2.HealthCheckRequest())
            assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await server.stop(0)


async def test_graceful_stop_finishes_calls_in_progress_and_refuses_new_ones(gw: Gateway) -> None:
    release = asyncio.Event()

    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        yield pb.PublishStreamRequest(topic="demo", messages=[message("before stop")])
        await release.wait()
        yield pb.PublishStreamRequest(messages=[message("during stop")])

    call = gw.stub.PublishStream(requests())
    assert (await call.read()).acks[0].WhichOneof("outcome") == "stored"
    stopping = asyncio.create_task(gw.server.stop(5.0))
    await asyncio.sleep(0.1)
    async with grpc.aio.insecure_channel(gw.server.address) as fresh:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gateway_pb2_grpc.GatewayServiceStub(fresh).GetTopic(
                pb.GetTopicRequest(topic="demo"), timeout=2
            )
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    started = time.monotonic()
    release.set()
    last = (await call.read()).acks[0]
    assert last.sequence == 1 and last.WhichOneof("outcome") == "stored"
    assert (await call.code()) is grpc.StatusCode.OK
    await stopping
    assert time.monotonic() - started < 4.0  # the stop ended with the call, not with the grace period


async def test_stop_cancels_calls_past_the_grace_period(gw: Gateway) -> None:
    never = asyncio.Event()

    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        yield pb.PublishStreamRequest(topic="demo", messages=[message("only")])
        await never.wait()
        yield pb.PublishStreamRequest()  # pragma: no cover - never sent

    call = gw.stub.PublishStream(requests())
    await call.read()
    started = time.monotonic()
    await gw.server.stop(0.2)
    assert time.monotonic() - started < 3.0
    assert (await call.code()) in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


async def test_a_taken_port_fails_to_start(gw: Gateway) -> None:
    other = GrpcServer(gw.runtime, host="127.0.0.1", port=gw.server.port)
    with pytest.raises(OSError, match="cannot bind"):
        await other.start()
    assert "stopped" in repr(other) and "listening" in repr(gw.server)


# In a fresh process: there no other gRPC object keeps the core (and its threads) running.
_FAILED_START = textwrap.dedent(
    """
    import asyncio, os, socket, time
    from gateway.config import Settings
    from gateway.grpc.server import GrpcServer
    from gateway.runtime import Runtime

    async def main():
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            server = GrpcServer(Runtime(Settings(masters="127.0.0.1:1")), port=taken.getsockname()[1])
            try:
                await server.start()
            except OSError:
                return
            raise SystemExit("started on a taken port")

    asyncio.run(main())
    deadline = time.monotonic() + 20
    while len(os.listdir("/proc/self/task")) > 1:
        if time.monotonic() > deadline:
            names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
            raise SystemExit(f"threads left running: {names}")
        time.sleep(0.05)
    """
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_a_failed_start_leaves_no_grpc_threads_behind() -> None:
    # Left running, gRPC's threads make a later fork() of the process abort the child (a forked Spark
    # gateway JVM launch died this way in the test suite).
    root = ROOT
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", _FAILED_START], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("cap", "warned"), [(1 << 20, True), (4 << 20, False)])
async def test_a_publish_budget_below_the_largest_message_is_warned_of(
    caplog: pytest.LogCaptureFixture, cap: int, warned: bool
) -> None:
    """A publish message is received only once the most it may weigh fits into the in-flight bytes: with a
    cap below that, one at a time, which the operator is told at start."""
    runtime = Runtime(Settings(masters="127.0.0.1:1", limits={"max_inflight_publish_bytes": cap}))
    server = GrpcServer(runtime, max_message_bytes=2 << 20)
    with caplog.at_level(logging.WARNING, logger="gateway.grpc"):
        await server.start()
        await server.stop(0)
    said = [r for r in caplog.records if "received one at a time" in r.getMessage()]
    assert bool(said) == warned, [r.getMessage() for r in caplog.records]


async def test_a_publish_call_leaves_no_request_reader_to_close(gw: Gateway) -> None:
    """A Publish (read after it is admitted) leaves no request reader behind to be closed later: grpc.aio's
    request iterator, left with its one message read, was closed in a task of its own that the garbage
    collector's finalizer hook schedules through call_soon_threadsafe (a task and a wake-up of the loop per
    call). The embedded broker's own executor jobs also come back through call_soon_threadsafe: only the
    tasks scheduled so are counted."""
    loop = asyncio.get_running_loop()
    request = pb.PublishRequest(topic="demo", messages=[message("v", attributes={"a": "1"})])
    for _ in range(5):
        await gw.stub.Publish(request)
    woken: list[object] = []
    threadsafe = loop.call_soon_threadsafe

    def counted(callback: object, *args: object, **kwargs: object) -> asyncio.Handle:
        woken.append(callback)
        return threadsafe(callback, *args, **kwargs)  # type: ignore[arg-type]

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        for _ in range(50):
            answer = await gw.stub.Publish(request)
            assert answer.failed == 0
        gc.collect()
        await asyncio.sleep(0.1)
    finally:
        loop.call_soon_threadsafe = threadsafe  # type: ignore[method-assign]
    closing = [callback for callback in woken if getattr(callback, "__name__", "") == "create_task"]
    assert closing == [], f"{len(closing)} tasks scheduled from another thread for 50 calls"
