"""The gateway delivers exactly whatever a real broker's message ids do (gateway/embedded/msgid.py): they
fall for half of every 73-minute cycle, and they repeat across a turn of it (a message drawn d ns before
the turn gets the id of the one drawn d ns after; the turn itself gives -2**63). Each test runs the
embedded cluster both ways, checks first that the ids really did that, then that poll, SSE, gRPC
Subscribe, range reads and Spark reads deliver every message once, with its own id, in partition order.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.msgid import ID_EPOCH, ID_PERIOD_NS, id_phase
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.runtime import Runtime
from tests.support.consumer_support import Env, environment
from tests.support.gateway_support import SseReader, gateway
from tests.support.grpc_support import gateway_settings, message, running_gateway
from tests.support.spark_support import ClusterThread, read_tubemq, run_available_now, spark_session
from tests.support.waiting import eventually

MODES = ["falling", "turn"]
HALF = ID_PERIOD_NS // 2


def id_clock(mode: str, turn_after: int) -> Callable[[], int]:
    """``falling``: the monotonic clock moved 1 s into the falling half of the id cycle (36 minutes of
    falling ids ahead); ``turn``: a clock that moves 1 ns per id drawn, reaching the top turn at the
    ``turn_after``-th id (every store of every broker draws from it)."""
    if mode == "falling":
        shift = HALF + 10**9 - id_phase(time.monotonic_ns())
        return lambda: time.monotonic_ns() + shift
    ticks = itertools.count(ID_EPOCH + HALF - turn_after)
    return lambda: next(ticks)


def check_ids(mode: str, stored: list[tuple[str, int, int]]) -> None:
    """``stored``: (partition key, offset, message id) of every stored message; asserts the ids of each
    store, in offset order, did what ``mode`` says."""
    by_store: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for key, offset, message_id in stored:
        broker, _, pid = key.split(":")
        by_store.setdefault((broker, int(pid) // 10000), []).append((offset, message_id))
    for entries in by_store.values():
        ids = [mid for _, mid in sorted(entries)]
        if mode == "falling":
            assert len(ids) > 1 and ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    if mode == "turn":
        ids = [mid for _, _, mid in stored]
        assert -(2**63) in ids and len(set(ids)) < len(ids) - 1


def in_partition_order(values: list[str]) -> bool:
    numbers = [int(v[1:]) for v in values]
    return numbers == sorted(numbers)


# --- REST poll and SSE --------------------------------------------------------------------------------


@pytest.fixture(params=MODES)
async def mode_env(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Env]]:
    async with environment(id_clock=id_clock(request.param, 30)) as env:
        yield request.param, env


async def test_rest_poll_and_sse_deliver_every_message_once(mode_env: tuple[str, Env]) -> None:
    mode, env = mode_env
    sent = [f"m{i}" for i in range(60)]
    async with gateway(env, lease=10.0) as gw, httpx.AsyncClient(base_url=gw.url, timeout=10.0) as http:
        answer = await http.post("/v1/topics/demo/messages", json={"messages": [{"value": v} for v in sent]})
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        published = {sent[r["index"]]: (r["partitionKey"], r["offset"], int(r["messageId"])) for r in results}
        check_ids(mode, list(published.values()))

        def check(got: list[dict[str, Any]]) -> None:
            assert sorted(m["value"] for m in got) == sorted(sent)
            for m in got:
                key, offset, message_id = published[m["value"]]
                assert (m["partitionKey"], int(m["messageId"])) == (key, message_id)
                assert m["offset"] in (None, offset)
            by_partition: dict[str, list[str]] = {}
            for m in got:
                by_partition.setdefault(m["partitionKey"], []).append(m["value"])
            assert all(in_partition_order(v) for v in by_partition.values())

        body = {"topics": ["demo"], "startPosition": "earliest", "autoCommit": True}
        created = await http.post("/v1/consumers/ids-poll", json=body)
        assert created.status_code == 201, created.text
        base = f"/v1/consumers/ids-poll/instances/{created.json()['instanceId']}"
        polled: list[dict[str, Any]] = []

        async def poll_all() -> bool:
            page = await http.get(f"{base}/messages", params={"format": "utf8", "timeout_ms": 200})
            assert page.status_code == 200, page.text
            polled.extend(page.json()["messages"])
            return len(polled) >= len(sent)

        await eventually(poll_all, what="every message polled")
        check(polled)

        created = await http.post("/v1/consumers/ids-sse", json=body)
        assert created.status_code == 201, created.text
        stream = f"/v1/consumers/ids-sse/instances/{created.json()['instanceId']}/stream"
        async with http.stream("GET", stream, params={"format": "utf8"}) as response:
            assert response.status_code == 200
            events = await SseReader(response).read(len(sent))
        check([json.loads(e.data) for e in events])


# --- gRPC Subscribe ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_grpc_subscribe_delivers_every_message_once(mode: str) -> None:
    topics = [TopicSpec("demo", 4)]
    async with EmbeddedCluster(topics, balance_period=0.1, id_clock=id_clock(mode, 30)) as cluster:
        consumers = {"heartbeat_interval": 0.1, "empty_fetch_wait": 0.05, "assignment_wait": 5.0}
        settings = gateway_settings(cluster, http_host="127.0.0.1", consumers=consumers)
        async with running_gateway(cluster, settings, subscribe_step=0.1) as gw:
            sent = [f"m{i}" for i in range(60)]
            response = await gw.stub.Publish(
                pb.PublishRequest(topic="demo", messages=[message(v) for v in sent])
            )
            assert response.failed == 0
            published = {
                sent[r.index]: (r.stored.partition_key, r.stored.offset, r.stored.message_id)
                for r in response.results
            }
            check_ids(mode, list(published.values()))
            created = await gw.stub.CreateConsumer(
                pb.CreateConsumerRequest(
                    group="ids-grpc",
                    topics=["demo"],
                    start_position=pb.START_POSITION_EARLIEST,
                    auto_commit=True,
                )
            )
            call = gw.stub.Subscribe(pb.SubscribeRequest(group="ids-grpc", instance_id=created.instance_id))
            got: list[pb.ConsumedMessage] = []
            async with asyncio.timeout(20):
                while len(got) < len(sent):
                    answer = await call.read()
                    assert answer is not grpc.aio.EOF
                    got.extend(answer.messages)
            call.cancel()
    assert sorted(m.value.decode() for m in got) == sorted(sent)
    for m in got:
        key, offset, message_id = published[m.value.decode()]
        assert (m.partition_key, m.message_id) == (key, message_id)
        assert not m.HasField("offset") or m.offset == offset
    by_partition: dict[str, list[str]] = {}
    for m in got:
        by_partition.setdefault(m.partition_key, []).append(m.value.decode())
    assert all(in_partition_order(v) for v in by_partition.values())


# --- range reads (REST) ---------------------------------------------------------------------------------


@asynccontextmanager
async def rest_client(cluster: EmbeddedCluster) -> AsyncIterator[httpx.AsyncClient]:
    masters = ",".join(str(a) for a in cluster.master_addresses)
    runtime = Runtime(Settings(masters=masters, producer={"heartbeat_interval": 0.5}))
    await runtime.start()
    transport = httpx.ASGITransport(app=create_app(runtime=runtime))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            yield http
    finally:
        await runtime.stop()


@pytest.mark.parametrize("mode", MODES)
async def test_range_reads_are_exact(mode: str) -> None:
    # "turn": the turn comes at entry 145, so the ids just after `end` (entry 150 on) repeat those of
    # entries 140 and before, all partition 0's: the probe that cuts partition 0's straddling batch at
    # `end` answers with ids found earlier in that batch.
    cluster = EmbeddedCluster([TopicSpec("ranged", 3)], id_clock=id_clock(mode, 145))
    async with cluster, rest_client(cluster) as http:
        store = cluster.broker(1).store("ranged")
        first = {"messages": [{"value": f"v{i}", "partition": 0} for i in range(150)]}
        assert (await http.post("/v1/topics/ranged/messages", json=first)).status_code == 200
        end = store.max_offset  # planned before the rest arrive: batches straddle it
        rest = {"messages": [{"value": f"v{i}", "partition": i % 3} for i in range(150, 300)]}
        assert (await http.post("/v1/topics/ranged/messages", json=rest)).status_code == 200
        stored = {pid: store.read(pid, 0, max_entries=10_000).messages for pid in range(3)}
        check_ids(mode, [(f"1:ranged:{pid}", m.offset, m.message_id) for pid in stored for m in stored[pid]])
        for pid, messages in stored.items():
            expected = [str(m.message_id) for m in messages if m.offset < end]
            url = f"/v1/topics/ranged/partitions/1:ranged:{pid}/messages"
            page = (await http.get(url, params={"from": 0, "to": end, "limit": 1000})).json()
            assert page["next"] == end
            assert [m["messageId"] for m in page["messages"]] == expected
            assert len(expected) == (150 if pid == 0 else 0)


# --- Spark ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture(params=MODES)
def spark_cluster(request: pytest.FixtureRequest) -> Iterator[tuple[str, ClusterThread]]:
    running = ClusterThread([TopicSpec("ids", 3)], brokers=1, id_clock=id_clock(request.param, 1000))
    yield request.param, running
    running.close()


@pytest.mark.spark
def test_spark_batch_and_stream_reads_return_every_message_once(
    spark: Any, spark_cluster: tuple[str, ClusterThread], tmp_path: Path
) -> None:
    mode, cluster = spark_cluster
    ids = cluster.publish("ids", 0, 2000)
    store = cluster.cluster.broker(1).store("ids")
    check_ids(
        mode,
        [
            (f"1:ids:{pid}", m.offset, m.message_id)
            for pid in range(3)
            for m in store.read(pid, 0, max_entries=10_000, max_bytes=1 << 24).messages
        ],
    )
    published = sorted(zip(ids, (f"msg-{n}".encode() for n in range(2000)), strict=True))
    rows = read_tubemq(spark, cluster.masters, topic="ids").select("message_id", "value").collect()
    assert sorted((r.message_id, bytes(r.value)) for r in rows) == published
    run_available_now(spark, cluster.masters, "ids", tmp_path / "out", tmp_path / "checkpoint")
    streamed = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.message_id, bytes(r.value)) for r in streamed) == published
