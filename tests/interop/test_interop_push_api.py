"""The push subscriptions API on the real TubeMQ, with a real ``redis-server`` as the store: a subscription
created through the API delivers a real topic's messages to a receiver on 127.0.0.1 exactly once each
(signed), delivers nothing while paused, takes up after a resume where it stopped (each message still
once), and is gone from the gateway once deleted."""

from __future__ import annotations

import asyncio
import base64
import json
from collections import Counter
from pathlib import Path

from interop_support import group_name, real_gateway, require_topic, run_tag, wait_until
from standardwebhooks.webhooks import Webhook

from tests.support.push_support import Received, receiver
from tests.support.redis_support import PASSWORD, running_redis

SOURCE = ("pushsrc", 3)
RETRY = ("pushretry", 2)
SECRET = "whsec_" + base64.b64encode(b"interop-push-api-secret-01234567").decode()


def _value(request: Received) -> str:
    value: str = json.loads(request.body)["message"]["value"]
    return value


async def test_a_subscription_made_through_the_api_delivers_pauses_resumes_and_goes(tmp_path: Path) -> None:
    tag = run_tag("pushapi")
    group = group_name("pushapi")
    first = [f"{tag}-a{i}" for i in range(30)]
    second = [f"{tag}-b{i}" for i in range(10)]
    with running_redis(tmp_path / "redis") as redis:
        settings = {
            "push": {"allow": ["127.0.0.1"], "poll_wait": 0.5, "reload_interval": 0.5},
            "idempotency": {"redis_url": redis.url, "redis_password": PASSWORD},
        }
        async with receiver() as hook, real_gateway(**settings) as gw:

            async def holds_partitions() -> bool:
                push = gw.runtime.push
                runners = [r for d, r in (push.subscriptions() if push else []) if d.name == "interop-api"]
                if not runners or runners[0] is None or runners[0].instance_id is None:
                    return False
                state = gw.runtime.consumer_service().describe(group, runners[0].instance_id)
                return sum(p.topic == SOURCE[0] for p in state.partitions) == SOURCE[1]

            async def publish(values: list[str]) -> None:
                answer = await gw.http.post(
                    f"/v1/topics/{SOURCE[0]}/messages", json={"messages": [{"value": v} for v in values]}
                )
                assert answer.status_code == 200, answer.text

            def ours() -> list[Received]:
                return [r for r in hook.requests if _value(r).startswith(tag)]

            def acked() -> set[str]:
                return {_value(r) for r in hook.answered if _value(r).startswith(tag)}

            definition = {
                "name": "interop-api",
                "group": group,
                "topics": [require_topic(SOURCE)],
                "endpoint": hook.url,
                "retryTopic": require_topic(RETRY),
                "valueFormat": "utf8",
                "secret": SECRET,
                "minBackoffMs": 200,
                "maxBackoffMs": 1000,
            }
            made = await gw.http.post("/v1/subscriptions", json=definition)
            assert made.status_code == 201, made.text
            assert made.json()["hasSecret"] and SECRET not in made.text
            await wait_until(holds_partitions, 90, "the subscription holding the source's partitions")
            await publish(first)
            await wait_until(lambda: acked() >= set(first), 120, "the first 30 deliveries")

            paused = await gw.http.post("/v1/subscriptions/interop-api/pause")
            assert paused.status_code == 200 and paused.json()["state"]["status"] == "paused", paused.text
            seen = len(ours())
            await publish(second)
            await asyncio.sleep(5)
            assert len(ours()) == seen, "nothing is delivered while paused"

            resumed = await gw.http.post("/v1/subscriptions/interop-api/resume")
            assert resumed.status_code == 200 and resumed.json()["paused"] is False, resumed.text
            await wait_until(
                lambda: acked() >= set(first) | set(second), 120, "the 10 published while paused"
            )
            await asyncio.sleep(3)  # time for a duplicate to show

            assert (await gw.http.delete("/v1/subscriptions/interop-api")).status_code == 204
            assert (await gw.http.get("/v1/subscriptions")).json() == {"subscriptions": []}
            assert gw.runtime.push is not None and gw.runtime.push.subscriptions() == []
            requests = ours()
    assert Counter(_value(r) for r in requests) == Counter(first + second), "each message exactly once"
    verifier = Webhook(SECRET)
    for request in requests:
        verifier.verify(request.body, request.headers)
