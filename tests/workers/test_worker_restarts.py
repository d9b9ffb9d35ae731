"""A crash-looping worker is started again with a growing backoff while its siblings keep serving; the
replica stops only when every worker fails (or one passes ``supervisor.max_restarts``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.workers.restarts import GiveUp, Restart, RestartPolicy
from tests.support.waiting import ManualClock
from tests.support.workers_support import WorkerGateway, start_workers

FAST_RESTARTS = {"TUBEMQ_GATEWAY_SUPERVISOR__RESTART_BACKOFF": "0.5"}


def test_policy_backs_off_and_gives_up_only_when_every_worker_fails() -> None:
    clock = ManualClock()
    policy = RestartPolicy(3, 100.0, backoff=1.0, backoff_max=5.0, clock=clock)
    for index in range(3):
        policy.started(index)
    clock.advance(1.0)
    delays = []
    for _ in range(5):  # worker 0 crash-loops
        decision = policy.exited(0)
        assert isinstance(decision, Restart)
        delays.append(decision.delay)
        clock.advance(decision.delay)
        policy.started(0)
        clock.advance(0.5)
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy.serving() == 3 and policy.failing(0) and not policy.failing(1)
    assert isinstance(policy.exited(1), Restart)  # 0 and 1 failing, 2 serves
    decision = policy.exited(2)
    assert isinstance(decision, GiveUp) and "every worker" in decision.reason


def test_a_worker_that_ran_long_enough_starts_over() -> None:
    clock = ManualClock()
    policy = RestartPolicy(2, 10.0, backoff=1.0, clock=clock)
    policy.started(0)
    policy.started(1)
    assert policy.exited(0) == Restart(1.0, 1)
    policy.started(0)
    clock.advance(10.0)  # ran healthy_after seconds: no longer failing, and its next exit is not a failure
    assert not policy.failing(0)
    assert policy.exited(1) == Restart(1.0, 0)  # worker 1 also ran 10 s
    policy.started(1)
    assert policy.exited(0) == Restart(1.0, 0)


def test_max_restarts_is_a_limit_per_worker() -> None:
    clock = ManualClock()
    policy = RestartPolicy(2, 10.0, max_restarts=2, clock=clock)
    policy.started(0)
    policy.started(1)
    clock.advance(15.0)  # worker 1 is healthy throughout
    policy.started(0)
    assert isinstance(policy.exited(0), Restart)
    policy.started(0)
    assert isinstance(policy.exited(0), Restart)
    policy.started(0)
    decision = policy.exited(0)
    assert isinstance(decision, GiveUp) and "max_restarts" in decision.reason


def _starts(gw: WorkerGateway, worker: int) -> list[dict[str, Any]]:
    return [r for r in gw.records() if r.get("msg") == "worker process started" and r["worker"] == worker]


def _kill_next_start(gw: WorkerGateway, worker: int, seen: int, timeout: float = 60.0) -> int:
    """SIGKILL worker's next start (the one after ``seen`` starts) as soon as it is logged; the new count."""
    deadline = time.monotonic() + timeout
    while len(starts := _starts(gw, worker)) <= seen:
        assert gw.proc.poll() is None, gw.log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"worker {worker} not started again"
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(starts[-1]["pid"], signal.SIGKILL)
    return len(starts)


def test_a_crash_looping_worker_backs_off_while_the_other_serves(tmp_path: Path) -> None:
    gw = start_workers(tmp_path, 2, "--embedded-topics", "cl:2", env=FAST_RESTARTS)
    try:
        first = _starts(gw, 0)
        statuses: list[int] = []

        async def publish_and_probe() -> None:
            async with gw.shared() as client:  # a new connection each: the kernel picks a listening worker
                for _ in range(3):
                    r = await client.post("/v1/topics/cl/messages", json={"messages": [{"value": "x"}]})
                    statuses.append(r.status_code)
                    statuses.append((await client.get("/readyz")).status_code)

        seen = len(_starts(gw, 1)) - 1
        for _ in range(4):  # the first kill is of the running worker, then of each restart at once
            seen = _kill_next_start(gw, 1, seen)
            asyncio.run(publish_and_probe())
        assert gw.proc.poll() is None, "the supervisor stopped over one worker's crash loop"
        assert _starts(gw, 0) == first, "worker 0 was restarted"
        assert set(statuses) == {200}, statuses
        delays = [
            r["restart_in"]
            for r in gw.records()
            if r.get("msg", "").startswith("a worker process failed soon after") and r["worker"] == 1
        ]
        assert delays[:4] == [0.5, 1.0, 2.0, 4.0], delays

        async def back() -> bool:
            async with gw.pinned(1) as one:
                try:
                    return (await one.get("/readyz")).status_code == 200
                except Exception:
                    return False

        deadline = time.monotonic() + 60
        while not asyncio.run(back()):
            assert time.monotonic() < deadline, "worker 1 did not come back after its crash loop"
            time.sleep(0.3)
    finally:
        gw.stop()


def test_every_worker_failing_stops_the_replica(tmp_path: Path) -> None:
    gw = start_workers(tmp_path, 2, "--embedded-topics", "cl:1", env=FAST_RESTARTS)
    try:
        seen = {w: len(_starts(gw, w)) - 1 for w in (0, 1)}
        deadline = time.monotonic() + 90
        while gw.proc.poll() is None:
            assert time.monotonic() < deadline, "the supervisor kept going with every worker failing"
            for worker in (0, 1):
                if len(_starts(gw, worker)) > seen[worker]:
                    seen[worker] = _kill_next_start(gw, worker, seen[worker])
            time.sleep(0.05)
        assert gw.proc.wait(timeout=60) == 1
        assert any("every worker" in r.get("msg", "") for r in gw.records()), gw.log.read_text()[-3000:]
    finally:
        gw.stop()


