"""The push subscriptions API in the production topology: two replicas (``serve --workers 2`` each) on one
embedded cluster and one real ``redis-server``, behind a real nginx balancing REST and gRPC round robin. A
subscription made through nginx runs in all four worker processes within seconds, delivers what is published
through nginx, and deleted through nginx's gRPC side it stops in all four.

nginx comes from the Debian package (``scripts/ensure_nginx.sh``); without it the test skips, saying so.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import httpx
import pytest

from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.push_support import push_definition, receiver
from tests.support.redis_support import PASSWORD, running_redis
from tests.support.serving import free_port
from tests.support.topology_support import Replica, cluster_of, nginx_binary, replica_env, running_nginx
from tests.support.waiting import eventually
from tests.support.workers_support import WorkerGateway, start_workers

pytestmark = pytest.mark.slow


async def _statuses(gateways: list[WorkerGateway]) -> list[list[tuple[str, str]]]:
    """What each worker process of each replica lists."""
    found = []
    for gw in gateways:
        for worker in range(gw.count):
            async with gw.pinned(worker) as client:
                answer = await client.get("/v1/subscriptions")
            assert answer.status_code == 200, answer.text
            found.append([(s["name"], s["state"]["status"]) for s in answer.json()["subscriptions"]])
    return found


async def test_made_through_nginx_runs_in_every_worker_of_every_replica(tmp_path: Path) -> None:
    nginx_binary()  # skip before starting anything when it is missing
    replicas = [Replica(name, free_port(), free_port()) for name in ("a", "b")]
    with running_redis(tmp_path / "redis") as redis:
        async with receiver() as hook, cluster_of(TopicSpec("demo", 4), TopicSpec("retry", 2)) as cluster:
            try:
                for replica in replicas:
                    (tmp_path / replica.name).mkdir()
                    env = {
                        **replica_env(cluster, replica, replicas),
                        "TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_URL": redis.url,
                        "TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_PASSWORD": PASSWORD,
                        "TUBEMQ_GATEWAY_PUSH__ALLOW": "127.0.0.1",
                        "TUBEMQ_GATEWAY_PUSH__RELOAD_INTERVAL": "0.5",
                        "TUBEMQ_GATEWAY_PUSH__POLL_WAIT": "0.2",
                        "TUBEMQ_GATEWAY_PUSH__ERROR_BACKOFF": "0.2",
                    }
                    args = ["--http-port", str(replica.http_port), "--grpc-port", str(replica.grpc_port)]
                    replica.gateway = await asyncio.to_thread(
                        start_workers, tmp_path / replica.name, 2, *args, env=env
                    )
                gateways = [r.gateway for r in replicas if r.gateway is not None]
                (tmp_path / "nginx").mkdir()
                with running_nginx(tmp_path / "nginx", replicas) as (http_url, grpc_target):
                    async with (
                        httpx.AsyncClient(base_url=http_url, timeout=30) as http,
                        grpc.aio.insecure_channel(grpc_target) as channel,
                    ):
                        made = await http.post("/v1/subscriptions", json=push_definition(hook.url))
                        assert made.status_code == 201, made.text
                        every = [[("hooks", "running")]] * 4
                        await eventually(
                            lambda: _same(gateways, every), timeout=20, what="all four running it", step=0.3
                        )
                        values = [f"t-{i}" for i in range(60)]
                        published = await http.post(
                            "/v1/topics/demo/messages", json={"messages": [{"value": v} for v in values]}
                        )
                        assert published.status_code == 200, published.text

                        def delivered() -> set[str]:
                            return {json.loads(r.body)["message"]["value"] for r in hook.answered}

                        await eventually(lambda: delivered() >= set(values), timeout=60, what="all delivered")
                        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
                        await stub.DeleteSubscription(pb.DeleteSubscriptionRequest(name="hooks"))
                        await eventually(
                            lambda: _same(gateways, [[]] * 4), timeout=20, what="all four stopped", step=0.3
                        )
            finally:
                for replica in replicas:
                    if replica.gateway is not None:
                        await asyncio.to_thread(replica.gateway.stop)


async def _same(gateways: list[WorkerGateway], wanted: list[list[tuple[str, str]]]) -> bool:
    return await _statuses(gateways) == wanted
