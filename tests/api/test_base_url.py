"""baseUrl a client can reach (issue #23 row 10): a lone replica without an advertised URL answers the URL the
request came in at (behind ``docker run -p`` or a port-forward the replica's own address is not reachable);
with an advertised URL, or several replicas, the advertised URL; several replicas need one to start."""

from __future__ import annotations

import httpx
import pytest

from gateway.config import ConsumerSettings, Settings
from gateway.runtime import ConfigurationError, Runtime
from tests.support.consumer_support import Env
from tests.support.gateway_support import gateway
from tests.support.serving import bound_socket

SECRET = "replica-shared-secret-0123456789"


async def test_a_lone_replica_answers_the_url_the_client_used(env: Env) -> None:
    async with gateway(env) as gw, httpx.AsyncClient(base_url=gw.url) as client:
        # the client reached the gateway as localhost:18080 (a port-forward to this replica)
        seen = {"host": "localhost:18080"}
        created = await client.post("/v1/consumers/b-g", json={"topics": ["solo"]}, headers=seen)
        assert created.status_code == 201, created.text
        instance = created.json()["instanceId"]
        expected = f"http://localhost:18080/v1/consumers/b-g/instances/{instance}"
        assert created.json()["baseUrl"] == expected and created.headers["location"] == expected
        described = await client.get(f"/v1/consumers/b-g/instances/{instance}", headers=seen)
        assert described.json()["baseUrl"] == expected
        # a plain client gets the address it used
        direct = await client.get(f"/v1/consumers/b-g/instances/{instance}")
        assert direct.json()["baseUrl"] == f"{gw.url}/v1/consumers/b-g/instances/{instance}"
        # a Host that is not a host name is not echoed: the advertised URL stands
        odd = await client.get(f"/v1/consumers/b-g/instances/{instance}", headers={"host": "a b/c"})
        assert odd.json()["baseUrl"] == f"{gw.url}/v1/consumers/b-g/instances/{instance}"


async def test_an_advertised_url_is_answered_when_set(env: Env) -> None:
    sock = bound_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    advertised = "http://127.0.0.1:1"  # never connected to: no forwarding here
    async with gateway(env, sock, advertised_url=advertised), httpx.AsyncClient(base_url=url) as client:
        created = await client.post(
            "/v1/consumers/b-a", json={"topics": ["solo"]}, headers={"host": "localhost:18080"}
        )
        assert created.json()["baseUrl"].startswith(f"{advertised}/v1/consumers/b-a/instances/")


async def test_several_replicas_need_an_advertised_url() -> None:
    settings = Settings(http_host="127.0.0.1", consumers=ConsumerSettings(replicas=2, id_secret=SECRET))
    runtime = Runtime(settings)
    with pytest.raises(ConfigurationError, match=r"consumers\.advertised_url is not set") as refused:
        await runtime.start()
    assert "TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL" in str(refused.value)
    assert settings.model_copy(update={"consumers": ConsumerSettings(replicas=1)}).consumers.lone_replica
