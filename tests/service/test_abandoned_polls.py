"""A long poll whose client gives up is cancelled at once: in the owning process, across the hop to a sibling
worker (``serve --workers 2``) and across the relay to another replica, for REST and gRPC. The next poll is
served at once and gets the message published after the abandoned one (which would otherwise have taken it
for a client that is no longer there). Real processes and sockets on 127.0.0.1 and the workers' private unix
sockets."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.consumer_support import Env
from tests.support.gateway_support import replica_pair
from tests.support.workers_support import WorkerGateway, owner_worker, samples, start_workers

#: what an abandoned poll asks to wait: far longer than the test waits for anything
LONG_MS = 25_000


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGateway]:
    gw = start_workers(tmp_path_factory.mktemp("ab"), 2, "--embedded-topics", "ab0:1,ab1:1,ab2:1,ab3:1")
    try:
        yield gw
    finally:
        gw.stop()


async def _create(client: httpx.AsyncClient, group: str, topic: str) -> str:
    created = await client.post(f"/v1/consumers/{group}", json={"topics": [topic], "startPosition": "latest"})
    assert created.status_code == 201, created.text
    path = f"/v1/consumers/{group}/instances/{created.json()['instanceId']}"
    # the first poll waits for the partition assignment
    assert (await client.get(f"{path}/messages", params={"timeout_ms": 0})).status_code == 200
    return path


async def _abandon_then_poll(
    poller: httpx.AsyncClient, publisher: httpx.AsyncClient, path: str, topic: str
) -> httpx.Response:
    """Give up on a long poll after 1 s (the client closes its connection), publish a message, poll again."""
    with pytest.raises(httpx.ReadTimeout):
        await poller.get(f"{path}/messages", params={"timeout_ms": LONG_MS, "format": "utf8"}, timeout=1.0)
    published = await publisher.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": "after"}]})
    assert published.status_code == 200, published.text
    return await poller.get(f"{path}/messages", params={"timeout_ms": 8000, "format": "utf8"}, timeout=15.0)


async def test_an_abandoned_poll_frees_the_instance_in_its_owner_and_across_the_worker_hop(
    workers: WorkerGateway,
) -> None:
    for topic, poll_through in (("ab0", 0), ("ab1", 1)):  # the owner itself, then through the hop
        async with workers.pinned(0) as owner, workers.pinned(poll_through) as poller:
            path = await _create(owner, f"g-{topic}", topic)
            assert owner_worker(path.rsplit("/", 1)[1]) == 0
            again = await _abandon_then_poll(poller, owner, path, topic)
            assert again.status_code == 200, again.text
            assert [m["value"] for m in again.json()["messages"]] == ["after"]
    # gRPC Poll through the hop: grpc cancels the call's handler, and the relayed call with it
    async with workers.pinned(0) as owner:
        path = await _create(owner, "g-ab2", "ab2")
    group, instance = "g-ab2", path.rsplit("/", 1)[1]
    async with grpc.aio.insecure_channel(f"unix:{workers.socket_dir / 'g1.sock'}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as given_up:
            await stub.Poll(
                pb.PollRequest(group=group, instance_id=instance, timeout_ms=LONG_MS), timeout=1.0
            )
        assert given_up.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        async with workers.pinned(1) as client:
            await client.post("/v1/topics/ab2/messages", json={"messages": [{"value": "after"}]})
        again = await stub.Poll(
            pb.PollRequest(group=group, instance_id=instance, timeout_ms=8000), timeout=15.0
        )
    assert [m.value for m in again.messages] == [b"after"]
    async with workers.pinned(0) as client:
        text = (await client.get("/metrics")).text
    gone = [
        v
        for labels, v in samples(text, "tubemq_gateway_http_requests_total")
        if labels.get("code") == "499" and "messages" in labels.get("route", "")
    ]
    assert sum(gone) >= 3, gone  # the owner's two abandoned polls and the hop's


async def test_an_abandoned_rest_poll_frees_the_instance_across_the_replica_relay(env: Env) -> None:
    async with (
        replica_pair(env) as (owner, other),
        httpx.AsyncClient(base_url=owner.url) as a,
        httpx.AsyncClient(base_url=other.url) as b,
    ):
        path = await _create(a, "g-relay", "solo")
        again = await _abandon_then_poll(b, a, path, "solo")
        assert again.status_code == 200, again.text
        assert [m["value"] for m in again.json()["messages"]] == ["after"]
