"""The client core's tests run on the in-memory network by default: the ``pool`` here reaches only servers
started on the test's ``network`` (the real embedded master and brokers, the real frames, no socket). The
tests about sockets, TLS, the network's timeouts or faults build their pools and servers on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.tubemq.net import ConnectionPool, MemoryNetwork


@pytest.fixture
async def pool(network: MemoryNetwork) -> AsyncIterator[ConnectionPool]:
    """A default connection pool on the test's in-memory network, closed after the test."""
    async with ConnectionPool(connector=network.create_connection) as pool:
        yield pool
