"""gRPC Publish, PublishStream and GetTopic with a real client over loopback against the embedded cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gateway.embedded.cluster import EmbeddedCluster
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.publish_stream import publish_stream
from gateway.grpc.publish_wire import PublishBatch, decode_publish
from gateway.service.publish import PreparedMessage, PublishOutcome
from tests.support.grpc_support import (
    TOPICS,
    Gateway,
    describe,
    detail_of,
    gateway_settings,
    message,
    running_gateway,
    trailer,
)
from tests.support.tubemq_readback import StoredMessage, read_topic

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.grpc._publish_wire", "gateway.tubemq.wire._slots")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=2, data_dir=tmp_path / "data") as c:
        yield c


@pytest.fixture
async def gw(cluster: EmbeddedCluster) -> AsyncIterator[Gateway]:
    # Timeouts far above any send on a busy machine: a send retried after a timeout may be stored twice,
    # which the read-back checks would see; these tests check ordering and acks, not timeouts.
    producer = {"rpc_timeout": 30.0, "send_timeout": 60.0}
    settings = gateway_settings(cluster, limits={"max_batch_messages": 200}, producer=producer)
    async with running_gateway(cluster, settings, stream_window=64) as gateway:
        yield gateway


async def stored(cluster: EmbeddedCluster, gw: Gateway, topic: str, group: str) -> list[StoredMessage]:
    assert gw.runtime.pool is not None
    spec = next(t for t in TOPICS if t.name == topic)
    brokers = {b.broker_id: b.address for b in cluster.brokers if b.is_serving}
    return await read_topic(gw.runtime.pool, brokers, topic, spec.partition_ids(), group)


async def test_publish_stores_every_message_with_its_fields(gw: Gateway, cluster: EmbeddedCluster) -> None:
    messages = [
        message(f"m{i}", attributes={"i": str(i)}, stream_id=f"s{i % 2}", msg_time="202611221200")
        for i in range(50)
    ]
    call = gw.stub.Publish(pb.PublishRequest(topic="demo", messages=messages))
    response = await call
    assert response.topic == "demo" and response.failed == 0
    assert [r.index for r in response.results] == list(range(50))
    assert all(r.WhichOneof("outcome") == "stored" for r in response.results)
    rows = {row.attributes["i"]: row for row in await stored(cluster, gw, "demo", "readback-g1")}
    assert len(rows) == 50
    for result in response.results:
        row = rows[str(result.index)]
        assert row.body == f"m{result.index}".encode()
        assert (row.stream_id, row.msg_time) == (f"s{result.index % 2}", "202611221200")
        assert (row.broker_id, row.partition_id) == (result.stored.broker_id, result.stored.partition_id)
        assert row.message_id == result.stored.message_id
        assert result.stored.partition_key == f"{row.broker_id}:demo:{row.partition_id}"
    # the request id comes back in the trailers, generated when the client sends none
    assert len(dict(await call.trailing_metadata())["x-request-id"]) == 32


async def test_one_key_keeps_batch_order(gw: Gateway, cluster: EmbeddedCluster) -> None:
    messages = [message(str(i), key="customer-7") for i in range(40)]
    response = await gw.stub.Publish(pb.PublishRequest(topic="small", messages=messages))
    assert len({r.stored.partition_key for r in response.results}) == 1
    rows = await stored(cluster, gw, "small", "readback-g2")
    assert [row.body for row in rows] == [str(i).encode() for i in range(40)]


async def test_get_topic_and_explicit_partition(gw: Gateway, cluster: EmbeddedCluster) -> None:
    topic = await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"))
    assert topic.topic == "demo" and topic.max_message_size > 0
    assert [p.index for p in topic.partitions] == list(range(8))
    assert {p.broker_id for p in topic.partitions} == {b.broker_id for b in cluster.brokers}
    assert {p.broker for p in topic.partitions} == {str(b.address) for b in cluster.brokers}
    target = topic.partitions[5]
    assert target.partition_key == f"{target.broker_id}:demo:{target.partition_id}"
    response = await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message("x", partition=5)]))
    assert response.results[0].stored.partition_key == target.partition_key
    assert list(topic.shielded_brokers) == []


@pytest.mark.parametrize(
    ("request_", "field", "index"),
    [
        (pb.PublishRequest(topic="demo"), "messages", None),
        (pb.PublishRequest(topic="9bad", messages=[message("a")]), "topic", None),
        (pb.PublishRequest(topic="", messages=[message("a")]), "topic", None),
        (pb.PublishRequest(topic="demo", messages=[message("a"), message("")]), "messages[1].value", 1),
        (pb.PublishRequest(topic="demo", messages=[message("a", key="")]), "messages[0].key", 0),
        (pb.PublishRequest(topic="demo", messages=[message("a", partition=-1)]), "messages[0].partition", 0),
        (
            pb.PublishRequest(topic="demo", messages=[message("a", attributes={"k": "x,y"})]),
            "messages[0].attributes.k",
            0,
        ),
        (
            pb.PublishRequest(topic="demo", messages=[message("a", msg_time="2026-11-22")]),
            "messages[0].msgTime",
            0,
        ),
        (
            pb.PublishRequest(topic="demo", messages=[message("a", stream_id="a=b")]),
            "messages[0].streamId",
            0,
        ),
        (pb.PublishRequest(topic="demo", messages=[message("a")] * 201), "messages", None),
    ],
)
async def test_invalid_requests_name_the_field(
    gw: Gateway, request_: pb.PublishRequest, field: str, index: int | None
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(request_, metadata=(("x-request-id", "req-42"),))
    error = caught.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    detail = detail_of(error)
    assert (detail.code, detail.field) == ("invalid_argument", field)
    assert detail.index == index
    assert detail.violations == [(field, error.details().removeprefix(f"{field}: "))]
    assert error.details().startswith(f"{field}: ")
    assert detail.grpc_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert trailer(error, "x-request-id") == "req-42"


def _blocking_call(address: str, request: pb.PublishRequest) -> grpc.RpcError:
    """Publish with grpcio's plain blocking client, in a thread of its own; return the error it raised."""
    with grpc.insecure_channel(address) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        try:
            stub.Publish(request, timeout=10)
        except grpc.RpcError as error:
            return error
    raise AssertionError("the publish succeeded")


