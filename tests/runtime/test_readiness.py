"""Readiness across master trouble: a few failed master calls do not turn a replica unready while its cached
routes still work; only a lost master (several calls in a row) with no usable route does."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.config import ProducerSettings, Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import parse_topic_specs
from gateway.runtime import Runtime
from gateway.tubemq.producer.client import Producer
from tests.support.waiting import eventually

FAILURES = 3


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(parse_topic_specs("demo:2")) as running:
        yield running


@pytest.fixture
async def runtime(cluster: EmbeddedCluster) -> AsyncIterator[Runtime]:
    settings = Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        producer=ProducerSettings(
            heartbeat_interval=0.05, rpc_timeout=1.0, master_failures_before_unready=FAILURES
        ),
    )
    started = Runtime(settings)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()


def producer_of(runtime: Runtime) -> Producer:
    assert runtime.producer is not None
    return runtime.producer


async def test_master_failures_turn_unready_only_without_a_usable_route(
    cluster: EmbeddedCluster, runtime: Runtime
) -> None:
    producer = producer_of(runtime)
    await producer.register_topic("demo")
    assert runtime.readiness() == (
        True,
        {
            "draining": False,
            "auth": "open",
            "masterSession": True,
            "masterFailures": 0,
            "usableRoutes": 1,
            "usableBrokers": 1,
            "routesLost": False,
        },
    )

    cluster.master.standby = True  # every master call now fails with StandbyException

    async def failed(count: int) -> bool:
        return producer.master_failures >= count

    await eventually(lambda: failed(1), what="a failed master call")
    assert not producer.registered and runtime.readiness()[0]  # one failure says little
    await eventually(lambda: failed(FAILURES), what=f"{FAILURES} failed master calls")
    ready, checks = runtime.readiness()
    assert ready, checks  # sends on the cached route still work
    assert checks["masterSession"] is False and checks["usableRoutes"] == 1
    sent = await producer.send("demo", b"while the master is away")
    assert sent.topic == "demo"

    producer.unpublish("demo")  # no route left: now the lost master counts
    ready, checks = runtime.readiness()
    assert not ready and checks["usableRoutes"] == 0 and checks["masterSession"] is False

    cluster.master.standby = False

    async def ready_again() -> bool:
        return runtime.readiness()[0] and producer.master_failures == 0

    await eventually(ready_again, timeout=30.0, what="readiness after the master came back")


async def test_without_master_failures_no_route_is_needed(runtime: Runtime) -> None:
    ready, checks = runtime.readiness()
    assert ready and checks["usableRoutes"] == 0 and checks["masterSession"] is True


async def test_the_threshold_is_validated() -> None:
    with pytest.raises(ValueError, match="master_failures_before_unready"):
        ProducerSettings(master_failures_before_unready=0)
