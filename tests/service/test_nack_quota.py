"""A nack's retry publish is a publish: it is charged to the caller's publish rate, and an instance holds a
bounded number of retries not yet due. ``serve --workers 2`` with API keys, the instance on one worker and
the loop's calls through the other one: a principal limited to 20 messages per second that loops poll ->
nack (``delayMs`` 0) gets about its rate of retries and then 429 naming the limit, where it used to get
hundreds a second; long-delayed nacks stop at the instance's bound with a 429 saying what to do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.auth_support import AuthFiles
from tests.support.workers_support import WorkerGateway, keyed_workers, poll_as

RATE = 20
LOOP_SECONDS = 4.0
OUTSTANDING = 5
RETRY_OF = {"nsrc": "nretry", "lsrc": "lretry", "bsrc": "bretry", "gsrc": "gretry"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    with keyed_workers(
        tmp_path_factory.mktemp("nackq"),
        2,
        "--embedded-topics",
        "nsrc:1,nretry:1,lsrc:1,lretry:1,bsrc:1,bretry:1,gsrc:1,gretry:1",
        TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET="nack-quota-test-secret-" + "x" * 20,
        TUBEMQ_GATEWAY_RATE_LIMITS__PUBLISH_MESSAGES_PER_SECOND=str(RATE),
        TUBEMQ_GATEWAY_RATE_LIMITS__BURST_SECONDS="1",
        TUBEMQ_GATEWAY_CONSUMERS__MAX_RETRIES_OUTSTANDING=str(OUTSTANDING),
        # per worker half of it: 4000 bytes of publishing held at once
        TUBEMQ_GATEWAY_LIMITS__MAX_INFLIGHT_PUBLISH_BYTES="8000",
    ) as pair:
        yield pair


async def _instance(
    client: httpx.AsyncClient, headers: dict[str, str], group: str, topic: str, count: int, size: int = 8
) -> str:
    """Publish ``count`` messages of ``size`` characters to ``topic``, then create an instance of ``group``
    reading it from the start, with ``RETRY_OF[topic]`` as its retry topic; the instance's base path."""
    for i in range(count):  # one request each: a body of its own within the in-flight bytes
        value = f"{topic}-{i}-".ljust(size, "v")
        published = await client.post(
            f"/v1/topics/{topic}/messages", json={"messages": [{"value": value}]}, headers=headers
        )
        assert published.status_code == 200, published.text
    retry = RETRY_OF[topic]
    created = await client.post(
        f"/v1/consumers/{group}",
        json={"topics": [topic], "retryTopic": retry, "startPosition": "earliest"},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    return f"/v1/consumers/{group}/instances/{created.json()['instanceId']}"


async def test_a_poll_nack_loop_is_held_to_the_callers_publish_rate(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gw, files = served
    alice = files.headers("alice")
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        base = await _instance(own, alice, "loopers", "nsrc", 10)
        first = [
            m["token"] for m in await poll_as(other, base, alice, timeout_ms=300, max_messages=10)
        ]  # waits for the assignment
        await asyncio.sleep(1.1)  # the bucket is full again after the publish of the ten
        retried = 0
        refusals: list[httpx.Response] = []
        start = time.monotonic()
        while time.monotonic() - start < LOOP_SECONDS:
            tokens, first = (
                first
                or [m["token"] for m in await poll_as(other, base, alice, timeout_ms=300, max_messages=10)],
                [],
            )
            if not tokens:
                continue
            answer = await other.post(f"{base}/nacks", json={"tokens": tokens, "delayMs": 0}, headers=alice)
            if answer.status_code == 429:
                refusals.append(answer)
                # what it could not nack goes back as a whole: nothing is lost, and the loop goes on
                rolled = await other.post(
                    f"{base}/commits", json={"tokens": tokens, "consumed": False}, headers=alice
                )
                assert rolled.status_code == 200, rolled.text
                continue
            assert answer.status_code == 200, answer.text
            retried += answer.json()["retried"]
        elapsed = time.monotonic() - start
    print(f"{retried} retries in {elapsed:.1f} s, {len(refusals)} nacks refused")
    # the bucket (20) plus the rate over the loop; a worker learns its sibling's spending within 0.5 s
    assert retried <= RATE * (elapsed + 1) + RATE, (retried, elapsed)
    assert refusals, f"{retried} retries in {elapsed:.1f} s and no refusal"
    error = refusals[0].json()["error"]
    assert (
        error["code"] == "rate_limited" and "publish limit of 20 messages per second" in error["message"]
    ), error
    assert float(refusals[0].headers["retry-after"]) > 0


async def test_delayed_retries_outstanding_are_bounded_per_instance(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gw, files = served
    bob = files.headers("bob")
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        base = await _instance(own, bob, "holders", "lsrc", 8)
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 20
        while len(got) < 8 and time.monotonic() < deadline:
            got += await poll_as(other, base, bob, timeout_ms=300, max_messages=10)
        assert len(got) == 8
        nacked = await other.post(
            f"{base}/nacks",
            json={"tokens": [m["token"] for m in got[:OUTSTANDING]], "delayMs": 600_000},
            headers=bob,
        )
        assert nacked.status_code == 200 and nacked.json()["retried"] == OUTSTANDING, nacked.text
        refused = await other.post(
            f"{base}/nacks", json={"tokens": [got[OUTSTANDING]["token"]], "delayMs": 600_000}, headers=bob
        )
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert f"{OUTSTANDING} retries" in error["message"] and "commit" in error["message"], error
        # the refused message is still pending: a commit takes it
        committed = await other.post(
            f"{base}/commits", json={"tokens": [m["token"] for m in got[OUTSTANDING:]]}, headers=bob
        )
        assert committed.status_code == 200 and committed.json()["committed"] == 8 - OUTSTANDING, (
            committed.text
        )


async def test_a_nack_holds_its_values_in_the_in_flight_publish_bytes(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gw, files = served
    alice = files.headers("alice")
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        base = await _instance(own, alice, "heavies", "bsrc", 3, size=1500)
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got += await poll_as(other, base, alice, timeout_ms=300)
        assert len(got) == 3
        tokens = [m["token"] for m in got]
        # 4500 value bytes at once: more than the owner worker's 4000
        refused = await other.post(f"{base}/nacks", json={"tokens": tokens, "delayMs": 0}, headers=alice)
        assert refused.status_code == 503, refused.text
        assert "bytes of publishing" in refused.json()["error"]["message"], refused.text
        nacked = await other.post(f"{base}/nacks", json={"tokens": tokens[:2], "delayMs": 0}, headers=alice)
        assert nacked.status_code == 200 and nacked.json()["retried"] == 2, nacked.text


async def test_a_grpc_poll_nack_loop_is_held_to_the_callers_publish_rate(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gw, files = served
    async with gw.pinned(0) as own:
        base = await _instance(own, files.headers("root"), "grpcloopers", "gsrc", 10)
    key = {"group": "grpcloopers", "instance_id": base.rsplit("/", 1)[1]}
    metadata = files.metadata("root")
    async with grpc.aio.insecure_channel(f"unix:{gw.socket_dir / 'g1.sock'}") as channel:
        other = gateway_pb2_grpc.GatewayServiceStub(channel)
        await asyncio.sleep(1.1)  # the bucket is full again after the publish of the ten
        retried = 0
        refused: list[grpc.aio.AioRpcError] = []
        start = time.monotonic()
        while time.monotonic() - start < LOOP_SECONDS:
            polled = await other.Poll(
                pb.PollRequest(**key, timeout_ms=300, max_messages=10), metadata=metadata
            )
            tokens = [m.token for m in polled.messages]
            if not tokens:
                continue
            try:
                nacked = await other.Nack(pb.NackRequest(**key, tokens=tokens, delay_ms=0), metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                refused.append(exc)
                commit = pb.CommitRequest(**key, tokens=tokens, rollback=True)
                await other.Commit(commit, metadata=metadata)
                continue
            retried += nacked.retried
        elapsed = time.monotonic() - start
    print(f"gRPC: {retried} retries in {elapsed:.1f} s, {len(refused)} nacks refused")
    assert retried <= RATE * (elapsed + 1) + RATE, (retried, elapsed)
    assert refused and "publish limit of 20 messages per second" in (refused[0].details() or "")