async def test_a_blocking_client_reads_the_standard_error_details(gw: Gateway) -> None:
    # What any grpcio client does: rpc_status.from_call, then unpack google.rpc detail types; no gateway code.
    bad = pb.PublishRequest(topic="demo", messages=[message("a"), message("b", stream_id="a=b")])
    error = await asyncio.to_thread(_blocking_call, gw.server.address, bad)
    status = rpc_status.from_call(error)
    assert status is not None and status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    info, request = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    assert status.details[0].Unpack(info) and status.details[1].Unpack(request)
    assert (info.reason, info.domain) == ("INVALID_ARGUMENT", "tubemq-gateway")
    assert (info.metadata["field"], info.metadata["index"]) == ("messages[1].streamId", "1")
    (violation,) = request.field_violations
    assert violation.field == "messages[1].streamId"
    assert status.message == error.details() == f"messages[1].streamId: {violation.description}"


async def test_partition_out_of_range_and_unknown_topic(gw: Gateway) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message("a", partition=99)]))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    for call in (
        gw.stub.Publish(pb.PublishRequest(topic="nosuchtopic", messages=[message("a")])),
        gw.stub.GetTopic(pb.GetTopicRequest(topic="nosuchtopic")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await call
        assert missing.value.code() is grpc.StatusCode.NOT_FOUND, missing.value.details()
        assert detail_of(missing.value).code == "not_found"
        assert detail_of(missing.value).resource == ("topic", "nosuchtopic")


async def test_oversize_message_is_resource_exhausted_with_the_limit(gw: Gateway) -> None:
    limit = (await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"))).max_message_size
    batch = [message("ok"), message(b"x" * (limit + 1))]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=batch))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    detail = detail_of(caught.value)
    assert (detail.code, detail.limit, detail.index, detail.field) == (
        "payload_too_large",
        limit,
        1,
        "messages[1].value",
    )


async def test_request_above_the_grpc_size_limit_is_resource_exhausted(cluster: EmbeddedCluster) -> None:
    async with running_gateway(cluster, max_message_bytes=4096) as gw:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message(b"y" * 8192)]))
        assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert rpc_status.from_call(caught.value) is None  # grpc refused it itself: no details (README)


