"""The lag endpoint with ``serve --workers 2`` and API keys (real processes, the embedded cluster): a group
whose only instance is on the other worker answers 200 on either worker, never 404 (the master lists its
consumer); a caller past its rate of new readings is refused 429 over REST and RESOURCE_EXHAUSTED over gRPC
on the worker it reached, and another principal on that worker is not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.auth_support import AuthFiles
from tests.support.workers_support import WorkerGateway, keyed_workers, owner_worker


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    tmp: Path = tmp_path_factory.mktemp("lagworkers")
    with keyed_workers(tmp, 2, TUBEMQ_GATEWAY_TUBEMQ__GROUP_LAG_READS_PER_SECOND="2") as pair:
        yield pair


async def test_a_group_held_on_the_other_worker_answers_on_both(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    alice = files.headers("alice")
    async with gateway.pinned(0) as first, gateway.pinned(1) as second:
        created = await first.post("/v1/consumers/wlag-held", json={"topics": ["demo"]}, headers=alice)
        assert created.status_code == 201, created.text
        assert owner_worker(created.json()["instanceId"]) == 0
        for client in (first, second):  # nothing fetched yet: no broker holds an offset of the group
            answer = await client.get("/v1/consumers/wlag-held/lag", headers=alice)
            assert answer.status_code == 200, answer.text
            assert answer.json()["source"] == "gateway" and answer.json()["consumers"] == 1
        unknown = await second.get("/v1/consumers/wlag-nobody/lag", headers=alice)
        assert unknown.status_code == 404 and unknown.json()["error"]["field"] == "group"


async def test_a_caller_past_its_rate_of_readings_is_refused_and_nobody_else(
    served: tuple[WorkerGateway, AuthFiles],
) -> None:
    gateway, files = served
    async with gateway.pinned(1) as client:
        statuses = [
            (await client.get(f"/v1/consumers/wlag-new{i}/lag", headers=files.headers("alice"))).status_code
            for i in range(6)
        ]
        assert 429 in statuses and set(statuses) <= {404, 429}, statuses
        other = await client.get("/v1/consumers/wlag-bobs/lag", headers=files.headers("bob"))
        assert other.status_code == 404, other.text
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        codes = []
        for i in range(6):
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.GetGroupLag(
                    pb.GetGroupLagRequest(group=f"other_grpc{i}"),
                    metadata=files.metadata("carol"),
                    timeout=10,
                )
            codes.append(failed.value.code())
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes, codes
