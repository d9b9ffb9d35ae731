"""A :class:`~gateway.tubemq.net.pool.ConnectionPool`'s state: what it keeps per node, what one of its
decisions returns, and what it tells (its events and its stats snapshot). The pool's behaviour is in
``pool.py``; the records here carry no logic."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import ConnectError
from gateway.tubemq.events import Event
from gateway.tubemq.net.connection import Connection

__all__ = [
    "NodeLinks",
    "NodeStats",
    "Plan",
    "PoolConnectFailed",
    "PoolLinkOpened",
    "PoolLinkReclaimed",
    "PoolStats",
    "pool_stats",
]


@dataclass(frozen=True, slots=True)
class PoolLinkOpened(Event):
    """The pool added a link to ``address``; ``links`` is how many it now holds there."""

    address: NodeAddress
    links: int


@dataclass(frozen=True, slots=True)
class PoolLinkReclaimed(Event):
    """An idle link to ``address`` was closed after ``idle_seconds`` without traffic."""

    address: NodeAddress
    idle_seconds: float


@dataclass(frozen=True, slots=True)
class PoolConnectFailed(Event):
    """Opening a link to ``address`` failed ``failures`` times in a row; next try in ``retry_in`` s."""

    address: NodeAddress
    failures: int
    retry_in: float
    error: str


@dataclass(frozen=True, slots=True)
class NodeStats:
    open_links: int
    in_flight: int
    connecting: bool
    connect_failures: int
    """Consecutive failed attempts (reset by a successful connect)."""


@dataclass(frozen=True, slots=True)
class PoolStats:
    nodes: dict[NodeAddress, NodeStats]
    open_links: int
    in_flight: int
    idle_reclaims: int
    connect_failures: int
    """Failed connect attempts over the pool's life."""
    unknown_answers: int
    """Answers for serials no longer pending (late or duplicate), over the pool's life."""


@dataclass(eq=False)
class NodeLinks:
    """The pool's links to one node, its shared connect attempt, and its connect failures so far."""

    address: NodeAddress
    links: list[Connection] = field(default_factory=list)
    connecting: asyncio.Task[Connection] | None = None
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs more, and this is per request
class Plan:
    """The outcome of one decision: use a link, wait for a connect, or fail fast."""

    link: Connection | None = None
    connect: asyncio.Task[Connection] | None = None
    error: ConnectError | None = None


def pool_stats(
    nodes: Iterable[NodeLinks], idle_reclaims: int, connect_failures: int, retired_unknown_answers: int
) -> PoolStats:
    """The snapshot of a pool holding ``nodes`` (``retired_unknown_answers``: those of links it dropped)."""
    by_address: dict[NodeAddress, NodeStats] = {}
    unknown = retired_unknown_answers
    for node in nodes:
        live = [c for c in node.links if not c.is_closed]
        unknown += sum(c.unknown_answers for c in node.links)
        by_address[node.address] = NodeStats(
            open_links=len(live),
            in_flight=sum(c.in_flight for c in live),
            connecting=node.connecting is not None,
            connect_failures=node.failures,
        )
    return PoolStats(
        nodes=by_address,
        open_links=sum(n.open_links for n in by_address.values()),
        in_flight=sum(n.in_flight for n in by_address.values()),
        idle_reclaims=idle_reclaims,
        connect_failures=connect_failures,
        unknown_answers=unknown,
    )
