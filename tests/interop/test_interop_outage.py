"""The real broker stopped and started under a running gateway: publishes fail with a mapped, retriable
error (never a 5xx other than 503, never a hang), the broker is shielded, the gateway turns unready, and
everything recovers once the broker is back (and a topic whose partitions the master stops listing is an
outage, 503, not a 404); a topic the cluster does not have is unpublishable (404).

The broker is stopped with SIGTERM to the pid the harness recorded (checked to be its broker), and started
again with the harness's ``start.sh`` (which only starts what is not running). The suite holds the cluster's
lock for its whole run (scripts/interop.sh)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from interop_outage import broker_stopped, outage_settings
from interop_support import (
    DEMO,
    RealGateway,
    group_name,
    real_gateway,
    require_topic,
    run_tag,
    wait_until,
)

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.tubemq.producer.events import BrokerShielded, BrokerUnshielded


@contextlib.contextmanager
def _explained(observed: dict[str, Any], events: list[object]) -> Iterator[None]:
    """A failure inside carries what the gateway answered and the core events (for diagnosis)."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nobserved: {observed}\ncore events: {events[-30:]}") from exc


async def test_publish_and_consume_across_a_broker_restart() -> None:
    """Two gateways see the outage differently. ``stale`` heartbeats the master rarely, so it keeps sending
    to the stopped broker: 503 with Retry-After, the broker shielded, /readyz unready. ``fresh`` heartbeats
    every second and learns from the real master that the topic's partitions are gone while its broker is
    still configured: an outage, 503 with Retry-After (it was a 404 that clients took as permanent), and
    /readyz unready (``routesLost``). Both publish again once the broker is back, and a consumer instance
    receives what was published."""
    topic = require_topic(DEMO)
    tag = run_tag("outage")
    async with real_gateway(**outage_settings(600.0)) as stale, real_gateway(**outage_settings(1.0)) as fresh:
        answer = await stale.http.post(f"/v1/consumers/{group_name('outage')}", json={"topics": [topic]})
        assert answer.status_code == 201, answer.text
        base = answer.json()["baseUrl"]

        async def assigned() -> bool:
            poll = await stale.http.get(f"{base}/messages", params={"timeout_ms": 500})
            assert poll.status_code == 200, poll.text
            return bool((await stale.http.get(base)).json()["partitions"])

        await wait_until(assigned, 60.0, "the consumer instance to be assigned partitions")
        for gw in (stale, fresh):
            r = await gw.http.post(
                f"/v1/topics/{topic}/messages", json={"messages": [{"value": f"{tag}-before"}]}
            )
            assert r.status_code == 200, r.text

        observed: dict[str, Any] = {}
        events: list[object] = []
        stale.runtime.events.subscribe(events.append, BrokerShielded, BrokerUnshielded)
        with broker_stopped(), _explained(observed, events):
            # stale routes: the sends fail, the answer is a retriable 503, the broker gets shielded
            observed["stale"] = [await publish_status(stale, topic, f"{tag}-down{i}") for i in range(3)]
            assert set(observed["stale"]) == {503}, observed
            assert any(isinstance(e, BrokerShielded) and e.broker_id == 1 for e in events), events
            view = (await stale.http.get(f"/v1/topics/{topic}")).json()
            observed["stale_topic"] = view
            assert 1 in view["shieldedBrokers"], view
            ready = await stale.http.get("/readyz")
            observed["stale_readyz"] = ready.json()
            assert ready.status_code == 503, ready.text
            observed["stale_grpc"] = await grpc_publish_code(stale, topic, f"{tag}-grpc-down")
            assert observed["stale_grpc"] == "UNAVAILABLE", observed

            # fresh routes: the real master no longer lists the topic's partitions (it drops a stopped
            # broker's) but keeps the broker configured: an outage, 503 + Retry-After, never a 404
            async def routes_dropped() -> bool:
                status = await publish_status(fresh, topic, f"{tag}-fresh-down")
                observed.setdefault("fresh", []).append(status)
                return (
                    fresh.runtime.producer is not None and fresh.runtime.producer.topic_route(topic) is None
                )

            await wait_until(routes_dropped, 30.0, "the fresh gateway to see no partition", step=1.0)
            for i in range(3):
                observed["fresh"].append(await publish_status(fresh, topic, f"{tag}-fresh-away{i}"))
            assert set(observed["fresh"]) == {503}, observed
            observed["fresh_grpc"] = await grpc_publish_code(fresh, topic, f"{tag}-grpc-down")
            assert observed["fresh_grpc"] == "UNAVAILABLE", observed

            async def fresh_unready() -> bool:
                ready = await fresh.http.get("/readyz")
                observed["fresh_readyz"] = ready.json()
                return ready.status_code == 503

            await wait_until(fresh_unready, 30.0, "the fresh gateway to turn unready", step=1.0)
            assert observed["fresh_readyz"]["checks"]["routesLost"] is True, observed

            # the consumer instance's partitions are away with the broker: its polls answer 503 +
            # Retry-After (an empty 200 would read as an idle topic), never another error
            async def poll_unavailable() -> bool:
                poll = await stale.http.get(f"{base}/messages", params={"timeout_ms": 500})
                observed.setdefault("polls", []).append(poll.status_code)
                assert poll.status_code in (200, 503), poll.text
                if poll.status_code == 503:
                    assert "retry-after" in poll.headers, poll.headers
                return poll.status_code == 503

            await wait_until(poll_unavailable, 40.0, "a poll answered 503 while the partitions are away")
        print("observed while the broker was down:", observed)

        # recovery: both publish again, the stale one reports ready again, the consumer receives
        for gw, name in ((stale, "stale"), (fresh, "fresh")):

            async def publishes(gw: RealGateway = gw) -> bool:
                return await publish_status(gw, topic, f"{tag}-after") == 200

            await wait_until(publishes, 120.0, f"the {name} gateway to publish after the restart", step=1.0)
        assert (await stale.http.get("/readyz")).status_code == 200
        assert any(isinstance(e, BrokerUnshielded) and e.broker_id == 1 for e in events), events
        got: set[str] = set()

        async def received() -> bool:
            poll = await stale.http.get(f"{base}/messages", params={"timeout_ms": 1000, "format": "utf8"})
            assert poll.status_code == 200, poll.text
            messages = poll.json()["messages"]
            got.update(m["value"] for m in messages if m["encoding"] == "utf8")
            if messages:
                await stale.http.post(f"{base}/commits", json={})
            return f"{tag}-after" in got

        await wait_until(
            received, 120.0, "the consumer instance to receive a message published after the restart"
        )