@pytest.mark.parametrize("limit", [1])
def test_max_restarts_stops_the_replica(tmp_path: Path, limit: int) -> None:
    env = {**FAST_RESTARTS, "TUBEMQ_GATEWAY_SUPERVISOR__MAX_RESTARTS": str(limit)}
    gw = start_workers(tmp_path, 2, "--embedded-topics", "cl:1", env=env)
    try:
        seen = len(_starts(gw, 1)) - 1
        deadline = time.monotonic() + 60
        while gw.proc.poll() is None:
            assert time.monotonic() < deadline, "max_restarts did not stop the replica"
            if len(_starts(gw, 1)) > seen:
                seen = _kill_next_start(gw, 1, seen)
            time.sleep(0.05)
        assert gw.proc.wait(timeout=60) == 1
        assert any("max_restarts" in r.get("msg", "") for r in gw.records())
    finally:
        gw.stop()


def test_a_dead_workers_consumer_registrations_are_released(tmp_path: Path) -> None:
    """SIGKILL a worker holding every partition of a group: its successor closes the dead consumer at the
    brokers and the master before serving, so a new instance of the group gets the partitions at once, not
    after the broker's registration timeout (30 s on the embedded broker, 35 s on a real one)."""
    gw = start_workers(tmp_path, 2, "--embedded-topics", "lv:2", env=FAST_RESTARTS)
    try:

        async def held(client: Any, group: str) -> tuple[str, list[Any]]:
            created = await client.post(f"/v1/consumers/{group}", json={"topics": ["lv"]})
            assert created.status_code == 201, created.text
            path = f"/v1/consumers/{group}/instances/{created.json()['instanceId']}"
            partitions: list[Any] = []
            deadline = time.monotonic() + 25
            while len(partitions) < 2 and time.monotonic() < deadline:
                await client.get(f"{path}/messages", params={"timeout_ms": 500})
                partitions = (await client.get(path)).json()["partitions"]
            return path, partitions

        async def first() -> list[Any]:
            async with gw.pinned(1) as one:
                return (await held(one, "lvg"))[1]

        assert len(asyncio.run(first())) == 2
        seen = len(_starts(gw, 1))
        os.kill(_starts(gw, 1)[-1]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not any(r.get("msg", "").startswith("released a dead worker") for r in gw.records()):
            assert time.monotonic() < deadline, gw.log.read_text()[-3000:]
            time.sleep(0.1)
        killed = time.monotonic()
        assert len(_starts(gw, 1)) > seen
        (released,) = [r for r in gw.records() if r.get("msg", "").startswith("released a dead worker")]
        assert (released["closed"], released["partitions"], released["failed"]) == (1, 2, 0), released

        async def second() -> list[Any]:
            async with gw.pinned(0) as zero:
                return (await held(zero, "lvg"))[1]

        partitions = asyncio.run(second())
        assert len(partitions) == 2, "the new instance did not get the dead worker's partitions"
        assert time.monotonic() - killed < 20, "the partitions waited for the broker's registration timeout"
    finally:
        gw.stop()


def test_a_dead_workers_instance_is_lost_alike_on_rest_and_grpc(tmp_path: Path) -> None:
    """While a dead worker waits for its restart (supervisor.restart_backoff), a call for one of its instances
    through the other worker is told the instance is lost: REST 410 and gRPC FAILED_PRECONDITION, both saying
    to create a new instance (gRPC passed the sibling's connection failure on as UNAVAILABLE, telling the
    client to retry a call for an instance that died with its worker)."""
    import grpc

    from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
    from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc

    env = {"TUBEMQ_GATEWAY_SUPERVISOR__RESTART_BACKOFF": "30"}
    gw = start_workers(tmp_path, 2, "--embedded-topics", "dw:1", env=env)
    try:

        async def create() -> str:
            async with gw.pinned(1) as one:
                created = await one.post("/v1/consumers/dwg", json={"topics": ["dw"]})
                assert created.status_code == 201, created.text
                instance: str = created.json()["instanceId"]
                return instance

        instance = asyncio.run(create())
        seen = len(_starts(gw, 1))
        os.kill(_starts(gw, 1)[-1]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 20
        while not any(
            r.get("msg", "").startswith("a worker process") and r.get("worker") == 1 for r in gw.records()
        ):
            assert time.monotonic() < deadline, gw.log.read_text()[-3000:]
            time.sleep(0.1)

        async def calls() -> tuple[Any, grpc.aio.AioRpcError]:
            async with gw.pinned(0) as zero:
                rest = await zero.get(f"/v1/consumers/dwg/instances/{instance}/messages")
            target = f"unix:{gw.socket_dir / 'g0.sock'}"
            async with grpc.aio.insecure_channel(target) as channel:
                stub = gateway_pb2_grpc.GatewayServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.Poll(pb.PollRequest(group="dwg", instance_id=instance, timeout_ms=0))
            return rest, caught.value

        rest, failure = asyncio.run(calls())
        assert len(_starts(gw, 1)) == seen, "worker 1 was restarted before the calls"
        assert rest.status_code == 410, rest.text
        assert failure.code() is grpc.StatusCode.FAILED_PRECONDITION, (failure.code(), failure.details())
        assert "create a new" in (failure.details() or "")
        assert str(gw.socket_dir) not in (failure.details() or "")  # the private directory is not shown
    finally:
        gw.stop()
