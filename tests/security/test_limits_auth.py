"""Limits and CORS with authentication on (end to end over real sockets): quotas follow the authenticated
principal across REST and gRPC, and CORS preflights need no credentials."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from tests.support.auth_support import SecureGateway, secure_gateway

ORIGIN = "https://console.example"
PUBLISH = "/v1/topics/demo/messages"


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[SecureGateway]:
    async with secure_gateway(
        tmp_path,
        rate_limits={"publish_messages_per_second": 3, "burst_seconds": 1, "max_instances_per_principal": 1},
        cors={"allow_origins": [ORIGIN]},
    ) as gateway:
        yield gateway


def batch(count: int) -> dict[str, list[dict[str, str]]]:
    return {"messages": [{"value": f"m{i}"} for i in range(count)]}


async def test_a_limited_principal_gets_429_and_another_principal_is_unaffected(gw: SecureGateway) -> None:
    alice, bob = gw.files.headers("alice"), gw.files.headers("bob")
    assert (await gw.http.post(PUBLISH, json=batch(3), headers=alice)).status_code == 200
    refused = await gw.http.post(PUBLISH, json=batch(1), headers=alice)
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.headers["ratelimit-policy"] == '"messages";q=3;w=1'
    assert refused.headers["ratelimit"].startswith('"messages";r=0;t=')
    assert "principal 'api_key:alice'" in refused.json()["error"]["message"]
    assert (await gw.http.post(PUBLISH, json=batch(3), headers=bob)).status_code == 200
    # One bucket per principal, whichever API it uses: alice's gRPC publish is refused too, bob's not.
    request = pb.PublishRequest(topic="demo", messages=[pb.Message(value=b"x")])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Publish(request, metadata=gw.files.metadata("alice"))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    root = await gw.stub.Publish(request, metadata=gw.files.metadata("root"))
    assert root.failed == 0


async def test_consumer_instance_cap_per_principal(gw: SecureGateway) -> None:
    body = {"topics": ["demo"]}
    alice, bob = gw.files.headers("alice"), gw.files.headers("bob")
    assert (await gw.http.post("/v1/consumers/g_cap", json=body, headers=alice)).status_code == 201
    second = await gw.http.post("/v1/consumers/g_cap", json=body, headers=alice)
    assert second.status_code == 429, second.text
    assert second.headers["ratelimit-policy"] == '"instances";q=1'
    assert (await gw.http.post("/v1/consumers/g_cap", json=body, headers=bob)).status_code == 201
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.CreateConsumer(
            pb.CreateConsumerRequest(group="g_cap", topics=["demo"]), metadata=gw.files.metadata("bob")
        )
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_cors_preflight_needs_no_credentials_and_refusals_carry_cors_headers(gw: SecureGateway) -> None:
    preflight = await gw.http.options(
        PUBLISH,
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    # Without credentials the request itself is refused, and the page can read why.
    unauthenticated = await gw.http.post(PUBLISH, json=batch(1), headers={"origin": ORIGIN})
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["access-control-allow-origin"] == ORIGIN
    assert "www-authenticate" in unauthenticated.headers["access-control-expose-headers"].lower()
    allowed = await gw.http.post(
        PUBLISH, json=batch(1), headers={"origin": ORIGIN, **gw.files.headers("bob")}
    )
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == ORIGIN