async def test_no_broker_is_unavailable_with_retry_advice(cluster: EmbeddedCluster) -> None:
    settings = gateway_settings(cluster, producer={"send_timeout": 2.0, "rpc_timeout": 0.5})
    async with running_gateway(cluster, settings) as gw:
        await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message("a")]))
        await cluster.stop_broker(1)
        await cluster.stop_broker(2)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message("b"), message("c")]))
        error = caught.value
        assert error.code() is grpc.StatusCode.UNAVAILABLE, error.details()
        detail = detail_of(error)
        assert detail.code == "unavailable" and detail.retry_after_seconds >= 1
        assert int(trailer(error, "retry-after")) >= 1
        # the stream reports the same per message, and goes on
        acks = await _acks(gw.stub.PublishStream(_requests("demo", [message("d"), message("e")], 2)))
        assert [a.sequence for a in acks] == [0, 1]
        assert all(describe(a.error).code == "unavailable" for a in acks)
        assert all(describe(a.error).retry_after_seconds >= 1 for a in acks)
        assert all(a.error.code == grpc.StatusCode.UNAVAILABLE.value[0] for a in acks)


async def _requests(
    topic: str, messages: list[pb.Message], per_request: int = 1
) -> AsyncIterator[pb.PublishStreamRequest]:
    for start in range(0, len(messages), per_request):
        batch = messages[start : start + per_request]
        yield pb.PublishStreamRequest(topic=topic if start == 0 else "", messages=batch)


async def _acks(call: AsyncIterator[pb.PublishStreamResponse]) -> list[pb.PublishAck]:
    return [ack async for response in call for ack in response.acks]


async def test_publish_stream_of_10000_acks_in_order(gw: Gateway, cluster: EmbeddedCluster) -> None:
    count = 10_000
    messages = [message(f"v{i}") for i in range(count)]
    call = gw.stub.PublishStream(_requests("demo", messages, per_request=100))
    responses = [response async for response in call]
    acks = [ack for response in responses for ack in response.acks]
    assert [a.sequence for a in acks] == list(range(count))
    assert all(a.WhichOneof("outcome") == "stored" for a in acks)
    assert len(responses) < count // 100 + 1  # acks of several batches share a response when ready together
    assert (await call.code()) is grpc.StatusCode.OK
    assert "x-request-id" in dict(await call.initial_metadata())
    rows = await stored(cluster, gw, "demo", "readback-g3")
    assert sorted(row.body for row in rows) == sorted(m.value for m in messages)
    assert {(a.stored.broker_id, a.stored.partition_id) for a in acks} == {
        (r.broker_id, r.partition_id) for r in rows
    }


