"""Idempotency keys in a real Redis (``idempotency.redis_url``) shared by two replicas.

In process, two gateways (``consumers.replicas`` 2) on one embedded cluster and one Redis: a key used on one
is replayed by the other, another body is 422, a principal past its keys 429; with Redis stopped keyed
publishes are 503 and unkeyed ones 200, and with it back keyed ones work again. Then the production
topology: two replicas of ``serve --workers 2`` behind a real nginx and one Redis; a client's first request
reaches one replica and its connection is cut before the answer; the retry through the other replica (and
through nginx) gets the same answer, and the topic holds one copy.
"""

from __future__ import annotations

import asyncio
import json
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
from gateway.service.idempotency_redis import RedisKeys
from gateway.service.idempotency_store import InFlight, Mismatch, Replay, Reserved
from tests.support.redis_support import PASSWORD, RedisServer, running_redis, start_redis
from tests.support.serving import free_port
from tests.support.topology_support import Replica, cluster_of, nginx_binary, replica_env, running_nginx
from tests.support.workers_support import start_workers

TOPIC = "/v1/topics/demo/messages"
SECRET = "redis-idempotency-secret-0123456789"


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 4)], brokers=1) as c:
        yield c


def _settings(cluster: EmbeddedCluster, redis: RedisServer, url: str, **idempotency: Any) -> Settings:
    return Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        producer={"heartbeat_interval": 60.0},
        consumers={"replicas": 2, "id_secret": SECRET, "advertised_url": url},
        idempotency={
            "redis_url": redis.url,
            "redis_password": PASSWORD,
            "store_timeout": 0.5,
            **idempotency,
        },
    )


async def test_two_gateways_share_their_keys_and_a_stopped_redis_is_503(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    redis = start_redis(tmp_path / "redis")
    runtimes = [
        Runtime(_settings(cluster, redis, f"http://127.0.0.1:{9000 + i}", max_keys_per_principal=3))
        for i in range(2)
    ]
    try:
        for runtime in runtimes:
            await runtime.start()
        one, two = (
            httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(runtime=r)), base_url="http://gw")
            for r in runtimes
        )
        async with one, two:
            batch = {"messages": [{"value": "shared", "partition": 0}]}
            sent = await one.post(TOPIC, json=batch, headers={"Idempotency-Key": "r-1"})
            assert sent.status_code == 200 and "idempotent-replayed" not in sent.headers, sent.text
            again = await two.post(TOPIC, json=batch, headers={"Idempotency-Key": "r-1"})
            assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
            assert again.json() == sent.json()
            other = await two.post(
                TOPIC, json={"messages": [{"value": "x"}]}, headers={"Idempotency-Key": "r-1"}
            )
            assert other.status_code == 422 and other.json()["error"]["field"] == "Idempotency-Key"
            for key in ("r-2", "r-3"):
                assert (
                    await one.post(TOPIC, json=batch, headers={"Idempotency-Key": key})
                ).status_code == 200
            full = await two.post(TOPIC, json=batch, headers={"Idempotency-Key": "r-4"})
            assert full.status_code == 429 and "idempotency keys" in full.json()["error"]["message"]

            redis.stop()
            down = await one.post(TOPIC, json=batch, headers={"Idempotency-Key": "r-5"})
            assert down.status_code == 503 and down.headers["retry-after"] == "1", down.text
            assert "idempotency store" in down.json()["error"]["message"]
            assert (await one.post(TOPIC, json=batch)).status_code == 200

            redis = start_redis(tmp_path / "redis", redis.port)  # back, empty
            back = await two.post(TOPIC, json=batch, headers={"Idempotency-Key": "r-5"})
            assert back.status_code == 200 and "idempotent-replayed" not in back.headers, back.text
            replayed = await one.post(TOPIC, json=batch, headers={"Idempotency-Key": "r-5"})
            assert replayed.headers["idempotent-replayed"] == "true" and replayed.json() == back.json()
    finally:
        for runtime in runtimes:
            await runtime.stop()
        redis.stop()


async def test_concurrent_requests_with_one_key_on_two_gateways_publish_once(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    with running_redis(tmp_path / "redis") as redis:
        runtimes = [Runtime(_settings(cluster, redis, f"http://127.0.0.1:{9100 + i}")) for i in range(2)]
        try:
            for runtime in runtimes:
                await runtime.start()
            clients = [
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=create_app(runtime=r)), base_url="http://gw"
                )
                for r in runtimes
            ]
            batch = {"messages": [{"value": "together", "partition": 3}]}
            answers = await asyncio.gather(
                *(c.post(TOPIC, json=batch, headers={"Idempotency-Key": "together"}) for c in clients * 4)
            )
            statuses = [a.status_code for a in answers]
            assert set(statuses) <= {200, 409} and 200 in statuses, statuses
            assert len({a.text for a in answers if a.status_code == 200}) == 1
            first = next(a for a in answers if a.status_code == 200).json()["results"][0]["offset"]
            probe = await clients[0].post(TOPIC, json={"messages": [{"value": "p", "partition": 3}]})
            after = await clients[1].post(TOPIC, json={"messages": [{"value": "q", "partition": 3}]})
            step = probe.json()["results"][0]["offset"] - first
            assert step > 0 and after.json()["results"][0]["offset"] == first + 2 * step  # one copy
            for client in clients:
                await client.aclose()
        finally:
            for runtime in runtimes:
                await runtime.stop()


