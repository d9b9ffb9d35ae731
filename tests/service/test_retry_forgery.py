"""A retry copy cannot be forged: a principal allowed to publish on a retry topic another group reads writes
messages with that group as stream id and hand-written ``gateway.*`` attributes (another topic, partition
and message id; a due time far ahead; a made-up signature). ``serve --workers 2`` with API keys and rules,
the instance on one worker and the victim's calls through the other: the victim is never handed them, its
retry partition is not held by them (its own nack comes back), and they are counted as set aside."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.service.retry_signature import OPEN_MODE_SECRET, SIGNATURE, RetrySigner
from tests.support.auth_support import AuthFiles
from tests.support.workers_support import WorkerGateway, keyed_workers, poll_as, samples

GROUP = "victims"
#: carol (role narrow) may publish on other_* topics only: the retry topic, never the source or "secret"
RETRY = "other_retry"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    topics = f"vsrc:1,{RETRY}:1,secret:1"
    secret = "forgery-test-secret-" + "x" * 20
    tmp = tmp_path_factory.mktemp("forge")
    with keyed_workers(
        tmp, 2, "--embedded-topics", topics, TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET=secret
    ) as pair:
        yield pair


def _forged(**attributes: str) -> dict[str, Any]:
    wall_ms = time.time_ns() // 1_000_000
    base = {
        "gateway.group": GROUP,
        "gateway.topic": "secret",
        "gateway.partitionKey": "1:secret:0",
        "gateway.offset": "0",
        "gateway.messageId": "4242",
        "gateway.attempt": "2",
        "gateway.due": str(wall_ms),
    }
    return {"value": "forged", "streamId": GROUP, "attributes": {**base, **attributes}}


async def _victim(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    """An instance of the victims' group reading vsrc with the retry topic; its base path."""
    created = await client.post(
        f"/v1/consumers/{GROUP}",
        json={"topics": ["vsrc"], "retryTopic": RETRY, "startPosition": "earliest"},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    return f"/v1/consumers/{GROUP}/instances/{created.json()['instanceId']}"


async def test_forged_retry_copies_are_set_aside_and_hold_nothing(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gw, files = served
    alice, carol = files.headers("alice"), files.headers("carol")
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        published = await own.post(
            "/v1/topics/vsrc/messages", json={"messages": [{"value": "v1"}]}, headers=alice
        )
        assert published.status_code == 200, published.text
        base = await _victim(own, alice)

        # carol may not publish on the source or on "secret", but may on the retry topic
        refused = await other.post(
            "/v1/topics/secret/messages", json={"messages": [{"value": "x"}]}, headers=carol
        )
        assert refused.status_code == 403, refused.text
        forged = [
            _forged(),  # delivered at once as topic "secret", message 4242 on the old main
            _forged(**{"gateway.due": str(time.time_ns() // 1_000_000 + 10**12)}),  # held the partition
            _forged(**{"gateway.signature": "A" * 43}),  # a signature made up
        ]
        answer = await other.post(f"/v1/topics/{RETRY}/messages", json={"messages": forged}, headers=carol)
        assert answer.status_code == 200 and all("error" not in r for r in answer.json()["results"]), (
            answer.text
        )

        got: list[dict[str, Any]] = []
        async with asyncio.timeout(20):
            while not got:
                got = await poll_as(other, base, alice)
        assert [(m["topic"], m["value"], m["deliveryAttempt"]) for m in got] == [("vsrc", "v1", 1)], got
        nacked = await other.post(
            f"{base}/nacks", json={"tokens": [got[0]["token"]], "delayMs": 0}, headers=alice
        )
        assert nacked.status_code == 200 and nacked.json()["retried"] == 1, nacked.text

        back: list[dict[str, Any]] = []
        async with asyncio.timeout(20):
            while not back:
                back = await poll_as(other, base, alice)
        assert [(m["topic"], m["value"], m["deliveryAttempt"]) for m in back] == [("vsrc", "v1", 2)], back
        answer = await other.post(f"{base}/commits", json={}, headers=alice)
        assert answer.status_code == 200, answer.text
        await asyncio.sleep(1.0)
        assert await poll_as(other, base, alice) == []  # the forged copies never come

        text = (await own.get("/metrics", headers=files.headers("root"))).text
        set_aside = sum(
            value
            for labels, value in samples(text, "tubemq_gateway_retry_copies_set_aside_total")
            if labels.get("group") == GROUP
        )
        assert set_aside == 3, text


@pytest.fixture(scope="module")
def unset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    """The same without consumers.id_secret: the supervisor makes one for its workers."""
    with keyed_workers(
        tmp_path_factory.mktemp("forge-unset"), 2, "--embedded-topics", f"vsrc:1,{RETRY}:1"
    ) as pair:
        yield pair


async def test_without_a_secret_set_authentication_on_the_built_in_key_signs_nothing(
    unset: tuple[WorkerGateway, AuthFiles],
) -> None:
    gw, files = unset
    alice, carol = files.headers("alice"), files.headers("carol")
    forged = _forged()
    forged["attributes"][SIGNATURE] = RetrySigner([OPEN_MODE_SECRET.encode()]).sign(
        forged["attributes"], b"forged"
    )
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        base = await _victim(own, alice)
        answer = await other.post(f"/v1/topics/{RETRY}/messages", json={"messages": [forged]}, headers=carol)
        assert answer.status_code == 200 and all("error" not in r for r in answer.json()["results"]), (
            answer.text
        )
        async with asyncio.timeout(20):
            while True:
                text = (await own.get("/metrics", headers=files.headers("root"))).text
                counted = samples(text, "tubemq_gateway_retry_copies_set_aside_total")
                if any(labels.get("group") == GROUP and value == 1 for labels, value in counted):
                    break
                assert await poll_as(other, base, alice) == []  # never delivered