async def test_publish_stream_keeps_key_and_partition_order_across_requests(
    gw: Gateway, cluster: EmbeddedCluster
) -> None:
    # one message per request, keyed ones by key and the others pinned to partition 0 or 1
    messages = [
        message(f"{i}", key=f"k{i % 3}") if i % 2 else message(f"{i}", partition=(i // 2) % 2)
        for i in range(300)
    ]
    acks = await _acks(gw.stub.PublishStream(_requests("small", messages)))
    assert [a.sequence for a in acks] == list(range(300))
    assert all(a.WhichOneof("outcome") == "stored" for a in acks)
    where = {int(m.value): a.stored.partition_key for m, a in zip(messages, acks, strict=True)}
    rows = await stored(cluster, gw, "small", "readback-g4")
    assert len(rows) == 300
    chains: dict[str, list[int]] = {}
    for row in rows:
        i = int(row.body)
        assert where[i] == f"{row.broker_id}:small:{row.partition_id}"
        chains.setdefault(f"k{i % 3}" if i % 2 else f"p{(i // 2) % 2}", []).append(i)
    assert len(chains) == 5
    assert all(order == sorted(order) for order in chains.values())


async def test_publish_stream_errors_are_per_request(gw: Gateway) -> None:
    limit = (await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"))).max_message_size

    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        yield pb.PublishStreamRequest(messages=[message("no topic yet")])
        yield pb.PublishStreamRequest(topic="demo", messages=[message("ok"), message("fine")])
        yield pb.PublishStreamRequest()  # no messages: nothing to acknowledge
        yield pb.PublishStreamRequest(messages=[message("spoilt by the next"), message("")])
        yield pb.PublishStreamRequest(messages=[message(b"z" * (limit + 1))])
        yield pb.PublishStreamRequest(topic="nosuchtopic", messages=[message("x")])
        yield pb.PublishStreamRequest(topic="small", messages=[message("ok", attributes={"a": "1"})])

    acks = await _acks(gw.stub.PublishStream(requests()))
    assert [a.sequence for a in acks] == list(range(8))
    outcomes = [
        (
            a.WhichOneof("outcome"),
            *((describe(a.error).code, describe(a.error).field) if a.error.code else ()),
        )
        for a in acks
    ]
    assert outcomes == [
        ("error", "invalid_argument", "topic"),
        ("stored",),
        ("stored",),
        ("error", "invalid_argument", "messages[1].value"),
        ("error", "invalid_argument", "messages[1].value"),
        ("error", "payload_too_large", "messages[0].value"),
        ("error", "not_found", "topic"),
        ("stored",),
    ]
    assert describe(acks[3].error).index == describe(acks[4].error).index == 1
    assert describe(acks[5].error).limit == limit
    assert acks[7].stored.partition_key.split(":")[1] == "small"


async def test_publish_stream_reads_at_most_window_ahead_of_the_acks(gw: Gateway) -> None:
    # Drive the stream function directly to see how far the reader runs ahead of a slow ack reader.
    assert gw.runtime.publish is not None
    window, per_request, pulled, count = 16, 4, 0, 200

    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        nonlocal pulled
        for i in range(0, count, per_request):
            pulled += per_request
            yield pb.PublishStreamRequest(
                topic="demo", messages=[message(f"w{i + j}") for j in range(per_request)]
            )

    acked = 0
    async for answer in publish_stream(gw.runtime.publish, _read(requests()), window, gw.runtime.idempotent):
        for ack in pb.PublishStreamResponse.FromString(answer).acks:
            assert ack.sequence == acked and ack.WhichOneof("outcome") == "stored"
            acked += 1
        await asyncio.sleep(0.001)
        # unacknowledged: at most the window, plus the request taken off the stream and waiting for slots
        assert pulled - acked <= window + per_request
    assert acked == count


async def test_a_request_bigger_than_the_window_still_goes_through(gw: Gateway) -> None:
    assert gw.runtime.publish is not None
    requests = _requests("demo", [message(f"b{i}") for i in range(50)], per_request=50)
    answers = [r async for r in publish_stream(gw.runtime.publish, _read(requests), 8, gw.runtime.idempotent)]
    responses = [pb.PublishStreamResponse.FromString(answer) for answer in answers]
    assert [a.sequence for r in responses for a in r.acks] == list(range(50))


async def _read(requests: AsyncIterator[pb.PublishStreamRequest]) -> AsyncIterator[PublishBatch]:
    """The stream's requests as the server reads them (publish_stream takes them read, answers bytes)."""
    async for request in requests:
        yield decode_publish(request.SerializeToString())


async def test_publish_stream_cancelled_by_the_client(gw: Gateway) -> None:
    gate = asyncio.Event()

    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        yield pb.PublishStreamRequest(topic="demo", messages=[message("first")])
        await gate.wait()
        yield pb.PublishStreamRequest(messages=[message("never")])

    call = gw.stub.PublishStream(requests())
    first = await call.read()
    assert first.acks[0].sequence == 0 and first.acks[0].WhichOneof("outcome") == "stored"
    call.cancel()
    assert (await call.code()) is grpc.StatusCode.CANCELLED
    gate.set()
    # the server is still fine
    response = await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=[message("after")]))
    assert response.failed == 0


async def test_publish_and_publish_stream_go_through_the_prepared_path(
    gw: Gateway, cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publish and PublishStream publish as REST publishes its usual batch: the messages prepared by the
    publish rules, then PublishService.publish_prepared (messages sharing a key still stored in batch order);
    a batch a rule refuses is answered in publish's own order (an unknown topic before a bad message)."""
    service = gw.runtime.publisher()
    prepared_batches: list[int] = []
    publish_prepared = service.publish_prepared

    async def counted(topic: str, prepared: list[PreparedMessage]) -> list[PublishOutcome]:
        prepared_batches.append(len(prepared))
        return await publish_prepared(topic, prepared)

    monkeypatch.setattr(service, "publish_prepared", counted)
    keyed = [message(f"k{i}", key="same") for i in range(20)]
    answer = await gw.stub.Publish(pb.PublishRequest(topic="demo", messages=keyed))
    assert answer.failed == 0 and len({r.stored.partition_key for r in answer.results}) == 1

    async def requests() -> AsyncIterator[pb.PublishStreamRequest]:
        yield pb.PublishStreamRequest(topic="demo", messages=[message("s0"), message("s1")])

    acks = [ack async for response in gw.stub.PublishStream(requests()) for ack in response.acks]
    assert [ack.HasField("error") for ack in acks] == [False, False]
    assert prepared_batches == [20, 2]
    values = [row.body for row in await stored(cluster, gw, "demo", "prepared-path") if row.body[:1] == b"k"]
    assert values == [b"k%d" % i for i in range(20)]

    bad = pb.PublishRequest(topic="nowhere", messages=[message("v", attributes={"a": ""})])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(bad)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND and prepared_batches == [20, 2]