async def test_the_redis_store_renews_records_and_hands_over_an_expired_reservation(tmp_path: Path) -> None:
    with running_redis(tmp_path / "redis") as redis:
        keys = RedisKeys(
            redis.url,
            password=PASSWORD,
            prefix="t:",
            max_keys=10,
            max_principal_bytes=1 << 20,
            max_bytes=1 << 24,
            timeout=2,
        )
        try:
            held = await keys.reserve("p", "t", "k", b"f", lease=0.3)
            assert isinstance(held, Reserved)
            assert isinstance(await keys.reserve("p", "t", "k", b"f", lease=0.3), InFlight)
            assert isinstance(await keys.reserve("p", "t", "k", b"g", lease=0.3), Mismatch)
            await asyncio.sleep(0.2)
            assert await keys.renew("p", "t", "k", held.token, lease=0.3)
            await asyncio.sleep(0.2)  # past the first lease, within the renewed one
            assert isinstance(await keys.reserve("p", "t", "k", b"f", lease=0.3), InFlight)
            assert not await keys.record("p", "t", "k", b"not-the-token", 200, b"x", window=60)
            assert await keys.record("p", "t", "k", held.token, 200, b"answer", window=60)
            assert await keys.reserve("p", "t", "k", b"f", lease=0.3) == Replay(200, b"answer")

            orphan = await keys.reserve("p", "t", "orphan", b"f", lease=0.2)
            assert isinstance(orphan, Reserved)
            await asyncio.sleep(0.3)  # its holder died: nobody renewed it
            taken = await keys.reserve("p", "t", "orphan", b"f", lease=0.3)
            assert isinstance(taken, Reserved) and taken.token != orphan.token
            assert not await keys.record("p", "t", "orphan", orphan.token, 200, b"late", window=60)
            await keys.release("p", "t", "orphan", taken.token)
            assert isinstance(await keys.reserve("p", "t", "orphan", b"other", lease=0.3), Reserved)
        finally:
            await keys.close()


async def _dropped(port: int, body: bytes, key: str) -> None:
    """Send a publish to the replica on ``port`` and close the connection before its answer."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {TOPIC} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"idempotency-key: {key}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def test_a_dropped_answer_is_given_by_the_other_replica_behind_nginx(tmp_path: Path) -> None:
    nginx_binary()
    replicas = [Replica(name, free_port(), free_port()) for name in ("a", "b")]
    with running_redis(tmp_path / "redis") as redis:
        async with cluster_of(TopicSpec("demo", 4)) as cluster:
            try:
                for replica in replicas:
                    (tmp_path / replica.name).mkdir()
                    env = {
                        **replica_env(cluster, replica, replicas),
                        "TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_URL": redis.url,
                        "TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_PASSWORD": PASSWORD,
                    }
                    args = ["--http-port", str(replica.http_port), "--grpc-port", str(replica.grpc_port)]
                    replica.gateway = await asyncio.to_thread(
                        start_workers, tmp_path / replica.name, 2, *args, env=env
                    )
                (tmp_path / "nginx").mkdir()
                with running_nginx(tmp_path / "nginx", replicas) as (http_url, _):
                    body = json.dumps({"messages": [{"value": "once", "partition": 1}]}).encode()
                    await _dropped(replicas[0].http_port, body, "topo-1")
                    answers = []
                    async with httpx.AsyncClient(timeout=30) as client:
                        for url in (replicas[1].url, http_url, http_url, replicas[0].url):
                            for _ in range(30):  # 409 while the first request is still publishing
                                answer = await client.post(
                                    url + TOPIC,
                                    content=body,
                                    headers={"content-type": "application/json", "idempotency-key": "topo-1"},
                                )
                                if answer.status_code != 409:
                                    break
                                await asyncio.sleep(int(answer.headers["retry-after"]))
                            assert answer.status_code == 200, answer.text
                            assert answer.headers["idempotent-replayed"] == "true"
                            answers.append(answer.json())
                        assert all(a == answers[0] for a in answers)
                        probe = await client.post(
                            http_url + TOPIC, json={"messages": [{"value": "p", "partition": 1}]}
                        )
                        first = answers[0]["results"][0]["offset"]
                        step = probe.json()["results"][0]["offset"] - first
                        assert step > 0
                        earlier = await client.post(
                            http_url + TOPIC, json={"messages": [{"value": "q", "partition": 1}]}
                        )
                        assert (
                            earlier.json()["results"][0]["offset"] == first + 2 * step
                        )  # one copy of "once"
            finally:
                for replica in replicas:
                    if replica.gateway is not None:
                        await asyncio.to_thread(replica.gateway.stop)
