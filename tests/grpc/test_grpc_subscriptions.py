"""The push subscription RPCs over a real gRPC channel, with API keys and a real ``redis-server`` as store:
the same service as REST (a subscription made by one is seen by the other), its messages delivered, the
secret never answered, errors as statuses naming the field (INVALID_ARGUMENT, ALREADY_EXISTS,
PERMISSION_DENIED, UNAUTHENTICATED, UNAVAILABLE with the store down, RESOURCE_EXHAUSTED for an oversized
definition)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.auth_support import secure_gateway
from tests.support.grpc_support import detail_of
from tests.support.push_support import receiver
from tests.support.redis_support import PASSWORD, RedisServer, running_redis
from tests.support.waiting import eventually

TOPICS = "demo:2,retry:1,dlq:1"
SECRET = "whsec_" + base64.b64encode(b"grpc-api-secret-0123456789abcdef").decode()


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def settings(redis: RedisServer) -> dict[str, Any]:
    return {
        "idempotency": {"redis_url": redis.url, "redis_password": PASSWORD, "store_timeout": 1.0},
        "push": {"allow": ["127.0.0.1/32"], "reload_interval": 0.2, "poll_wait": 0.2, "error_backoff": 0.2},
    }


def definition(endpoint: str, **fields: Any) -> pb.PushSubscriptionDefinition:
    made = pb.PushSubscriptionDefinition(
        name="hooks",
        group="grpc-push",
        endpoint=endpoint,
        retry_topic="retry",
        start_position="earliest",
        value_format="utf8",
        min_backoff_ms=100,
        max_backoff_ms=500,
        ack_deadline_ms=2000,
        **fields,
    )
    made.topics["demo"].SetInParent()
    return made


async def test_the_rpcs_manage_what_rest_sees_and_the_gateway_delivers(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with receiver() as hook, secure_gateway(tmp_path, topics=TOPICS, **settings(redis)) as gw:
        root = gw.files.metadata("root")
        made = await gw.stub.CreateSubscription(
            pb.CreateSubscriptionRequest(subscription=definition(hook.url, secret=SECRET)), metadata=root
        )
        shown = made.subscription
        assert shown.has_secret and not shown.definition.HasField("secret") and shown.source == "api"
        assert SECRET not in str(shown) and dict(shown.definition.topics) == {"demo": pb.StreamIds()}
        assert shown.definition.ack_deadline_ms == 2000 and shown.definition.payload == "wrapped"

        rest = await gw.http.get("/v1/subscriptions/hooks", headers=gw.files.headers("root"))
        assert rest.status_code == 200 and rest.json()["group"] == "grpc-push"

        published = await gw.http.post(
            "/v1/topics/demo/messages",
            json={"messages": [{"value": "over-grpc"}]},
            headers=gw.files.headers("root"),
        )
        assert published.status_code == 200, published.text
        await eventually(
            lambda: [json.loads(r.body)["message"]["value"] for r in hook.answered] == ["over-grpc"],
            timeout=30,
            what="the delivery",
        )

        async def counted() -> bool:  # a delivery is counted once its commit went through, after the 2xx
            got = await gw.stub.GetSubscription(pb.GetSubscriptionRequest(name="hooks"), metadata=root)
            state = got.subscription.state
            return state.deliveries.get("acked") == 1 and state.last_outcome == "acked"

        await eventually(counted, timeout=10, what="the state counting the delivery")

        paused = await gw.stub.PauseSubscription(pb.PauseSubscriptionRequest(name="hooks"), metadata=root)
        assert paused.subscription.definition.paused and paused.subscription.state.status == "paused"
        resumed = await gw.stub.ResumeSubscription(pb.ResumeSubscriptionRequest(name="hooks"), metadata=root)
        assert not resumed.subscription.definition.paused
        replaced = await gw.stub.ReplaceSubscription(
            pb.ReplaceSubscriptionRequest(name="hooks", subscription=definition(hook.url, max_concurrency=2)),
            metadata=root,
        )
        assert replaced.subscription.definition.max_concurrency == 2 and not replaced.subscription.has_secret
        listed = await gw.stub.ListSubscriptions(pb.ListSubscriptionsRequest(), metadata=root)
        assert [s.definition.name for s in listed.subscriptions] == ["hooks"]

        with pytest.raises(grpc.aio.AioRpcError) as taken:
            await gw.stub.CreateSubscription(
                pb.CreateSubscriptionRequest(subscription=definition(hook.url)), metadata=root
            )
        assert taken.value.code() is grpc.StatusCode.ALREADY_EXISTS and detail_of(taken.value).field == "name"

        await gw.stub.DeleteSubscription(pb.DeleteSubscriptionRequest(name="hooks"), metadata=root)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await gw.stub.GetSubscription(pb.GetSubscriptionRequest(name="hooks"), metadata=root)
        assert gone.value.code() is grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"endpoint": "http://[::1]:9/hook"}, "endpoint"),
        ({"max_concurrency": 0}, "maxConcurrency"),
        ({"payload": "raw"}, "payload"),
        ({"secret": "whsec_short"}, "secret"),
        ({"name": "bad name"}, "name"),
    ],
)
async def test_a_wrong_definition_is_invalid_argument_naming_the_field(
    tmp_path: Path, redis: RedisServer, fields: dict[str, Any], field: str
) -> None:
    async with secure_gateway(tmp_path, topics=TOPICS, **settings(redis)) as gw:
        made = definition("http://127.0.0.1:9/hook")
        for name, value in fields.items():
            setattr(made, name, value)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await gw.stub.CreateSubscription(
                pb.CreateSubscriptionRequest(subscription=made), metadata=gw.files.metadata("root")
            )
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert detail_of(refused.value).field == field


async def test_who_may_and_a_store_gone_down(tmp_path: Path, redis: RedisServer) -> None:
    async with secure_gateway(tmp_path, topics=TOPICS, **settings(redis)) as gw:
        request = pb.CreateSubscriptionRequest(subscription=definition("http://127.0.0.1:9/hook"))
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await gw.stub.ListSubscriptions(pb.ListSubscriptionsRequest())
        assert anonymous.value.code() is grpc.StatusCode.UNAUTHENTICATED
        for who in ("bob", "nobody"):  # bob may consume everything, but manage no subscription
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await gw.stub.CreateSubscription(request, metadata=gw.files.metadata(who))
            assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED

        huge = definition("http://127.0.0.1:9/hook")
        for index in range(40):
            huge.topics[f"t{index}"].stream_ids.extend([f"{index}-{n}-" + "s" * 100 for n in range(20)])
        with pytest.raises(grpc.aio.AioRpcError) as too_large:
            await gw.stub.CreateSubscription(
                pb.CreateSubscriptionRequest(subscription=huge), metadata=gw.files.metadata("root")
            )
        assert too_large.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED

        redis.stop()
        with pytest.raises(grpc.aio.AioRpcError) as down:
            await gw.stub.CreateSubscription(request, metadata=gw.files.metadata("root"))
        assert down.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "idempotency.redis_url" in (down.value.details() or "")
        assert detail_of(down.value).retry_after_seconds
