"""Suite-wide test settings."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from gateway.tubemq.net import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool

if TYPE_CHECKING:
    from tests.support.consumer_support import Env
    from tests.support.gateway_support import Gateway

# Property tests check correctness, not speed: on a loaded 2-core CI machine a single example can take
# longer than hypothesis' default 200 ms deadline, which would make the suite flaky without finding a bug.
settings.register_profile(
    "gateway", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("gateway")

# `serve` starts one worker process per CPU by default; the tests that run `serve` as a process are about one
# gateway process (its logs, its memory, its signals) unless they ask for workers
# (tests/workers/test_workers.py).
os.environ.setdefault("TUBEMQ_GATEWAY_WORKERS", "1")


@pytest.fixture
async def pool() -> AsyncIterator[ConnectionPool]:
    """A default connection pool, closed after the test; a test module may define its own ``pool``."""
    pool = ConnectionPool()
    yield pool
    await pool.close()


@pytest.fixture
def network() -> MemoryNetwork:
    """An in-memory network: a pool given its ``create_connection`` and servers given its ``start_server``
    talk through it with the real frames and no socket (gateway/tubemq/net/memory.py)."""
    return MemoryNetwork()


@pytest.fixture
async def env(request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    """An embedded cluster with fast timings, a pool and a started producer on it
    (tests/support/consumer_support.environment), with the topics the test module names in ``ENV_TOPICS``
    (default: consumer_support.TOPICS); a test module may define its own ``env``."""
    from tests.support.consumer_support import TOPICS, environment

    async with environment(getattr(request.module, "ENV_TOPICS", TOPICS)) as env:
        yield env


@pytest.fixture
async def gw(env: Env) -> AsyncIterator[Gateway]:
    """A gateway served on loopback on ``env`` (tests/support/gateway_support.gateway); a test module may
    define its own ``gw``."""
    from tests.support.gateway_support import gateway

    async with gateway(env) as served:
        yield served
