"""Publishing with an ``Idempotency-Key`` on ``serve --workers 2`` with API keys (real processes and sockets,
the embedded cluster): a retry on the other worker gets the first answer, marked as a replay, and stores
nothing; the same key with another body is 422, a malformed key 400, a key still in flight 409 with
Retry-After; keys are the principal's own; a reservation whose holder died frees itself after the lease;
a store that cannot be written answers keyed publishes 503 and leaves unkeyed ones alone. gRPC Publish
takes the key in its metadata with the same steps and statuses; a PublishStream batch in its
idempotency_key, sharing the key with Publish."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.service.idempotency import fingerprint
from gateway.service.idempotency_store import Reserved, StoredKeys
from tests.support.auth_support import AuthFiles
from tests.support.workers_support import WorkerGateway, keyed_workers

TOPIC = "/v1/topics/demo/messages"
LEASE = 3.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    tmp: Path = tmp_path_factory.mktemp("idemworkers")
    with keyed_workers(
        tmp,
        2,
        TUBEMQ_GATEWAY_IDEMPOTENCY__LEASE_SECONDS=str(LEASE),
        TUBEMQ_GATEWAY_IDEMPOTENCY__STORE_TIMEOUT="0.5",
    ) as pair:
        yield pair


def _batch(value: str, partition: int) -> dict[str, Any]:
    return {"messages": [{"value": value, "partition": partition}]}


def _keyed(files: AuthFiles, principal: str, key: str) -> dict[str, str]:
    return {**files.headers(principal), "Idempotency-Key": key}


async def _offset(client: httpx.AsyncClient, files: AuthFiles, partition: int) -> int:
    """The offset an unkeyed message to ``partition`` is stored at (right after the last message stored)."""
    answer = await client.post(TOPIC, json=_batch("probe", partition), headers=files.headers("alice"))
    assert answer.status_code == 200, answer.text
    offset: int = answer.json()["results"][0]["offset"]
    return offset


async def test_a_retry_on_the_other_worker_gets_the_first_answer_and_stores_nothing(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    async with gateway.pinned(0) as first, gateway.pinned(1) as second, gateway.shared() as shared:
        before = await _offset(first, files, 0)
        sent = await first.post(TOPIC, json=_batch("once", 0), headers=_keyed(files, "alice", "order-1"))
        assert sent.status_code == 200, sent.text
        assert "idempotent-replayed" not in sent.headers
        step = sent.json()["results"][0]["offset"] - before  # one message (in the partition's offset units)
        assert step > 0
        for client in (second, shared, first):
            again = await client.post(
                TOPIC, json=_batch("once", 0), headers=_keyed(files, "alice", "order-1")
            )
            assert again.status_code == 200, again.text
            assert again.headers["idempotent-replayed"] == "true"
            assert again.json() == sent.json()
        assert await _offset(second, files, 0) == before + 2 * step  # the probe right after the one copy
        # the same key of another principal is another key
        bobs = await second.post(TOPIC, json=_batch("once", 0), headers=_keyed(files, "bob", "order-1"))
        assert bobs.status_code == 200 and "idempotent-replayed" not in bobs.headers
        assert bobs.json()["results"][0]["offset"] == before + 3 * step


async def test_raw_bodies_replay_and_their_option_headers_are_part_of_the_request(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    raw = {**_keyed(files, "alice", '"raw-1"'), "content-type": "application/octet-stream"}
    async with gateway.pinned(0) as first, gateway.pinned(1) as second:
        sent = await first.post(TOPIC, content=b"raw", headers={**raw, "X-TubeMQ-Partition": "1"})
        assert sent.status_code == 200, sent.text
        again = await second.post(TOPIC, content=b"raw", headers={**raw, "X-TubeMQ-Partition": "1"})
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        assert again.json() == sent.json()
        moved = await second.post(TOPIC, content=b"raw", headers={**raw, "X-TubeMQ-Partition": "2"})
        assert moved.status_code == 422, moved.text
        assert moved.json()["error"]["field"] == "Idempotency-Key"


async def test_another_body_is_422_and_a_malformed_key_400(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    async with gateway.pinned(0) as first, gateway.pinned(1) as second:
        sent = await first.post(TOPIC, json=_batch("a", 0), headers=_keyed(files, "alice", "body-1"))
        assert sent.status_code == 200, sent.text
        other = await second.post(TOPIC, json=_batch("b", 0), headers=_keyed(files, "alice", "body-1"))
        assert other.status_code == 422, other.text
        assert other.json()["error"] == {
            "code": "unprocessable",
            "message": "Idempotency-Key was used for a request with other messages or options; use a new "
            "key for a new request",
            "field": "Idempotency-Key",
        }
        for bad in ("", "with space", "x" * 256, '"a"b"', "back\\slash"):
            refused = await first.post(TOPIC, json=_batch("a", 0), headers=_keyed(files, "alice", bad))
            assert refused.status_code == 400, (bad, refused.text)
            assert refused.json()["error"]["field"] == "Idempotency-Key"
        twice = [*files.headers("alice").items(), ("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
        refused = await first.post(TOPIC, json=_batch("a", 0), headers=twice)
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "Idempotency-Key"


async def test_concurrent_requests_with_one_key_publish_once(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    async with gateway.pinned(0) as first, gateway.pinned(1) as second:
        before = await _offset(first, files, 2)
        headers = _keyed(files, "alice", "together-1")
        answers = await asyncio.gather(
            *(
                client.post(TOPIC, json=_batch("together", 2), headers=headers)
                for client in (first, second) * 4
            )
        )
        statuses = [a.status_code for a in answers]
        assert set(statuses) <= {200, 409} and 200 in statuses, statuses
        stored = {a.text for a in answers if a.status_code == 200}
        assert len(stored) == 1, stored
        for answer in answers:
            if answer.status_code == 409:
                assert int(answer.headers["retry-after"]) >= 1
                assert answer.json()["error"]["field"] == "Idempotency-Key"
        one = next(a for a in answers if a.status_code == 200).json()["results"][0]["offset"] - before
        assert await _offset(second, files, 2) == before + 2 * one


async def test_a_reservation_whose_holder_died_expires_and_the_retry_publishes(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    body = _batch("orphan", 3)
    encoded = httpx.Request("POST", "http://x", json=body).content
    # the reservation a worker killed mid-publish leaves behind, in the replica's store
    store = StoredKeys(
        gateway.socket_dir / "idempotency.sqlite3",
        max_keys=100,
        max_principal_bytes=1 << 20,
        max_bytes=1 << 24,
        timeout=5,
    )
    try:
        held = store.reserve("api_key:alice", "demo", "orphan-1", fingerprint(["json", encoded]), lease=LEASE)
        assert isinstance(held, Reserved)
    finally:
        store.close()
    taken = time.monotonic()
    async with gateway.pinned(1) as client:
        busy = await client.post(
            TOPIC,
            content=encoded,
            headers={**_keyed(files, "alice", "orphan-1"), "content-type": "application/json"},
        )
        assert busy.status_code == 409, busy.text
        assert 1 <= int(busy.headers["retry-after"]) <= LEASE
        await asyncio.sleep(max(0.0, LEASE - (time.monotonic() - taken)) + 0.2)
        retried = await client.post(
            TOPIC,
            content=encoded,
            headers={**_keyed(files, "alice", "orphan-1"), "content-type": "application/json"},
        )
        assert retried.status_code == 200, retried.text
        assert "idempotent-replayed" not in retried.headers


async def test_a_store_that_cannot_be_written_answers_keyed_publishes_503_and_not_unkeyed(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    locker = sqlite3.connect(gateway.socket_dir / "idempotency.sqlite3", isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")  # the write lock, held past idempotency.store_timeout
        async with gateway.pinned(0) as client:
            keyed = await client.post(
                TOPIC, json=_batch("locked", 0), headers=_keyed(files, "alice", "lock-1")
            )
            assert keyed.status_code == 503, keyed.text
            assert keyed.headers["retry-after"] == "1"
            assert "idempotency store" in keyed.json()["error"]["message"]
            unkeyed = await client.post(TOPIC, json=_batch("locked", 0), headers=files.headers("alice"))
            assert unkeyed.status_code == 200, unkeyed.text
        locker.execute("ROLLBACK")
        async with gateway.pinned(0) as client:
            keyed = await client.post(
                TOPIC, json=_batch("locked", 0), headers=_keyed(files, "alice", "lock-1")
            )
            assert keyed.status_code == 200, keyed.text
    finally:
        locker.close()


async def test_grpc_publish_replays_on_either_worker_and_refuses_what_rest_does(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    request = pb.PublishRequest(
        topic="demo", messages=[pb.Message(value=b"g", partition=1, attributes={"a": "1"})]
    )

    def keyed(key: str, principal: str = "alice") -> tuple[tuple[str, str], ...]:
        return (*files.metadata(principal), ("idempotency-key", key))

    async with gateway.pinned(0) as rest:
        before = await _offset(rest, files, 1)
    answers = []
    for _ in range(3):  # each channel a new connection: the kernel spreads them over the workers
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
            call = gateway_pb2_grpc.GatewayServiceStub(channel).Publish(
                request, metadata=keyed("grpc-1"), timeout=10
            )
            answers.append((await call, dict(await call.trailing_metadata() or ())))
    assert all(answer == answers[0][0] for answer, _ in answers)
    assert "idempotent-replayed" not in answers[0][1]
    assert [trailers.get("idempotent-replayed") for _, trailers in answers[1:]] == ["true", "true"]
    async with gateway.pinned(1) as rest:
        step = answers[0][0].results[0].stored.offset - before
        assert await _offset(rest, files, 1) == before + 2 * step
        over_rest = await rest.post(TOPIC, json=_batch("g", 1), headers=_keyed(files, "alice", "grpc-1"))
        assert over_rest.status_code == 422, over_rest.text
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        other = pb.PublishRequest(topic="demo", messages=[pb.Message(value=b"h", partition=1)])
        for sent, metadata, code in (
            (other, keyed("grpc-1"), grpc.StatusCode.FAILED_PRECONDITION),
            (request, keyed("bad key"), grpc.StatusCode.INVALID_ARGUMENT),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Publish(sent, metadata=metadata, timeout=10)
            assert refused.value.code() == code, refused.value.details()
            assert "idempotency-key" in (refused.value.details() or "")

        async def batches() -> Any:
            yield pb.PublishStreamRequest(topic="demo", messages=[pb.Message(value=b"s")])

        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in stub.PublishStream(batches(), metadata=keyed("stream-1"), timeout=10):
                pass
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Publish only" in (refused.value.details() or "")


async def test_a_stream_batch_with_a_key_is_acked_from_the_first_answer_in_any_stream(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    messages = [pb.Message(value=b"s0", partition=2), pb.Message(value=b"s1", partition=2)]

    async def stream(batches: list[pb.PublishStreamRequest]) -> list[pb.PublishAck]:
        async def requests() -> Any:
            for batch in batches:
                yield batch

        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            call = stub.PublishStream(requests(), metadata=files.metadata("alice"), timeout=20)
            return [ack async for response in call for ack in response.acks]

    async with gateway.pinned(0) as rest:
        before = await _offset(rest, files, 2)
    plain = pb.PublishStreamRequest(topic="demo", messages=[pb.Message(value=b"p", partition=2)])
    keyed = pb.PublishStreamRequest(messages=messages, idempotency_key="stream-1")
    first = await stream([plain, keyed])
    assert [a.sequence for a in first] == [0, 1, 2] and not any(a.replayed for a in first)
    # another stream: the same batch at another place in it, and a batch reusing the key with other messages
    reused = pb.PublishStreamRequest(
        messages=[pb.Message(value=b"x", partition=2)], idempotency_key="stream-1"
    )
    again = await stream(
        [pb.PublishStreamRequest(topic="demo", messages=messages, idempotency_key="stream-1"), reused]
    )
    assert [a.sequence for a in again] == [0, 1, 2]
    assert [a.replayed for a in again[:2]] == [True, True]
    assert [a.stored for a in again[:2]] == [a.stored for a in first[1:]]
    assert again[2].HasField("error") and again[2].error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "idempotencyKey" in again[2].error.message
    # Publish with the stream batch's key and messages gets the same receipts
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
        call = gateway_pb2_grpc.GatewayServiceStub(channel).Publish(
            pb.PublishRequest(topic="demo", messages=messages),
            metadata=(*files.metadata("alice"), ("idempotency-key", "stream-1")),
            timeout=10,
        )
        unary = await call
        assert dict(await call.trailing_metadata() or ()).get("idempotent-replayed") == "true"
    assert [r.stored for r in unary.results] == [a.stored for a in first[1:]]
    async with gateway.pinned(1) as rest:
        step = first[0].stored.offset - before
        assert await _offset(rest, files, 2) == before + 4 * step  # plain, s0, s1: stored once each
