"""Two gateway replicas (real uvicorn servers on two loopback ports, one embedded cluster): a consumer created
on one is served through either port, its stream is relayed, and a stopped owner yields 410."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.api.forwarding import FORWARDED_HEADER
from gateway.security.replica_subject import REPLICA_CERT_KEY, ReplicaSubjects, certificate_digest
from tests.support.auth_support import write_mtls_auth_files
from tests.support.consumer_support import Env, environment
from tests.support.gateway_support import (
    Gateway,
    SseReader,
    mtls_replicas,
    replica_pair,
)
from tests.support.tls_support import make_pki


@pytest.fixture
async def pair(env: Env) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with replica_pair(env) as (owner, other):
        yield owner, other


async def test_either_replica_serves_the_consumer(pair: tuple[Gateway, Gateway]) -> None:
    owner, other = pair
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        created = await b.post("/v1/consumers/f-g", json={"topics": ["solo"], "startPosition": "earliest"})
        # Created through ``other``: that replica owns it, and says so in baseUrl.
        assert created.status_code == 201
        instance, base_url = created.json()["instanceId"], created.json()["baseUrl"]
        assert base_url.startswith(other.url)
        assert other.consumers.instance_count == 1 and owner.consumers.instance_count == 0
        path = f"/v1/consumers/f-g/instances/{instance}"

        await a.post("/v1/topics/solo/messages", json={"messages": [{"value": f"v{i}"} for i in range(5)]})
        polled = await a.get(f"{path}/messages", params={"format": "utf8", "timeout_ms": 2000})
        assert polled.status_code == 200 and polled.headers["content-type"] == "application/json"
        messages: list[dict[str, Any]] = polled.json()["messages"]
        assert [m["value"] for m in messages] == [f"v{i}" for i in range(5)]

        committed = await a.post(f"{path}/commits", json={"tokens": [m["token"] for m in messages[:2]]})
        assert committed.json() == {
            "committed": 2,
            "rolledBack": 0,
            "stale": [],
            "pending": 3,
            "awaitingBatch": 2,
        }
        described = await a.get(path)
        assert described.json()["pendingMessages"] == 3 and described.json()["baseUrl"] == base_url
        bad = await a.post(f"{path}/commits", json={"tokens": ["x"]})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "tokens[0]"
        malformed = await a.get(f"{path[:-2]}/messages")
        assert malformed.status_code == 404

        async with a.stream("GET", f"{path}/stream", params={"format": "utf8"}) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            reader = SseReader(stream)
            resent = await reader.read(3)
            assert [json.loads(e.data)["value"] for e in resent] == ["v2", "v3", "v4"]
            await b.post(f"{path}/commits", json={})
            await a.post("/v1/topics/solo/messages", json={"messages": [{"value": "live"}]})
            (live,) = await reader.read(1)
            assert json.loads(live.data)["value"] == "live"

        assert (await a.delete(path)).status_code == 204
        gone = await a.get(f"{path}/messages")
        assert gone.status_code == 410 and gone.json()["error"]["code"] == "gone"


async def test_a_header_that_cannot_cross_the_hop_is_refused_on_either_replica(
    pair: tuple[Gateway, Gateway],
) -> None:
    """A non-ASCII Last-Event-ID (or another passed header) gets the same 400 naming the header from the
    owner and from the replica that would forward it (issue #23 row 3)."""
    owner, other = pair
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        created = await b.post("/v1/consumers/h-g", json={"topics": ["solo"]})
        path = f"/v1/consumers/h-g/instances/{created.json()['instanceId']}"
        answers = []
        for client in (a, b):
            for name, value in (("Last-Event-ID", "caf\u00e9".encode()), ("X-Request-ID", b"r\xe9q")):
                got = await client.get(f"{path}/stream", headers={name: value})
                answers.append(got)
                assert got.status_code == 400, got.text
                assert got.json()["error"]["field"] == name
                assert name in got.json()["error"]["message"]
            got = await client.get(
                f"{path}/messages", headers={"X-TubeMQ-Anything": "\u00ff".encode("latin-1")}
            )
            assert got.status_code == 400 and got.json()["error"]["field"] == "x-tubemq-anything"
        assert answers[0].json()["error"]["message"] == answers[2].json()["error"]["message"]
        # an ASCII value still crosses: the owner answers the poll
        ok = await a.get(f"{path}/messages", params={"timeout_ms": 0}, headers={"X-Request-ID": "r-1"})
        assert ok.status_code == 200, ok.text


async def test_a_stopped_owner_yields_410(pair: tuple[Gateway, Gateway]) -> None:
    owner, other = pair
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        created = await a.post("/v1/consumers/f-dead", json={"topics": ["solo"]})
        instance = created.json()["instanceId"]
        path = f"/v1/consumers/f-dead/instances/{instance}"
        assert (await b.get(f"{path}/messages", params={"timeout_ms": 0})).status_code == 200
        await owner.stop()
        for answer in [
            await b.get(f"{path}/messages", params={"timeout_ms": 0}),
            await b.post(f"{path}/commits", json={}),
            await b.get(f"{path}/stream"),
            await b.delete(path),
        ]:
            assert answer.status_code == 410, answer.text
            error = answer.json()["error"]
            assert error["code"] == "gone" and owner.url in error["message"]
            assert "POST /v1/consumers/f-dead" in error["message"]


async def test_a_forwarded_request_is_not_forwarded_again(pair: tuple[Gateway, Gateway]) -> None:
    owner, other = pair
    async with httpx.AsyncClient(base_url=owner.url) as a, httpx.AsyncClient(base_url=other.url) as b:
        instance = (await a.post("/v1/consumers/f-loop", json={"topics": ["solo"]})).json()["instanceId"]
        path = f"/v1/consumers/f-loop/instances/{instance}"
        looped = await b.get(f"{path}/messages", headers={FORWARDED_HEADER: "http://127.0.0.1:1"})
        assert looped.status_code == 410
        assert (await b.get(f"{path}/messages", params={"timeout_ms": 0})).status_code == 200


async def test_a_client_certificate_principal_reaches_its_instance_through_either_replica(
    env: Env, tmp_path: Path
) -> None:
    """mTLS listeners (client certificates required, the replicas sharing theirs): a request of a caller
    authenticated by its certificate, forwarded to the owner, carries the verified subject signed with the
    replicas' secret, and the owner serves it as that caller (it saw the replicas' own certificate and
    answered 403 for mtls:CN=replica). A subject signed with another secret is refused (401)."""
    pki = make_pki(tmp_path / "pki")
    subject = pki.client.subject.rfc4514_string()
    files = write_mtls_auth_files(tmp_path, subject)
    async with (
        mtls_replicas(env, pki, files) as (owner, other),
        httpx.AsyncClient(base_url=owner.url, verify=pki.client_context(pki.client), timeout=10) as at_owner,
        httpx.AsyncClient(base_url=other.url, verify=pki.client_context(pki.client), timeout=10) as at_other,
    ):
        created = await at_owner.post(
            "/v1/consumers/mg", json={"topics": ["demo"], "startPosition": "earliest"}
        )
        assert created.status_code == 201, created.text
        base = f"/v1/consumers/mg/instances/{created.json()['instanceId']}"
        published = await at_other.post("/v1/topics/demo/messages", json={"messages": [{"value": "m"}]})
        assert published.status_code == 200, published.text
        polled = await at_other.get(f"{base}/messages", params={"timeout_ms": 5000, "format": "utf8"})
        assert polled.status_code == 200, polled.text
        assert "m" in [m["value"] for m in polled.json()["messages"]]
        assert (await at_other.post(f"{base}/commits", json={})).status_code == 200

        async with httpx.AsyncClient(
            base_url=owner.url, verify=pki.client_context(pki.dual), timeout=10
        ) as as_replica:
            owner_url = owner.consumers.advertised_url
            forger = ReplicaSubjects(
                b"not-the-replicas-secret-0123456789",
                other.url,
                certificate_digest(pki.dual.cert.read_text()),
            )
            forged = forger.sign(subject, audience=owner_url, request=f"GET {base}") or ""
            headers = {FORWARDED_HEADER: other.url, REPLICA_CERT_KEY: forged}
            refused = await as_replica.get(base, headers=headers)
            assert refused.status_code == 401 and REPLICA_CERT_KEY in refused.text, refused.text
            relaying = other.runtime.replica_subjects
            assert relaying is not None
            signed = relaying.sign(subject, audience=owner_url, request=f"GET {base}") or ""
            served = await as_replica.get(
                base, headers={FORWARDED_HEADER: other.url, REPLICA_CERT_KEY: signed}
            )
            assert served.status_code == 200, served.text
        assert (await at_other.delete(base)).status_code == 204
        assert owner.runtime.consumer_service().instance_count == 0


async def test_a_forwarded_nack_and_seek_wait_for_the_owners_broker_calls() -> None:
    """A nack republishes to the retry topic (up to producer.send_timeout), a seek waits for batches out
    and a broker call (each up to the consumer's rpc_timeout), a delete commits, keeps the committed heads
    and leaves the group (a broker call each): forwarded, they may take longer than
    consumers.forward_timeout, which bounds only reaching the owner. The forwarding replica answered 503
    "did not answer in time" while the owner went on and settled the nack: the client was told to retry an
    operation that had happened. (The owner's operations are slowed here by a wrapper on its service.)"""
    async with (
        environment("solo:1,duo:1") as env,
        replica_pair(env, forward_timeout=0.3) as (owner, other),
        httpx.AsyncClient(base_url=owner.url, timeout=10) as at_owner,
        httpx.AsyncClient(base_url=other.url, timeout=10) as at_other,
    ):
        body = {"topics": ["solo"], "startPosition": "earliest", "retryTopic": "duo"}
        created = await at_owner.post("/v1/consumers/slow-g", json=body)
        assert created.status_code == 201, created.text
        path = f"/v1/consumers/slow-g/instances/{created.json()['instanceId']}"
        await at_other.post("/v1/topics/solo/messages", json={"messages": [{"value": "s"}]})
        polled = await at_other.get(f"{path}/messages", params={"timeout_ms": 5000})
        (message,) = polled.json()["messages"]

        service = owner.consumers
        for name in ("nack", "seek", "delete"):
            original = getattr(service, name)

            async def slowed(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                await asyncio.sleep(1.0)  # a slow broker: longer than forward_timeout
                return await _original(*args, **kwargs)

            setattr(service, name, slowed)
        nacked = await at_other.post(f"{path}/nacks", json={"tokens": [message["token"]]})
        assert nacked.status_code == 200, nacked.text
        assert nacked.json()["retried"] == 1
        seeked = await at_other.post(f"{path}/seek", json={"position": "earliest"})
        assert seeked.status_code == 200, seeked.text
        assert (await at_other.delete(path)).status_code == 204
