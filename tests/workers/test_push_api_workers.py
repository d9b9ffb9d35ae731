"""The push subscriptions API under ``serve --workers 2`` with a real ``redis-server`` as the store: a
subscription made through one worker process runs in the other within seconds (each is a member of its
group), its messages all reach the receiver, and deleted through the other it stops in both."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.support.push_support import push_definition, receiver
from tests.support.redis_support import PASSWORD, running_redis
from tests.support.waiting import eventually
from tests.support.workers_support import WorkerGateway, start_workers


async def _names(gw: WorkerGateway, worker: int) -> list[tuple[str, str]]:
    async with gw.pinned(worker) as client:
        answer = await client.get("/v1/subscriptions")
    assert answer.status_code == 200, answer.text
    return [(s["name"], s["state"]["status"]) for s in answer.json()["subscriptions"]]


async def test_a_subscription_made_through_one_worker_runs_in_both(tmp_path: Path) -> None:
    async with receiver() as hook:
        with running_redis(tmp_path / "redis") as redis:
            env = {
                "TUBEMQ_GATEWAY_EMBEDDED__TOPICS": "demo:4,retry:2",
                "TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_URL": redis.url,
                "TUBEMQ_GATEWAY_IDEMPOTENCY__REDIS_PASSWORD": PASSWORD,
                "TUBEMQ_GATEWAY_PUSH__ALLOW": "127.0.0.1",
                "TUBEMQ_GATEWAY_PUSH__RELOAD_INTERVAL": "0.2",
                "TUBEMQ_GATEWAY_PUSH__POLL_WAIT": "0.2",
                "TUBEMQ_GATEWAY_PUSH__ERROR_BACKOFF": "0.2",
            }
            gw = await asyncio.to_thread(start_workers, tmp_path, 2, env=env)
            try:
                async with gw.pinned(0) as client:
                    made = await client.post("/v1/subscriptions", json=push_definition(hook.url))
                    assert made.status_code == 201, made.text
                await eventually(
                    lambda: _running_in(gw, 1), timeout=20, what="worker 1 running the subscription", step=0.2
                )
                values = [f"w-{i}" for i in range(40)]
                async with gw.shared() as client:
                    answer = await client.post(
                        "/v1/topics/demo/messages", json={"messages": [{"value": v} for v in values]}
                    )
                    assert answer.status_code == 200, answer.text

                def delivered() -> set[str]:
                    return {json.loads(r.body)["message"]["value"] for r in hook.answered}

                await eventually(
                    lambda: delivered() >= set(values), timeout=60, what="every message delivered"
                )
                async with gw.pinned(1) as client:
                    assert (await client.delete("/v1/subscriptions/hooks")).status_code == 204
                await eventually(
                    lambda: _none_in(gw, 0), timeout=20, what="worker 0 stopped the subscription", step=0.2
                )
            finally:
                await asyncio.to_thread(gw.stop)


async def _running_in(gw: WorkerGateway, worker: int) -> bool:
    return await _names(gw, worker) == [("hooks", "running")]


async def _none_in(gw: WorkerGateway, worker: int) -> bool:
    return await _names(gw, worker) == []
