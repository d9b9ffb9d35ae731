"""Ownership across replicas: a request for a consumer instance reaching the replica that does not hold it
is forwarded with the caller's credentials, and the owner authenticates and authorizes it like any request
(another principal gets 404 there, as for an unknown id)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.auth_support import AuthFiles, write_auth_files
from tests.support.consumer_support import Env
from tests.support.gateway_support import Gateway, replica_pair


@pytest.fixture
async def replicas(env: Env, tmp_path: Path) -> AsyncIterator[tuple[Gateway, Gateway, AuthFiles]]:
    files = write_auth_files(tmp_path)
    auth = files.auth_settings()
    async with (
        replica_pair(env, auth=auth) as (owner, other),
    ):
        yield owner, other, files


async def test_the_owner_replica_decides_on_forwarded_requests(
    replicas: tuple[Gateway, Gateway, AuthFiles],
) -> None:
    owner, other, files = replicas
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        created = await a.post(
            "/v1/consumers/fa-g", json={"topics": ["solo"]}, headers=files.headers("alice")
        )
        assert created.status_code == 201, created.text
        path = f"/v1/consumers/fa-g/instances/{created.json()['instanceId']}"
        assert owner.consumers.instance_count == 1 and other.consumers.instance_count == 0
        # through the other replica: forwarded with alice's credentials, served by the owner
        assert (await b.get(path, headers=files.headers("alice"))).status_code == 200
        # bob is authenticated on both replicas, but the instance is not his: the owner says 404
        foreign = await b.get(path, headers=files.headers("bob"))
        assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "not_found"
        # x-api-key travels too
        assert (await b.get(path, headers={"x-api-key": files.keys["alice"]})).status_code == 200
        # without credentials the receiving replica refuses before forwarding anything
        assert (await b.get(path)).status_code == 401
        assert (await b.delete(path, headers=files.headers("bob"))).status_code == 404
        assert (await b.delete(path, headers=files.headers("alice"))).status_code == 204