async def publish_status(gw: RealGateway, topic: str, value: str) -> int:
    """The status of one REST publish (per-message status of a 207), checked to be a well-formed answer."""
    async with asyncio.timeout(30):
        r = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": value}]})
    body = r.json()
    if r.status_code == 207:
        return int(body["results"][0]["status"])
    assert r.status_code in (200, 503, 404), r.text
    if r.status_code == 503:
        assert "retry-after" in r.headers, r.headers
    if r.status_code != 200:
        assert body["error"]["message"], body
    return r.status_code


async def grpc_publish_code(gw: RealGateway, topic: str, value: str) -> str:
    async with asyncio.timeout(30):
        try:
            response = await gw.grpc_stub.Publish(
                pb.PublishRequest(topic=topic, messages=[pb.Message(value=value.encode())])
            )
        except grpc.aio.AioRpcError as exc:
            return str(exc.code().name)
    assert response.failed == 1
    names = {code.value[0]: code.name for code in grpc.StatusCode}
    return names[response.results[0].error.code]


async def test_unknown_topic_is_unpublishable() -> None:
    async with real_gateway() as gw:
        topic = f"interop_absent_{run_tag('t').split('-')[1]}"
        r = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": "x"}]})
        assert r.status_code == 404, r.text
        assert r.json()["error"]["message"]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.grpc_stub.Publish(pb.PublishRequest(topic=topic, messages=[pb.Message(value=b"x")]))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
