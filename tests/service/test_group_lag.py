"""Lag that stays true when consumers leave (issue #23 row 4): a group this gateway served keeps its lag,
read from TubeMQ's own offsets through the master's and brokers' web API (the embedded cluster serves the
same methods, with the fields the real servers give), per topic and per partition, with the master's count
of the group's consumers; the gateway's own per-instance figure drops to 0 when its consumer leaves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.service.group_offsets import GroupOffsetsReader, OffsetsUnavailable, group_lists
from tests.support.gateway_support import FAST_CONSUMERS
from tests.support.waiting import eventually
from tests.support.workers_support import samples


@pytest.fixture
async def client() -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    settings = Settings(
        http_host="127.0.0.1",
        embedded={"topics": "lagt:1,lag2:2"},
        consumers=FAST_CONSUMERS,
        tubemq={"group_lag_interval": 0.2},
    )
    runtime = Runtime(settings)
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=20) as http:
            yield http, runtime
    finally:
        await runtime.stop()


def _gauge(text: str, name: str, **labels: str) -> float | None:
    for found, value in samples(text, name):
        if all(found.get(k) == v for k, v in labels.items()):
            return value
    return None


async def test_lag_stays_when_the_groups_only_consumer_leaves(
    client: tuple[httpx.AsyncClient, Runtime],
) -> None:
    http, runtime = client
    created = await http.post("/v1/consumers/lag-g", json={"topics": ["lagt"], "startPosition": "earliest"})
    assert created.status_code == 201, created.text
    path = f"/v1/consumers/lag-g/instances/{created.json()['instanceId']}"
    for batch in range(2):
        values = [f"m{batch}-{i}" for i in range(10 if batch == 0 else 40)]
        sent = await http.post("/v1/topics/lagt/messages", json={"messages": [{"value": v} for v in values]})
        assert sent.status_code == 200, sent.text
        if batch == 0:  # the first 10 consumed and committed: TubeMQ's offset moves past them
            polled = await http.get(f"{path}/messages", params={"max_messages": 10, "timeout_ms": 5000})
            tokens = [m["token"] for m in polled.json()["messages"]]
            assert len(tokens) == 10
            committed = await http.post(f"{path}/commits", json={"tokens": tokens})
            assert committed.json()["committed"] == 10

    async def lag_is(expected: float, consumers: float) -> bool:
        text = (await http.get("/metrics")).text
        lag = _gauge(text, "tubemq_gateway_group_lag_messages", group="lag-g", topic="lagt")
        count = _gauge(text, "tubemq_gateway_group_consumers", group="lag-g")
        return lag == expected and count == consumers

    await eventually(lambda: lag_is(40, 1), timeout=20, what="lag 40 with the consumer")
    assert (await http.delete(path)).status_code == 204
    # the only consumer left: TubeMQ still holds 40 unconsumed messages for the group, and says so
    await eventually(lambda: lag_is(40, 0), timeout=20, what="lag 40 without a consumer")
    text = (await http.get("/metrics")).text
    per_partition = [
        (labels["partition"], value)
        for labels, value in samples(text, "tubemq_gateway_group_partition_lag_messages")
        if labels["group"] == "lag-g"
    ]
    assert per_partition == [("1:0", 40.0)]
    # the gateway's own view ends with its consumer (why the offsets are read)
    assert not _gauge(text, "tubemq_gateway_consumer_lag_messages", group="lag-g", topic="lagt")
    assert runtime.lag is not None and "lag-g" in runtime.lag.groups


async def test_the_reader_on_the_embedded_web_api() -> None:
    cluster = EmbeddedCluster([TopicSpec("rd", 2, 2)], brokers=2)
    await cluster.start()
    reader = GroupOffsetsReader(cluster.master_web_addresses, timeout=2.0)
    try:
        brokers = await reader.brokers()
        assert sorted(b.broker_id for b in brokers) == [1, 2]
        assert {b.web_port for b in brokers} == {w.port for w in cluster.broker_webs.values()}
        assert await reader.offsets(["nobody"]) == {}
        assert await reader.consumers("nobody") == 0
        # the answer has the real broker's shape (field names and types)
        web = cluster.broker_webs[1].port
        raw = await _get(f"http://127.0.0.1:{web}/broker.htm?method=admin_query_offset&groupName=nobody")
        assert raw == {"result": True, "errCode": 0, "errMsg": "Success!", "dataSet": [], "totalCnt": 0}
        unknown = await _get(f"http://127.0.0.1:{web}/?method=admin_no_such_method")
        assert unknown["result"] is False and unknown["errCode"] == 400
    finally:
        await reader.close()
        await cluster.stop()
    with pytest.raises(OffsetsUnavailable):  # nothing answers any more
        stopped = GroupOffsetsReader(cluster.master_web_addresses, timeout=1.0)
        try:
            await stopped.brokers()
        finally:
            await stopped.close()


async def _get(url: str) -> Any:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(url)).json()


async def test_the_web_api_stops_with_a_client_that_never_sent_its_request() -> None:
    """A connection accepted and silent when the node stops is closed with it: no handler task is left
    pending past the event loop (Python 3.11's Server.wait_closed does not wait for connections)."""
    import asyncio

    from gateway.embedded.web import WebApi

    api = WebApi(lambda method, params: {"result": True}, name="t")
    await api.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", api.port)

    def handlers() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if "WebApi._serve" in repr(t.get_coro())]

    await eventually(lambda: len(handlers()) == 1, what="the connection served")
    (handler,) = handlers()
    await api.stop()
    assert handler.done()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the client sees the connection end
    writer.close()


