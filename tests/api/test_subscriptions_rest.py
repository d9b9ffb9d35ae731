"""The push subscriptions API over REST (uvicorn on a loopback port), with a real ``redis-server`` as the
shared store: two replicas on one cluster and one Redis see the same definitions (made on A, delivered by
B's loop; deleted on A, stopped on B), pause and resume, the secret never answered, the file's definitions
read-only, forged and oversized bodies, endpoints outside ``push.allow`` (also a name resolving to a refused
address), too many definitions, no store and a store that went down."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from tests.support.consumer_support import Env
from tests.support.gateway_support import Gateway, gateway
from tests.support.push_support import Receiver, receiver
from tests.support.push_support import push_definition as definition
from tests.support.redis_support import PASSWORD, RedisServer, running_redis
from tests.support.waiting import eventually

TOPICS = "demo:4,retry:2,dlq:1,other:1"
SECRET = "whsec_" + base64.b64encode(b"rest-api-secret-0123456789abcdef").decode()


#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = TOPICS


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with running_redis(tmp_path / "redis") as server:
        yield server


def store(redis: RedisServer) -> dict[str, Any]:
    return {"redis_url": redis.url, "redis_password": PASSWORD, "store_timeout": 1.0}


def push(tmp_path: Path, *filed: dict[str, Any], **changes: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "allow": ["127.0.0.1/32", "localhost"],
        "poll_wait": 0.2,
        "error_backoff": 0.2,
        "reload_interval": 0.2,
        **changes,
    }
    if filed:
        path = tmp_path / "subscriptions.json"
        path.write_text(json.dumps({"subscriptions": list(filed)}), encoding="utf-8")
        settings["subscriptions_file"] = str(path)
    return settings


@asynccontextmanager
async def replicas(
    env: Env, redis: RedisServer, tmp_path: Path
) -> AsyncIterator[tuple[tuple[Gateway, httpx.AsyncClient], ...]]:
    """Two replicas on one cluster and one Redis, each with a client."""
    async with (
        gateway(env, push=push(tmp_path), idempotency=store(redis)) as a,
        gateway(env, push=push(tmp_path), idempotency=store(redis)) as b,
        httpx.AsyncClient(base_url=a.url, timeout=20) as client_a,
        httpx.AsyncClient(base_url=b.url, timeout=20) as client_b,
    ):
        yield (a, client_a), (b, client_b)


def values(hook: Receiver) -> list[str]:
    return [json.loads(r.body)["message"]["value"] for r in hook.answered]


def running(gw: Gateway) -> list[str]:
    assert gw.runtime.push is not None
    return [d.name for d, runner in gw.runtime.push.subscriptions() if runner is not None]


async def test_two_replicas_share_the_definitions_made_through_one(
    env: Env, redis: RedisServer, tmp_path: Path
) -> None:
    async with receiver() as hook, replicas(env, redis, tmp_path) as ((a, client_a), (b, client_b)):
        endpoint = hook.url + "?key=receiver-credential"  # a query string may carry the receiver's secret
        made = await client_a.post("/v1/subscriptions", json=definition(endpoint, secret=SECRET))
        assert made.status_code == 201, made.text
        assert made.headers["location"].endswith("/v1/subscriptions/hooks")
        shown = made.json()
        assert shown["hasSecret"] is True and "secret" not in shown and SECRET not in made.text
        assert shown["endpoint"] == hook.url + "?…" and "receiver-credential" not in made.text
        assert shown["source"] == "api" and shown["state"]["status"] in ("running", "failing")
        await eventually(lambda: running(b) == ["hooks"], timeout=10, what="replica B running it")
        listed = (await client_b.get("/v1/subscriptions")).json()["subscriptions"]
        assert [s["name"] for s in listed] == ["hooks"] and SECRET not in json.dumps(listed)
        assert "receiver-credential" not in json.dumps(listed)

        # B's loop delivers it alone once A is gone
        await a.stop()
        await env.publish("demo", [b"b-0", b"b-1", b"b-2"])
        await eventually(lambda: set(values(hook)) >= {"b-0", "b-1", "b-2"}, timeout=30, what="B delivered")

        async def counted() -> bool:  # a delivery is counted once its commit went through, after the 2xx
            state = (await client_b.get("/v1/subscriptions/hooks")).json()["state"]
            return state["deliveries"].get("acked", 0) >= 3 and state.get("lastOutcome") == "acked"

        await eventually(counted, timeout=10, what="B's state counting its deliveries")

        paused = await client_b.post("/v1/subscriptions/hooks/pause")
        assert paused.status_code == 200 and paused.json()["paused"] is True
        assert paused.json()["state"]["status"] == "paused" and running(b) == []
        before = len(hook.answered)
        await env.publish("demo", [b"while-paused"])
        await asyncio.sleep(1.5)
        assert len(hook.answered) == before
        resumed = await client_b.post("/v1/subscriptions/hooks/resume")
        assert resumed.status_code == 200 and resumed.json()["paused"] is False
        await eventually(lambda: "while-paused" in values(hook), timeout=30, what="delivered after resume")

        assert (await client_b.delete("/v1/subscriptions/hooks")).status_code == 204
        assert running(b) == [] and (await client_b.get("/v1/subscriptions/hooks")).status_code == 404
        assert (await client_b.get("/v1/subscriptions")).json() == {"subscriptions": []}


async def test_deleted_on_one_replica_stops_on_the_other(
    env: Env, redis: RedisServer, tmp_path: Path
) -> None:
    async with receiver() as hook, replicas(env, redis, tmp_path) as ((_, client), (b, _)):
        assert (await client.post("/v1/subscriptions", json=definition(hook.url))).status_code == 201
        await eventually(lambda: running(b) == ["hooks"], timeout=10, what="B running it")
        replaced = await client.put("/v1/subscriptions/hooks", json=definition(hook.url, maxConcurrency=3))
        assert replaced.status_code == 200 and replaced.json()["maxConcurrency"] == 3
        assert b.runtime.push is not None
        await eventually(
            lambda: [d.max_concurrency for d, _ in b.runtime.push.subscriptions()] == [3],  # type: ignore[union-attr]
            timeout=10,
            what="B running the replaced definition",
        )
        assert (await client.delete("/v1/subscriptions/hooks")).status_code == 204
        await eventually(lambda: running(b) == [], timeout=10, what="B stopped it")
        assert (await client.delete("/v1/subscriptions/hooks")).status_code == 404


async def test_the_files_definitions_are_read_only_and_names_are_unique(
    env: Env, redis: RedisServer, tmp_path: Path
) -> None:
    async with receiver() as hook:
        filed = definition(hook.url, name="filed", group="filed-group")
        settings = push(tmp_path, filed, max_subscriptions=2)
        async with (
            gateway(env, push=settings, idempotency=store(redis)) as gw,
            httpx.AsyncClient(base_url=gw.url, timeout=20) as client,
        ):
            listed = (await client.get("/v1/subscriptions")).json()["subscriptions"]
            assert [(s["name"], s["source"]) for s in listed] == [("filed", "file")]
            same_name = await client.post("/v1/subscriptions", json=definition(hook.url, name="filed"))
            assert same_name.status_code == 409
            error = same_name.json()["error"]
            assert error["field"] == "name" and settings["subscriptions_file"] in error["message"]
            same_group = await client.post(
                "/v1/subscriptions", json=definition(hook.url, group="filed-group")
            )
            assert same_group.status_code == 409 and same_group.json()["error"]["field"] == "group"
            for answer in (
                await client.put("/v1/subscriptions/filed", json=filed),
                await client.delete("/v1/subscriptions/filed"),
                await client.post("/v1/subscriptions/filed/pause"),
            ):
                assert answer.status_code == 409, answer.text
                assert settings["subscriptions_file"] in answer.json()["error"]["message"]
            assert (await client.post("/v1/subscriptions", json=definition(hook.url))).status_code == 201
            again = await client.post("/v1/subscriptions", json=definition(hook.url, maxConcurrency=2))
            assert again.status_code == 409 and again.json()["error"]["field"] == "name"
            group_taken = await client.post("/v1/subscriptions", json=definition(hook.url, name="other"))
            assert group_taken.status_code == 409 and group_taken.json()["error"]["field"] == "group"
            full = await client.post(
                "/v1/subscriptions", json=definition(hook.url, name="third", group="third-group")
            )
            assert full.status_code == 429 and "push.max_subscriptions" in full.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"endpoint": "http://[::1]:9/x"}, "endpoint"),
        ({"endpoint": "http://localhost:9/x"}, "endpoint"),  # allowed by name, resolves to a refused address
        ({"endpoint": "http://169.254.169.254/latest"}, "endpoint"),
        ({"maxConcurrency": 0}, "maxConcurrency"),
        ({"colour": "red"}, "colour"),
        ({"secret": "not-a-secret"}, "secret"),
        ({"name": "../etc"}, "name"),
        ({"topics": "demo"}, "topics"),
    ],
)
async def test_a_wrong_definition_is_refused_naming_the_field(
    env: Env, redis: RedisServer, tmp_path: Path, body: dict[str, Any], field: str
) -> None:
    allow = {"allow": ["127.0.0.1/32", "localhost"]}
    if body.get("endpoint") == "http://localhost:9/x":
        allow = {"allow": ["localhost"]}
    async with (
        gateway(env, push=push(tmp_path, **allow), idempotency=store(redis)) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=20) as client,
    ):
        answer = await client.post(
            "/v1/subscriptions", json={**definition("http://127.0.0.1:9/hook"), **body}
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["field"] == field
        assert (await client.get("/v1/subscriptions")).json() == {"subscriptions": []}


async def test_forged_and_oversized_bodies(env: Env, redis: RedisServer, tmp_path: Path) -> None:
    async with (
        gateway(env, push=push(tmp_path), idempotency=store(redis)) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=20) as client,
    ):
        json_type = {"content-type": "application/json"}
        assert (
            await client.post("/v1/subscriptions", content=b"{not json", headers=json_type)
        ).status_code == 400
        assert (
            await client.post("/v1/subscriptions", content=b"[1, 2]", headers=json_type)
        ).status_code == 400
        deep = b"[" * 100_000 + b"]" * 100_000
        assert (await client.post("/v1/subscriptions", content=deep, headers=json_type)).status_code == 413
        huge = definition(
            "http://127.0.0.1:9/hook", topics={"demo": ["s" * 120] * 300, "other": ["t" * 120] * 300}
        )
        too_large = await client.post("/v1/subscriptions", json=huge)
        assert too_large.status_code == 413 and too_large.json()["error"]["limit"] == 65536

        text = await client.post("/v1/subscriptions", content=b"{}", headers={"content-type": "text/plain"})
        assert text.status_code == 415
        named = await client.put(
            "/v1/subscriptions/one", json=definition("http://127.0.0.1:9/hook", name="two")
        )
        assert named.status_code == 400 and named.json()["error"]["field"] == "name"


async def test_without_a_store_writes_say_which_setting_to_set(env: Env, tmp_path: Path) -> None:
    async with (
        gateway(env, push=push(tmp_path)) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=20) as client,
    ):
        assert (await client.get("/v1/subscriptions")).json() == {"subscriptions": []}
        answer = await client.post("/v1/subscriptions", json=definition("http://127.0.0.1:9/hook"))
        assert answer.status_code == 503 and "idempotency.redis_url" in answer.json()["error"]["message"]
        assert (await client.delete("/v1/subscriptions/hooks")).status_code == 404


async def test_a_store_gone_down_refuses_writes_and_the_running_subscriptions_go_on(
    env: Env, redis: RedisServer, tmp_path: Path
) -> None:
    async with (
        receiver() as hook,
        gateway(env, push=push(tmp_path), idempotency=store(redis)) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=20) as client,
    ):
        assert (await client.post("/v1/subscriptions", json=definition(hook.url))).status_code == 201
        redis.stop()
        answer = await client.post("/v1/subscriptions", json=definition(hook.url, name="more", group="more"))
        assert answer.status_code == 503, answer.text
        assert "idempotency.redis_url" in answer.json()["error"]["message"] and answer.headers["retry-after"]
        assert (await client.post("/v1/subscriptions/hooks/pause")).status_code == 503
        await env.publish("demo", [b"store-down"])
        await eventually(
            lambda: "store-down" in values(hook), timeout=30, what="delivered with the store down"
        )
        assert [s["name"] for s in (await client.get("/v1/subscriptions")).json()["subscriptions"]] == [
            "hooks"
        ]


async def test_definitions_written_into_the_store_around_the_api(
    env: Env, redis: RedisServer, tmp_path: Path
) -> None:
    """One that fails the check (an endpoint push.allow refuses) and one that is not even JSON are not run;
    the first can still be deleted through the API, the second by an admin (here: open mode)."""
    prefix = "tubemq-gateway:push:"
    client = aioredis.Redis.from_url(redis.url, password=PASSWORD)
    try:
        refused = definition("http://[::1]:9/hook", name="forged", group="forged")
        await client.hset(prefix + "defs", mapping={"forged": json.dumps(refused), "garbage": b"\xff{"})
        await client.incr(prefix + "version")
        async with (
            receiver() as hook,
            gateway(env, push=push(tmp_path), idempotency=store(redis)) as gw,
            httpx.AsyncClient(base_url=gw.url, timeout=20) as http,
        ):
            assert (await http.post("/v1/subscriptions", json=definition(hook.url))).status_code == 201
            assert running(gw) == ["hooks"]
            assert [s["name"] for s in (await http.get("/v1/subscriptions")).json()["subscriptions"]] == [
                "hooks"
            ]
            unreadable = await http.post("/v1/subscriptions/garbage/pause")
            assert unreadable.status_code == 400 and "delete it" in unreadable.json()["error"]["message"]
            assert (await http.delete("/v1/subscriptions/forged")).status_code == 204
            assert (await http.delete("/v1/subscriptions/garbage")).status_code == 204
            assert set(await client.hkeys(prefix + "defs")) == {b"hooks"}
            assert running(gw) == ["hooks"]
    finally:
        await client.aclose()
