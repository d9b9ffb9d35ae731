"""Idempotent publish in one process on an embedded cluster of two brokers: a 207 replays as 207; a publish
that runs longer than the lease keeps its key (renewed); a principal past its keys is refused 429 and its
other publishes pass; the store's steps are counted in the metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from tests.support.auth_support import write_auth_files

TOPIC = "/v1/topics/demo/messages"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 4)], brokers=2, data_dir=tmp_path / "data") as c:
        yield c


def _settings(cluster: EmbeddedCluster, timeout: float = 0.5, **extra: object) -> Settings:
    """Settings for ``cluster``; ``timeout``: seconds of a send (one attempt)."""
    return Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        producer={
            "heartbeat_interval": 60.0,
            "rpc_timeout": timeout,
            "send_timeout": timeout + 1.5,
            "max_send_attempts": 1,
        },
        **extra,
    )


async def test_a_207_replays_as_207(cluster: EmbeddedCluster) -> None:
    runtime = Runtime(_settings(cluster))
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            view = (await client.get("/v1/topics/demo")).json()
            on = {p["brokerId"]: p["index"] for p in view["partitions"]}
            assert set(on) == {1, 2}, view
            await cluster.stop_broker(2)
            batch = {
                "messages": [{"value": "kept", "partition": on[1]}, {"value": "lost", "partition": on[2]}]
            }
            headers = {"Idempotency-Key": "half-1"}
            first = await client.post(TOPIC, json=batch, headers=headers)
            assert first.status_code == 207, first.text
            assert [r["status"] for r in first.json()["results"]] == [200, 503]
            again = await client.post(TOPIC, json=batch, headers=headers)
            assert again.status_code == 207 and again.headers["idempotent-replayed"] == "true"
            assert again.json() == first.json()
            metrics = (await client.get("/metrics")).text
            assert 'tubemq_gateway_idempotency_checks_total{outcome="replayed",step="reserve"} 1.0' in metrics
            assert 'tubemq_gateway_idempotency_checks_total{outcome="ok",step="record"} 1.0' in metrics
            assert 'tubemq_gateway_idempotency_store_duration_seconds_count{step="reserve"} 2.0' in metrics
    finally:
        await runtime.stop()


async def test_a_principal_past_its_keys_is_429_and_unkeyed_publishes_pass(cluster: EmbeddedCluster) -> None:
    runtime = Runtime(_settings(cluster, idempotency={"max_keys_per_principal": 2}))
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            batch = {"messages": [{"value": "v"}]}
            for key in ("a", "b"):
                assert (
                    await client.post(TOPIC, json=batch, headers={"Idempotency-Key": key})
                ).status_code == 200
            refused = await client.post(TOPIC, json=batch, headers={"Idempotency-Key": "c"})
            assert refused.status_code == 429, refused.text
            assert "idempotency keys" in refused.json()["error"]["message"]
            assert int(refused.headers["retry-after"]) >= 1
            assert (await client.post(TOPIC, json=batch)).status_code == 200
            replayed = await client.post(TOPIC, json=batch, headers={"Idempotency-Key": "a"})
            assert replayed.status_code == 200 and replayed.headers["idempotent-replayed"] == "true"
    finally:
        await runtime.stop()


async def test_several_replicas_without_a_shared_store_refuse_keyed_publishes(
    cluster: EmbeddedCluster,
) -> None:
    runtime = Runtime(
        _settings(
            cluster,
            consumers={"replicas": 2, "id_secret": "s" * 32, "advertised_url": "http://127.0.0.1:8080"},
        )
    )
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            batch = {"messages": [{"value": "v"}]}
            refused = await client.post(TOPIC, json=batch, headers={"Idempotency-Key": "r"})
            assert refused.status_code == 503, refused.text
            assert "replicas share" in refused.json()["error"]["message"]
            assert (await client.post(TOPIC, json=batch)).status_code == 200
    finally:
        await runtime.stop()


async def test_a_publish_longer_than_the_lease_keeps_its_key(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Runtime(_settings(cluster, timeout=8.0, idempotency={"lease_seconds": 1.0}))
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            view = (await client.get("/v1/topics/demo")).json()
            slow = next(p["index"] for p in view["partitions"] if p["brokerId"] == 2)
            broker = cluster.broker(2)
            store = broker.send_message

            async def late(request: Any) -> Any:  # a broker that takes 3.5 s (three and a half leases)
                await asyncio.sleep(3.5)
                return await store(request)

            monkeypatch.setattr(broker, "send_message", late)
            batch = {"messages": [{"value": "slow", "partition": slow}]}
            headers = {"Idempotency-Key": "slow-1"}
            first = asyncio.create_task(client.post(TOPIC, json=batch, headers=headers))
            await asyncio.sleep(2.5)
            assert not first.done(), first.result().text
            second = await client.post(TOPIC, json=batch, headers=headers)
            assert second.status_code == 409, second.text  # renewed: not taken over
            stored = await first
            assert stored.status_code == 200, stored.text
            monkeypatch.setattr(broker, "send_message", store)
            again = await client.post(TOPIC, json=batch, headers=headers)
            assert again.headers["idempotent-replayed"] == "true" and again.json() == stored.json()
            metrics = (await client.get("/metrics")).text
            assert 'tubemq_gateway_idempotency_checks_total{outcome="ok",step="renew"}' in metrics
    finally:
        await runtime.stop()


async def test_a_principal_past_its_bytes_is_429_and_another_principal_is_not(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    files = write_auth_files(tmp_path)
    settings = _settings(
        cluster,
        idempotency={"max_bytes_per_principal": 64 * 1024},
        auth=files.auth_settings(),
        consumers={"id_secret": "s" * 32},
    )
    runtime = Runtime(settings)
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
            batch = {"messages": [{"value": "v"} for _ in range(200)]}  # an answer of about 40 KB
            statuses = []
            for i in range(4):
                headers = {**files.headers("alice"), "Idempotency-Key": f"big-{i}"}
                statuses.append((await client.post(TOPIC, json=batch, headers=headers)).status_code)
            assert statuses[0] == 200 and statuses[-1] == 429, statuses
            refused = await client.post(
                TOPIC, json=batch, headers={**files.headers("alice"), "Idempotency-Key": "big-x"}
            )
            assert refused.status_code == 429 and "bytes of keys" in refused.json()["error"]["message"]
            assert 'idempotency-bytes";q=65536' in refused.headers["ratelimit-policy"]
            bobs = await client.post(
                TOPIC, json=batch, headers={**files.headers("bob"), "Idempotency-Key": "big-0"}
            )
            assert bobs.status_code == 200 and "idempotent-replayed" not in bobs.headers, bobs.text
    finally:
        await runtime.stop()
