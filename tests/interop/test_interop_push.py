"""Push subscriptions on the real TubeMQ: a gateway on the real master delivers a topic of three partitions
to a receiving HTTP server on 127.0.0.1, signed, each message exactly once in the healthy case; a receiver
that fails a message's first two attempts gets it at the third, through the real retry topic; and of two
replicas (``serve --workers 2`` each) running one subscription, one SIGKILLed in the middle of deliveries
loses nothing: the real master and broker hand its partitions to the survivor once their timeouts expire
(``consumerHeartbeatTimeoutMs`` at the master, ``consumerRegTimeoutMs`` at the broker)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from interop_support import MASTER, group_name, real_gateway, require_topic, run_tag, wait_until
from standardwebhooks.webhooks import Webhook

from tests.support.push_support import Answer, Received, held_all_at, holdings, receiver
from tests.support.workers_support import WorkerGateway, start_workers

SOURCE = ("pushsrc", 3)
RETRY = ("pushretry", 2)
SECRET = "whsec_" + base64.b64encode(b"interop-push-secret-0123456789ab").decode()


def _push(tmp_path: Path, endpoint: str, group: str, **changes: Any) -> dict[str, Any]:
    definition = {
        "name": "interop",
        "group": group,
        "topics": [require_topic(SOURCE)],
        "endpoint": endpoint,
        "retryTopic": require_topic(RETRY),
        "valueFormat": "utf8",
        "secret": SECRET,
        "minBackoffMs": 200,
        "maxBackoffMs": 1000,
        **changes,
    }
    path = tmp_path / "subscriptions.json"
    path.write_text(json.dumps({"subscriptions": [definition]}), encoding="utf-8")
    return {"subscriptions_file": str(path), "allow": ["127.0.0.1"], "poll_wait": 0.5}


def _value(request: Received) -> str:
    value: str = json.loads(request.body)["message"]["value"]
    return value


async def _joined(gw: Any, group: str) -> None:
    """Until the subscription's consumer holds the source's three partitions (it starts at the end)."""

    async def held() -> bool:
        push = gw.runtime.push
        runner = push.subscriptions()[0][1] if push is not None else None
        if runner is None or runner.instance_id is None:
            return False
        state = gw.runtime.consumer_service().describe(group, runner.instance_id)
        return sum(p.topic == SOURCE[0] for p in state.partitions) == SOURCE[1]

    await wait_until(held, 90, "the push subscription holding its partitions")


async def _publish(gw: Any, values: list[str]) -> None:
    answer = await gw.http.post(
        f"/v1/topics/{SOURCE[0]}/messages", json={"messages": [{"value": v} for v in values]}
    )
    assert answer.status_code == 200, answer.text


async def test_each_message_is_pushed_exactly_once_and_verifies(tmp_path: Path) -> None:
    tag = run_tag("push")
    sent = [f"{tag}-{i}" for i in range(60)]
    group = group_name("push")
    async with receiver() as hook, real_gateway(push=_push(tmp_path, hook.url, group)) as gw:
        await _joined(gw, group)
        await _publish(gw, sent)
        acked = lambda: {_value(r) for r in hook.answered if _value(r).startswith(tag)}  # noqa: E731
        await wait_until(lambda: len(acked()) == len(sent), 120, "60 deliveries")
        await asyncio.sleep(3)  # time for a duplicate to show
        ours = [r for r in hook.requests if _value(r).startswith(tag)]
    counts = Counter(_value(r) for r in ours)
    assert counts == Counter(sent), "each message exactly once"
    verifier = Webhook(SECRET)
    for request in ours:
        verifier.verify(request.body, request.headers)
    partitions = {json.loads(r.body)["message"]["partitionKey"] for r in ours}
    assert len(partitions) == SOURCE[1]


async def test_a_failing_endpoint_gets_the_message_again_through_the_real_retry_topic(tmp_path: Path) -> None:
    tag = run_tag("pushretry")
    group = group_name("pushretry")

    def answer(request: Received) -> Answer:
        attempt = json.loads(request.body)["message"]["deliveryAttempt"]
        return Answer(500 if _value(request).startswith(tag) and attempt <= 2 else 200)

    async with receiver(answer) as hook, real_gateway(push=_push(tmp_path, hook.url, group)) as gw:
        await _joined(gw, group)
        await _publish(gw, [f"{tag}-0"])
        await wait_until(lambda: any(_value(r).startswith(tag) for r in hook.answered), 120, "the retry")
    attempts = [
        json.loads(r.body)["message"]["deliveryAttempt"] for r in hook.requests if _value(r).startswith(tag)
    ]
    assert attempts == [1, 2, 3]


def _replica(tmp: Path, endpoint: str, group: str) -> WorkerGateway:
    """``serve --workers 2`` on the real master running the subscription, in a process group of its own."""
    tmp.mkdir()
    settings = _push(tmp, endpoint, group, maxConcurrency=4, ackDeadlineMs=5000)
    env = {
        "TUBEMQ_GATEWAY_MASTERS": MASTER,
        "TUBEMQ_GATEWAY_CONSUMERS__HEARTBEAT_INTERVAL": "5",
        "TUBEMQ_GATEWAY_PUSH__SUBSCRIPTIONS_FILE": settings["subscriptions_file"],
        "TUBEMQ_GATEWAY_PUSH__ALLOW": "127.0.0.1",
        "TUBEMQ_GATEWAY_PUSH__POLL_WAIT": "0.5",
    }
    return start_workers(tmp, 2, env=env, session=True)


def _pids(gw: WorkerGateway) -> list[int]:
    return [gw.proc.pid, *(r["pid"] for r in gw.records() if r.get("msg") == "worker process started")]


async def _publish_to(url: str, values: list[str]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        answer = await http.post(
            f"/v1/topics/{SOURCE[0]}/messages", json={"messages": [{"value": v} for v in values]}
        )
    assert answer.status_code == 200, answer.text


async def test_a_killed_replica_loses_nothing_and_the_real_cluster_moves_its_partitions(
    tmp_path: Path,
) -> None:
    tag = run_tag("pushkill")
    group = group_name("pushkill")
    partitions = SOURCE[1] + RETRY[1]
    for spec in (SOURCE, RETRY):  # one at a time, before any replica: the harness creates a missing one
        require_topic(spec)
    async with receiver(lambda r: Answer(200, delay=0.05)) as hook:
        replicas: list[WorkerGateway] = []
        try:
            for name in ("a", "b"):
                replicas.append(await asyncio.to_thread(_replica, tmp_path / name, hook.url, group))
            victim, survivor = replicas

            def spread() -> bool:
                held = holdings([*victim.records(), *survivor.records()], group)
                mine = holdings(victim.records(), group)
                return sum(len(k) for k in held.values()) == partitions and bool(mine)

            await wait_until(spread, 120, "both replicas holding partitions")
            first = [f"{tag}-a-{i}" for i in range(200)]
            await _publish_to(survivor.url, first)
            ours = lambda: [r for r in hook.answered if _value(r).startswith(tag)]  # noqa: E731
            await wait_until(lambda: len(ours()) >= 40, 60, "deliveries going")
            killed, killed_at = time.monotonic(), time.time()
            for pid in _pids(victim):
                os.killpg(pid, signal.SIGKILL)
            await asyncio.to_thread(victim.proc.wait, 10)
            second = [f"{tag}-b-{i}" for i in range(50)]
            await _publish_to(survivor.url, second)
            await wait_until(
                lambda: held_all_at(survivor.records(), group, partitions, killed_at), 150, "partitions moved"
            )
            took = held_all_at(survivor.records(), group, partitions, killed_at)
            assert took is not None
            moved = took - killed_at
            await wait_until(lambda: {_value(r) for r in ours()} >= set(first) | set(second), 90, "all 250")
            all_in = time.monotonic() - killed
            await asyncio.sleep(2)  # time for a late repeat to show
        finally:
            for gw in replicas:
                await asyncio.to_thread(gw.stop)
    posts = Counter(r.headers["webhook-id"] for r in ours())
    repeated = [w for w, n in posts.items() if n > 1]
    print(
        f"\nreal TubeMQ, load {os.getloadavg()[0]:.1f}: partitions moved {moved:.1f} s after the SIGKILL, "
        f"every message acknowledged {all_in:.1f} s after it; {len(posts)} messages, {len(repeated)} "
        "acknowledged twice or more"
    )
    assert len(posts) == len(first) + len(second)  # nothing lost
    for webhook_id in repeated:  # only what the dead replica had posted before it died comes again
        assert min(r.at for r in ours() if r.headers["webhook-id"] == webhook_id) < killed
    # the master releases a silent consumer after consumerHeartbeatTimeoutMs (30 s) and the broker its
    # registration after consumerRegTimeoutMs (35 s in this cluster's broker.ini): not before
    assert 25 < moved < 60, moved
