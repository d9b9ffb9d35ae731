"""gRPC consumer RPCs (CreateConsumer, Poll, Commit, DeleteConsumer, Subscribe) with a real client over
loopback against the embedded cluster: delivery, commits and rollback, every error path, and Subscribe
receiving messages as they are published and resuming from a token after the stream is cut."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.gateway_support import FAST_CONSUMERS
from tests.support.grpc_support import Gateway, detail_of, gateway_settings, message, running_gateway

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.grpc._consumed_wire", "gateway.tubemq.consumer._batch")

TOPICS = [TopicSpec("demo", 4), TopicSpec("solo", 1)]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data", balance_period=0.1) as c:
        yield c


def _settings(cluster: EmbeddedCluster, **consumers: Any) -> Any:
    return gateway_settings(cluster, http_host="127.0.0.1", consumers={**FAST_CONSUMERS, **consumers})


@pytest.fixture
async def gw(cluster: EmbeddedCluster) -> AsyncIterator[Gateway]:
    async with running_gateway(cluster, _settings(cluster, lease=30.0), subscribe_step=0.1) as gateway:
        yield gateway


async def publish(gw: Gateway, topic: str, values: list[str], **fields: Any) -> list[pb.PublishResult]:
    messages = [message(v, **fields) for v in values]
    response = await gw.stub.Publish(pb.PublishRequest(topic=topic, messages=messages))
    assert response.failed == 0
    return list(response.results)


async def create(gw: Gateway, group: str, **fields: Any) -> str:
    fields.setdefault("topics", ["demo"])
    created = await gw.stub.CreateConsumer(pb.CreateConsumerRequest(group=group, **fields))
    assert created.group == group and created.instance_id and created.client_id
    return created.instance_id


async def poll(gw: Gateway, group: str, instance: str, **fields: Any) -> list[pb.ConsumedMessage]:
    fields.setdefault("timeout_ms", 50)
    answer = await gw.stub.Poll(pb.PollRequest(group=group, instance_id=instance, **fields))
    return list(answer.messages)


async def poll_until(gw: Gateway, group: str, instance: str, count: int) -> list[pb.ConsumedMessage]:
    got: list[pb.ConsumedMessage] = []
    async with asyncio.timeout(10):
        while len(got) < count:
            got.extend(await poll(gw, group, instance, timeout_ms=500))
    return got


async def failure(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def test_poll_commit_delete(gw: Gateway) -> None:
    instance = await create(gw, "g-basic", start_position=pb.START_POSITION_EARLIEST)
    sent = await publish(gw, "demo", [f"m{i}" for i in range(20)], attributes={"k": "v"}, stream_id="s1")
    got = await poll_until(gw, "g-basic", instance, 20)
    assert sorted(m.value for m in got) == sorted(f"m{i}".encode() for i in range(20))
    first = got[0]
    assert first.topic == "demo" and first.attributes == {"k": "v"} and first.stream_id == "s1"
    assert first.partition_key == f"{first.broker_id}:demo:{first.partition_id}"
    assert {m.message_id for m in got} == {r.stored.message_id for r in sent}
    assert [int(m.token) for m in got] == sorted(int(m.token) for m in got)
    committed = await gw.stub.Commit(
        pb.CommitRequest(group="g-basic", instance_id=instance, tokens=[m.token for m in got[:5]])
    )
    assert (committed.committed, committed.rolled_back, list(committed.stale)) == (5, 0, [])
    assert committed.pending == 15
    rest = await gw.stub.Commit(pb.CommitRequest(group="g-basic", instance_id=instance, all_delivered=True))
    assert rest.committed == 15 and rest.pending == 0
    assert committed.awaiting_batch <= 5 and rest.awaiting_batch == 0  # every batch complete: at the broker
    assert await poll(gw, "g-basic", instance) == []
    await gw.stub.DeleteConsumer(pb.DeleteConsumerRequest(group="g-basic", instance_id=instance))
    gone = await failure(gw.stub.Poll(pb.PollRequest(group="g-basic", instance_id=instance)))
    assert gone.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert detail_of(gone).code == "gone" and "create a new instance" in gone.details()
    assert detail_of(gone).resource == ("consumer instance", instance)
    again = await failure(
        gw.stub.DeleteConsumer(pb.DeleteConsumerRequest(group="g-basic", instance_id=instance))
    )
    assert again.code() is grpc.StatusCode.FAILED_PRECONDITION


async def test_rollback_redelivers_and_start_offsets(gw: Gateway) -> None:
    results = await publish(gw, "solo", [f"o{i}" for i in range(6)], msg_time="202401311530")
    key, offset = results[2].stored.partition_key, results[2].stored.offset
    instance = await create(
        gw, "g-offsets", topics=["solo"], start_position=pb.START_POSITION_OFFSETS, offsets={key: offset}
    )
    got = await poll_until(gw, "g-offsets", instance, 4)
    assert [m.value for m in got] == [f"o{i}".encode() for i in range(2, 6)]
    assert got[0].offset == offset and got[0].msg_time == "202401311530"
    rolled = await gw.stub.Commit(
        pb.CommitRequest(group="g-offsets", instance_id=instance, tokens=[got[0].token], rollback=True)
    )
    assert rolled.rolled_back == 4 and rolled.pending == 0
    again = await poll_until(gw, "g-offsets", instance, 4)
    assert [m.value for m in again] == [m.value for m in got]
    assert int(again[0].token) > int(got[-1].token)


async def test_filters_deliver_only_the_chosen_stream_ids(gw: Gateway) -> None:
    instance = await create(
        gw,
        "g-filter",
        filters={"demo": pb.StreamIds(stream_ids=["beta"])},
        start_position=pb.START_POSITION_EARLIEST,
        auto_commit=True,
    )
    await publish(gw, "demo", [f"a{i}" for i in range(5)], stream_id="alpha")
    await publish(gw, "demo", [f"b{i}" for i in range(5)], stream_id="beta")
    got = await poll_until(gw, "g-filter", instance, 5)
    got += await poll(gw, "g-filter", instance, timeout_ms=300)
    assert sorted(m.value for m in got) == [f"b{i}".encode() for i in range(5)]


CREATE_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("g-err", {"topics": []}, "topics"),
    ("g-err", {"topics": ["solo"], "filters": {"demo": pb.StreamIds(stream_ids=["x"])}}, "filters.demo"),
    ("g-err", {"topics": ["solo"], "start_position": 7}, "startPosition"),
    ("g-err", {"topics": ["solo"], "start_position": pb.START_POSITION_OFFSETS}, "offsets"),
    ("g-err", {"topics": ["solo"], "offsets": {"1:solo:0": 0}}, "offsets"),
    ("g-err", {"topics": ["solo"], "max_bytes": 0}, "maxBytes"),
    ("g,err", {"topics": ["solo"]}, "group"),
]


@pytest.mark.parametrize(("group", "fields", "field"), CREATE_ERRORS)
async def test_create_errors_name_the_field(
    gw: Gateway, group: str, fields: dict[str, Any], field: str
) -> None:
    error = await failure(gw.stub.CreateConsumer(pb.CreateConsumerRequest(group=group, **fields)))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert detail_of(error).field == field
    assert error.details().startswith(f"{field}: ")


async def test_unknown_topic_is_not_found(gw: Gateway) -> None:
    error = await failure(
        gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="g-nf", topics=["nosuchtopic"]))
    )
    assert error.code() is grpc.StatusCode.NOT_FOUND
    assert detail_of(error).field == "topics"


async def test_instance_errors(gw: Gateway) -> None:
    instance = await create(gw, "g-inst", topics=["solo"])
    malformed = await failure(gw.stub.Poll(pb.PollRequest(group="g-inst", instance_id=instance[:-3])))
    assert malformed.code() is grpc.StatusCode.NOT_FOUND and detail_of(malformed).field == "instanceId"
    other = await failure(gw.stub.Poll(pb.PollRequest(group="g-other", instance_id=instance)))
    assert other.code() is grpc.StatusCode.NOT_FOUND
    for fields, field in (
        ({"timeout_ms": 10_000_000}, "timeoutMs"),
        ({"max_messages": 0}, "maxMessages"),
        ({"max_bytes": 0}, "maxBytes"),
    ):
        bad = await failure(gw.stub.Poll(pb.PollRequest(group="g-inst", instance_id=instance, **fields)))
        assert bad.code() is grpc.StatusCode.INVALID_ARGUMENT and detail_of(bad).field == field
    for commit, field in (
        (pb.CommitRequest(group="g-inst", instance_id=instance), "tokens"),
        (pb.CommitRequest(group="g-inst", instance_id=instance, tokens=["1"], all_delivered=True), "tokens"),
        (pb.CommitRequest(group="g-inst", instance_id=instance, tokens=["nope"]), "tokens[0]"),
    ):
        bad = await failure(gw.stub.Commit(commit))
        assert bad.code() is grpc.StatusCode.INVALID_ARGUMENT and detail_of(bad).field == field
    stale = await gw.stub.Commit(pb.CommitRequest(group="g-inst", instance_id=instance, tokens=["99"]))
    assert list(stale.stale) == ["99"] and stale.committed == 0


async def test_an_idle_instance_expires(cluster: EmbeddedCluster) -> None:
    async with running_gateway(cluster, _settings(cluster, lease=0.3)) as gw:
        instance = await create(gw, "g-lease", topics=["solo"])
        await asyncio.sleep(0.6)  # the 0.3 s lease, plus the reaper's period (a quarter of it)
        expired = await failure(gw.stub.Poll(pb.PollRequest(group="g-lease", instance_id=instance)))
        assert expired.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "expired" in detail_of(expired).message


class Subscription:
    """Reads a Subscribe stream message by message."""

    def __init__(self, gw: Gateway, group: str, instance: str, resume_token: str = "") -> None:
        request = pb.SubscribeRequest(group=group, instance_id=instance, resume_token=resume_token)
        self.call = gw.stub.Subscribe(request)
        self._buffer: list[pb.ConsumedMessage] = []

    async def take(self, count: int) -> list[pb.ConsumedMessage]:
        async with asyncio.timeout(10):
            while len(self._buffer) < count:
                response = await self.call.read()
                assert response is not grpc.aio.EOF
                self._buffer.extend(response.messages)
        taken, self._buffer = self._buffer[:count], self._buffer[count:]
        return taken


async def test_subscribe_delivers_as_published_and_resumes_from_a_token(gw: Gateway) -> None:
    instance = await create(gw, "g-sub")
    await poll(gw, "g-sub", instance)  # joined: latest starts at the current end
    received: list[pb.ConsumedMessage] = []

    async def take_and_commit(stream: Subscription, count: int) -> None:
        # one at a time, committing each: a partition is fetched again once its batch is committed
        for _ in range(count):
            (m,) = await stream.take(1)
            received.append(m)
            await gw.stub.Commit(pb.CommitRequest(group="g-sub", instance_id=instance, tokens=[m.token]))

    first = Subscription(gw, "g-sub", instance)
    await publish(gw, "demo", [f"s{i}" for i in range(30)])
    await take_and_commit(first, 20)
    resume_after = received[-1].token
    first.call.cancel()  # the stream is cut; what it delivered beyond the token stays pending
    assert (await first.call.code()) is grpc.StatusCode.CANCELLED
    await publish(gw, "demo", [f"s{i}" for i in range(30, 40)])
    second = Subscription(gw, "g-sub", instance, resume_token=resume_after)
    await take_and_commit(second, 20)
    assert all(int(m.token) > int(resume_after) for m in received[20:])
    assert sorted(m.value for m in received) == sorted(f"s{i}".encode() for i in range(40))
    by_partition: dict[str, list[int]] = {}
    for m in received:
        by_partition.setdefault(m.partition_key, []).append(int(m.value[1:]))
    assert len(by_partition) == 4 and all(v == sorted(v) for v in by_partition.values())
    # a newer Subscribe takes over: the older stream ends with ABORTED
    third = Subscription(gw, "g-sub", instance, resume_token=received[-1].token)
    await publish(gw, "demo", ["late"])
    assert [m.value for m in await third.take(1)] == [b"late"]
    # (the older stream may still carry what it fetched before it noticed; it then ends)
    with pytest.raises(grpc.aio.AioRpcError) as aborted:
        async with asyncio.timeout(5):
            while True:
                assert (await second.call.read()) is not grpc.aio.EOF
    assert aborted.value.code() is grpc.StatusCode.ABORTED and detail_of(aborted.value).code == "aborted"
    third.call.cancel()


async def test_subscribe_without_a_token_sends_every_pending_message_first(gw: Gateway) -> None:
    instance = await create(gw, "g-pending", topics=["solo"], start_position=pb.START_POSITION_EARLIEST)
    await publish(gw, "solo", ["p0", "p1", "p2"])
    delivered = await poll_until(gw, "g-pending", instance, 3)
    await gw.stub.Commit(
        pb.CommitRequest(group="g-pending", instance_id=instance, tokens=[delivered[0].token])
    )
    stream = Subscription(gw, "g-pending", instance)
    assert [m.value for m in await stream.take(2)] == [b"p1", b"p2"]
    stream.call.cancel()


async def test_subscribe_errors_and_endings(gw: Gateway) -> None:
    instance = await create(gw, "g-end", topics=["solo"], auto_commit=True)
    await poll(gw, "g-end", instance)
    for resume_token, field in (("x1", "resumeToken"), ("", "maxMessages")):
        request = pb.SubscribeRequest(group="g-end", instance_id=instance, resume_token=resume_token)
        if field == "maxMessages":
            request.max_messages = 0
        bad = await failure(gw.stub.Subscribe(request).read())
        assert bad.code() is grpc.StatusCode.INVALID_ARGUMENT and detail_of(bad).field == field
    stream = Subscription(gw, "g-end", instance)
    await publish(gw, "solo", ["x1", "x2"])
    assert [m.value for m in await stream.take(2)] == [b"x1", b"x2"]

    async def delete() -> None:
        await gw.stub.DeleteConsumer(pb.DeleteConsumerRequest(group="g-end", instance_id=instance))

    deleting = asyncio.create_task(delete())
    gone = await failure(stream.call.read())
    await deleting
    assert gone.code() is grpc.StatusCode.FAILED_PRECONDITION and detail_of(gone).code == "gone"
    # a draining gateway refuses new instances and ends its subscriptions (UNAVAILABLE, retry elsewhere)
    drained = await create(gw, "g-drain", topics=["solo"])
    await poll(gw, "g-drain", drained)
    draining_stream = Subscription(gw, "g-drain", drained)
    gw.runtime.draining = True
    refused = await failure(gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="g-x", topics=["solo"])))
    assert refused.code() is grpc.StatusCode.UNAVAILABLE and "another replica" in refused.details()
    ended_by_drain = await failure(draining_stream.call.read())
    assert ended_by_drain.code() is grpc.StatusCode.UNAVAILABLE
    gw.runtime.draining = False
    # stopping the server ends a subscription with UNAVAILABLE instead of holding the stop
    other = await create(gw, "g-stop", topics=["solo"])
    await poll(gw, "g-stop", other)
    open_stream = Subscription(gw, "g-stop", other)
    await publish(gw, "solo", ["y"])
    await open_stream.take(1)
    stopping = asyncio.create_task(gw.server.stop(5.0))
    ended = await failure(open_stream.call.read())
    assert ended.code() is grpc.StatusCode.UNAVAILABLE and detail_of(ended).retry_after_seconds >= 1
    await asyncio.wait_for(stopping, 3.0)


@pytest.mark.parametrize("prefetch", [True, False])
async def test_subscribe_finds_its_batches_fetched_ahead(cluster: EmbeddedCluster, prefetch: bool) -> None:
    """A Subscribe stream of an auto-commit instance: after its first step, each step's batch was fetched
    ahead while the last one went out (broker fetches a step had to start and wait for: 1, not one a step)."""
    settings = _settings(cluster, prefetch_bytes=2**20 if prefetch else 0)
    async with running_gateway(cluster, settings, subscribe_step=0.5) as gw:
        sent = [f"p{p}-{i}" for p in range(4) for i in range(10)]
        for p in range(4):
            await publish(gw, "demo", [v for v in sent if v.startswith(f"p{p}-")], partition=p)
        instance = await create(gw, "g-ahead", start_position=pb.START_POSITION_EARLIEST, auto_commit=True)
        request = pb.SubscribeRequest(group="g-ahead", instance_id=instance, max_messages=10)
        call = gw.stub.Subscribe(request)
        got: list[pb.ConsumedMessage] = []
        async with asyncio.timeout(10):
            while len(got) < len(sent):
                response = await call.read()
                assert response is not grpc.aio.EOF
                got.extend(response.messages)
        call.cancel()
        assert sorted(m.value for m in got) == sorted(v.encode() for v in sent)
        assert gw.runtime.consumers is not None
        held = gw.runtime.consumers.instance("g-ahead", instance)
        assert (held.poll_fetches == 1) is prefetch
        assert (held.fetches_ahead >= 3) is prefetch