async def test_twenty_groups_of_long_names_never_freeze_the_lag_of_the_others(
    client: tuple[httpx.AsyncClient, Runtime],
) -> None:
    """20 groups with 960-character names (TubeMQ allows 1024) each commit once: the monitor asks the web
    API about them in bounded parts, so every group's lag, the short one's too, keeps updating."""
    http, runtime = client
    short = "lag-short"
    long_names = [f"g{i:02d}-{'x' * 956}" for i in range(20)]
    await http.post("/v1/topics/lagt/messages", json={"messages": [{"value": f"m{i}"} for i in range(3)]})
    for group in [short, *long_names]:
        created = await http.post(
            f"/v1/consumers/{group}", json={"topics": ["lagt"], "startPosition": "earliest"}
        )
        assert created.status_code == 201, created.text
        path = f"/v1/consumers/{group}/instances/{created.json()['instanceId']}"
        polled = await http.get(f"{path}/messages", params={"max_messages": 1, "timeout_ms": 5000})
        tokens = [m["token"] for m in polled.json()["messages"]]
        assert (await http.post(f"{path}/commits", json={"tokens": tokens})).json()["committed"] == 1
        await http.get(f"{path}/messages", params={"max_messages": 1, "timeout_ms": 0})  # carries the commit
    assert runtime.lag is not None
    monitor = runtime.lag

    def lags() -> dict[str, int]:
        return {g: sum(p.lag_messages for p in r.partitions) for g, (_, r) in monitor.readings.items()}

    def every_group_at(expected: int) -> bool:
        return all(lags().get(g) == expected for g in [short, *long_names])

    await eventually(lambda: short in lags(), timeout=20, what="the short group's lag read")
    before = lags()[short]
    await eventually(lambda: every_group_at(before), timeout=20, what=f"every group's lag read: {before}")
    await http.post("/v1/topics/lagt/messages", json={"messages": [{"value": "n"} for _ in range(5)]})
    await eventually(lambda: every_group_at(before + 5), timeout=20, what="every group's lag updated")


async def test_a_part_refused_as_a_request_is_halved_down_to_the_group_it_cannot_take() -> None:
    """A reader whose parts pass the embedded web API's 8 KiB request bound (Jetty's, as on the real nodes)
    is refused (HTTP 414) and asks again in halves: every group is still read, none is lost, and a name no
    part can carry fails alone."""
    cluster = EmbeddedCluster([TopicSpec("rh", 1, 1)])
    await cluster.start()
    reader = GroupOffsetsReader(cluster.master_web_addresses, timeout=2.0, max_group_list_bytes=1 << 20)
    try:
        groups = [f"h{i:02d}-{'y' * 1000}" for i in range(24)]
        reading = await reader.read(groups)
        assert reading.found == {} and reading.failed == {}
        asked = reader.requests
        assert asked > 2  # one to the master, then the halves to the broker
        counts = await reader.consumer_counts(groups)
        assert counts == dict.fromkeys(groups, 0)
        huge = "z" * (20 * 1024)  # longer than any request the embedded web API takes
        reading = await reader.read([*groups, huge])
        assert list(reading.failed) == [huge] and "HTTP 414" in reading.failed[huge]
        assert (await reader.consumer_counts([*groups, huge]))[huge] == -1
        with pytest.raises(OffsetsUnavailable, match="HTTP 414"):
            await reader.offsets([huge])
    finally:
        await reader.close()
        await cluster.stop()


@given(
    names=st.lists(st.from_regex(r"[a-zA-Z][\w-]{1,1023}", fullmatch=True), unique=True, max_size=40),
    limit=st.integers(min_value=1, max_value=8192),
)
@settings(max_examples=200, deadline=None)
def test_group_lists_stay_within_the_request_bound(names: list[str], limit: int) -> None:
    """Every name in exactly one part, in order; a part's URL-encoded list (a comma is 3 bytes) within
    ``limit``, or one name alone that is longer."""
    parts = group_lists(names, limit)
    assert [g for part in parts for g in part] == sorted(names)
    for part in parts:
        assert part
        assert len(",".join(part)) + 2 * (len(part) - 1) <= limit or len(part) == 1
    assert group_lists([]) == []
