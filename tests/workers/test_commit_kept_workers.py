"""``serve --workers 2``: a commit of part of a batch made through one worker holds when the instance is
deleted through the other (the request crosses the worker hop to the owner, which sets the group's offset
after the committed messages before it leaves). Real processes and sockets (127.0.0.1 and the workers'
unix sockets), embedded cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.workers_support import WorkerGateway, owner_worker, start_workers


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGateway]:
    gateway = start_workers(tmp_path_factory.mktemp("kw"), 2, "--embedded-topics", "kept:1")
    try:
        yield gateway
    finally:
        gateway.stop()


async def test_delete_through_the_other_worker_keeps_the_committed_head(gw: WorkerGateway) -> None:
    sent = [f"k{i}" for i in range(12)]
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        published = await own.post(
            "/v1/topics/kept/messages", json={"messages": [{"value": v} for v in sent]}
        )
        assert published.status_code == 200, published.text
        spec = {"topics": ["kept"], "startPosition": "earliest"}
        created = await own.post("/v1/consumers/gk", json=spec)
        assert created.status_code == 201, created.text
        instance = created.json()["instanceId"]
        assert owner_worker(instance) == 0
        path = f"/v1/consumers/gk/instances/{instance}"
        polled = await other.get(
            f"{path}/messages", params={"format": "utf8", "timeout_ms": 5000, "max_messages": 5}
        )
        assert polled.status_code == 200, polled.text
        got: list[dict[str, Any]] = polled.json()["messages"]
        assert [m["value"] for m in got] == sent[:5]
        committed = await other.post(f"{path}/commits", json={"tokens": [m["token"] for m in got]})
        assert committed.json()["awaitingBatch"] == 5, committed.text
        assert (await other.delete(path)).status_code == 204

        created = await other.post("/v1/consumers/gk", json={"topics": ["kept"]})
        assert created.status_code == 201, created.text
        path = f"/v1/consumers/gk/instances/{created.json()['instanceId']}"
        polled = await own.get(f"{path}/messages", params={"format": "utf8", "timeout_ms": 5000})
        again: list[dict[str, Any]] = polled.json()["messages"]
        assert [m["value"] for m in again] == sent[5:]
        assert {m["deliveryAttempt"] for m in again} == {1}
