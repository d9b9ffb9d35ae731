"""Push subscriptions on the real TubeMQ: a gateway on the real master delivers a topic of three partitions
to a receiving HTTP server on 127.0.0.1, signed, each message exactly once in the healthy case; a receiver
that fails a message's first two attempts gets it at the third, through the real retry topic."""

from __future__ import annotations

import asyncio
import base64
import json
from collections import Counter
from pathlib import Path
from typing import Any

from interop_support import group_name, real_gateway, require_topic, run_tag, wait_until
from standardwebhooks.webhooks import Webhook

from tests.support.push_support import Answer, Received, receiver

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
