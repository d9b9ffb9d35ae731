"""Who may manage push subscriptions, with API keys over REST (uvicorn) and JWTs over REST and gRPC, and a
real ``redis-server`` as the store: ``manage_subscriptions`` on a subscription's group and each topic to see
or change it, and, to define one, what consuming it oneself would take (a principal that may manage every
subscription but consume only ``other_*`` cannot have the gateway deliver ``demo`` anywhere)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.auth_support import SecureGateway, secure_gateway
from tests.support.jwks_support import AUDIENCE, ISSUER, SigningKey, jwks_server
from tests.support.push_support import push_definition
from tests.support.redis_support import PASSWORD, RedisServer, running_redis

TOPICS = "demo:2,retry:1,other_a:1,other_retry:1"
RULES: dict[str, Any] = {
    "rules": [
        {"roles": ["admin"], "actions": ["*"], "topics": ["*"], "groups": ["*"]},
        {"roles": ["app"], "actions": ["publish", "consume", "describe"], "topics": ["*"], "groups": ["*"]},
        {
            "principals": ["api_key:alice"],
            "actions": ["manage_subscriptions"],
            "topics": ["*"],
            "groups": ["alice_*"],
        },
        {
            "roles": ["narrow"],
            "actions": ["publish", "consume", "describe"],
            "topics": ["other_*"],
            "groups": ["other_*"],
        },
        {
            "principals": ["api_key:carol"],
            "actions": ["manage_subscriptions"],
            "topics": ["*"],
            "groups": ["*"],
        },
    ]
}


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def definition(name: str, group: str, topic: str = "demo", retry: str = "retry") -> dict[str, Any]:
    return push_definition(
        "http://127.0.0.1:9/hook", name=name, group=group, topics=[topic], retryTopic=retry
    )


def settings(redis: RedisServer) -> dict[str, Any]:
    return {
        "idempotency": {"redis_url": redis.url, "redis_password": PASSWORD, "store_timeout": 1.0},
        "push": {"allow": ["127.0.0.1/32"], "reload_interval": 0.2, "poll_wait": 0.2, "error_backoff": 0.2},
    }


async def _post(gw: SecureGateway, who: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    answer = await gw.http.post("/v1/subscriptions", json=body, headers=gw.files.headers(who))
    return answer.status_code, answer.json()


async def _names(gw: SecureGateway, who: str) -> list[str]:
    answer = await gw.http.get("/v1/subscriptions", headers=gw.files.headers(who))
    assert answer.status_code == 200, answer.text
    return [s["name"] for s in answer.json()["subscriptions"]]


async def test_manage_subscriptions_decides_who_sees_and_defines_what(
    tmp_path: Path, redis: RedisServer
) -> None:
    async with secure_gateway(tmp_path, RULES, topics=TOPICS, **settings(redis)) as gw:
        assert (await gw.http.get("/v1/subscriptions")).status_code == 401
        for who in ("bob", "nobody"):
            denied = await gw.http.get("/v1/subscriptions", headers=gw.files.headers(who))
            assert denied.status_code == 403, denied.text
            assert denied.json()["error"]["action"] == "manage_subscriptions"
            status, body = await _post(gw, who, definition("mine", "alice_hooks"))
            assert status == 403 and body["error"]["action"] == "manage_subscriptions"

        assert (await _post(gw, "alice", definition("alice-hook", "alice_hooks")))[0] == 201
        status, body = await _post(gw, "alice", definition("elsewhere", "team_hooks"))
        assert status == 403 and "team_hooks" in body["error"]["resource"]
        assert (await _post(gw, "root", definition("root-hook", "root_hooks")))[0] == 201

        # carol may manage every subscription but consume only other_*: no subscription on demo
        status, body = await _post(gw, "carol", definition("carol-demo", "other_group"))
        assert status == 403 and body["error"]["action"] == "consume" and "demo" in body["error"]["resource"]
        status, body = await _post(gw, "carol", definition("carol-retry", "other_g", "other_a", "retry"))
        assert status == 403 and "retry" in body["error"]["resource"]  # the retry topic is written for her
        assert (await _post(gw, "carol", definition("carol-other", "other_g", "other_a", "other_retry")))[
            0
        ] == 201

        assert await _names(gw, "alice") == ["alice-hook"]
        assert await _names(gw, "carol") == ["alice-hook", "carol-other", "root-hook"]
        assert await _names(gw, "root") == ["alice-hook", "carol-other", "root-hook"]
        alice = gw.files.headers("alice")
        assert (await gw.http.get("/v1/subscriptions/root-hook", headers=alice)).status_code == 403
        assert (await gw.http.post("/v1/subscriptions/root-hook/pause", headers=alice)).status_code == 403
        assert (await gw.http.delete("/v1/subscriptions/root-hook", headers=alice)).status_code == 403
        # alice may not move her subscription to a group she does not manage
        moved = await gw.http.put(
            "/v1/subscriptions/alice-hook", json=definition("alice-hook", "root_hooks2"), headers=alice
        )
        assert moved.status_code == 403

        # carol may pause (manage) alice's subscription, but not replace it with a topic she cannot consume
        carol = gw.files.headers("carol")
        paused = await gw.http.post("/v1/subscriptions/alice-hook/pause", headers=carol)
        assert paused.status_code == 200 and paused.json()["paused"] is True
        replaced = await gw.http.put(
            "/v1/subscriptions/alice-hook", json=definition("alice-hook", "alice_hooks"), headers=carol
        )
        assert replaced.status_code == 403 and replaced.json()["error"]["action"] == "consume"
        assert (await gw.http.delete("/v1/subscriptions/alice-hook", headers=carol)).status_code == 204
        assert await _names(gw, "root") == ["carol-other", "root-hook"]


async def test_jwt_scopes_over_rest_and_grpc(tmp_path: Path, redis: RedisServer) -> None:
    """A JWT's OAuth scope grants manage_subscriptions (and consuming) on jwt_* groups; over REST and gRPC
    alike, a token without the scope is refused."""
    key = SigningKey.rsa("subscriptions-key")
    rules = {
        "rules": [
            *RULES["rules"],
            {
                "scopes": ["subscriptions.manage"],
                "actions": ["manage_subscriptions", "consume", "publish"],
                "topics": ["*"],
                "groups": ["jwt_*"],
            },
        ]
    }
    async with jwks_server(key) as issuer:
        jwt_settings = {"issuer": ISSUER, "audience": [AUDIENCE], "jwks_url": issuer.url}
        async with secure_gateway(
            tmp_path, rules, topics=TOPICS, auth={"jwt": jwt_settings}, **settings(redis)
        ) as gw:
            scoped = {"Authorization": f"Bearer {key.token(scope='subscriptions.manage')}"}
            plain = {"Authorization": f"Bearer {key.token()}"}
            made = await gw.http.post(
                "/v1/subscriptions", json=definition("jwt-rest", "jwt_rest"), headers=scoped
            )
            assert made.status_code == 201, made.text
            refused = await gw.http.post(
                "/v1/subscriptions", json=definition("jwt-no", "jwt_no"), headers=plain
            )
            assert refused.status_code == 403

            created = pb.PushSubscriptionDefinition(
                name="jwt-grpc", group="jwt_grpc", endpoint="http://127.0.0.1:9/hook", retry_topic="retry"
            )
            created.topics["demo"].SetInParent()
            request = pb.CreateSubscriptionRequest(subscription=created)
            metadata = (("authorization", scoped["Authorization"]),)
            answer = await gw.stub.CreateSubscription(request, metadata=metadata)
            assert answer.subscription.definition.group == "jwt_grpc"
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await gw.stub.ListSubscriptions(
                    pb.ListSubscriptionsRequest(), metadata=(("authorization", plain["Authorization"]),)
                )
            assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
            listed = await gw.stub.ListSubscriptions(pb.ListSubscriptionsRequest(), metadata=metadata)
            assert [s.definition.name for s in listed.subscriptions] == ["jwt-grpc", "jwt-rest"]
