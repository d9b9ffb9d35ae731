"""A send's rules: choose a partition, send ``SendMessageRequestP2B``, retry where that is safe (§7.4-§7.6).

``batch.send_batch`` sends every message by these rules (a single send is a batch of one). Success means
exactly one thing: a broker answered ``errCode`` 200. Everything else ends the message or tries again,
never more than ``max_attempts`` times in all and never past the caller's deadline:

* transport failure (connect, lost link, timeout) or a retriable RPC exception: the breaker and the
  partition's back-off count it; the next attempt avoids every broker that failed this way.
* 503: the broker is shielded (``unavailable_cooldown``) and avoided like above.
* 419, 500 and other retriable codes: the next attempt avoids that partition.
* any other code: raised at once (``errors.for_code``).

A key or an explicit partition pins the message to one partition: retries stay there, and a shielded
broker fails the send at once with ``ServiceUnavailable`` rather than moving the message elsewhere.
A timed-out attempt may still have been stored by the broker, so a retry can duplicate a message
(at-least-once), but it never loses an acknowledged one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.tubemq.errors import (
    NoPartition,
    ServiceUnavailable,
)
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.breaker import BrokerBreaker
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.partitioner import Partitioner, PartitionRef
from gateway.tubemq.producer.routes import RouteTable, TopicRoute
from gateway.tubemq.producer.send_request import SendRequestTemplate
from gateway.tubemq.wire.send_answers import SendAnswer

__all__ = ["SendContext", "SendResult", "place_of", "places_in", "send_template"]

SUCCESS = 200
SERVICE_UNAVAILABLE = 503


@dataclass(slots=True)
class SendResult:
    """Where a broker stored a message: ``append_time_ms`` is the broker's ms timestamp,
    ``append_offset`` the index offset of the message in its store (-1 when the broker sent none),
    ``partition_index`` the partition's position in the topic's sorted partition list at send time (what
    ``send(partition=...)`` takes). Treat it as read-only (not frozen: one is built per message sent, and
    a frozen dataclass of eight fields costs more than twice as much to build)."""

    topic: str
    partition_id: int
    partition_key: str
    broker_id: int
    message_id: int
    append_time_ms: int
    append_offset: int
    partition_index: int


@dataclass(frozen=True, slots=True)
class SendContext:
    """Everything a send needs from its producer."""

    pool: ConnectionPool
    routes: RouteTable
    breaker: BrokerBreaker
    partitioner: Partitioner
    client_id: str
    sent_addr: int
    rpc_timeout: float
    max_attempts: int
    events: EventBus | None
    templates: dict[tuple[str, int, str | None], SendRequestTemplate] = field(default_factory=dict)
    """Request templates by (topic, visit token, auth token); see ``send_template``."""
    places: dict[str, tuple[TopicRoute, dict[PartitionRef, tuple[str, int]]]] = field(default_factory=dict)
    """Each topic's partition places (``place_of``) under the route they were read from; see ``places_in``."""


def send_template(ctx: SendContext, topic: str) -> SendRequestTemplate:
    """The request template of ``topic`` under the current tokens (built when they change): the one
    encoder of ``SendMessageRequestP2B``."""
    key = (topic, ctx.routes.visit_token, ctx.routes.auth_token or _broker_token(ctx))
    template = ctx.templates.get(key)
    if template is None:
        if len(ctx.templates) >= 1024:  # stale tokens and dropped topics: start afresh
            ctx.templates.clear()
        template = ctx.templates[key] = SendRequestTemplate(
            ctx.client_id, topic, sent_addr=ctx.sent_addr, visit_token=key[1], auth_token=key[2]
        )
    return template


def _choose(
    ctx: SendContext,
    topic: str,
    route: TopicRoute | None,
    key: str | None,
    partition: int | str | None,
    avoid: set[PartitionRef],
) -> PartitionRef:
    if route is None:
        raise NoPartition(topic)
    if key is None and partition is None:
        available: Callable[[int], bool] | None = None
        if not ctx.breaker.all_closed():
            available = {bid for bid in route.brokers if ctx.breaker.is_available(bid)}.__contains__
        try:
            return ctx.partitioner.round_robin(topic, route.partitions, available, avoid)
        except NoPartition:
            raise ServiceUnavailable(
                f"every broker of topic {topic!r} is shielded after failures or 503 answers; retry later"
            ) from None
    if key is not None:
        target = Partitioner.by_key(topic, key, route.partitions)
    else:
        assert partition is not None
        target = Partitioner.explicit(topic, partition, route.partitions)
    if not ctx.breaker.is_available(target.broker_id):
        raise ServiceUnavailable(
            f"broker {target.broker_id} holding partition {target.key(topic)} is shielded after failures; "
            "the message is pinned to that partition (key or explicit partition), so it was not sent"
        )
    return target


def _result(
    topic: str,
    route: TopicRoute,
    target: PartitionRef,
    answer: SendAnswer,
    place: tuple[str, int] | None = None,
) -> SendResult:
    """The result of a stored message (``answer``: its broker answer's fields); ``place`` is
    ``(target.key(topic), its index)`` when known."""
    _, _, err_msg, message_id, append_time, append_offset = answer
    if message_id is None:
        try:
            message_id = int(err_msg)
        except ValueError:
            message_id = -1
    # positional, in field order: keywords cost a third of the build
    return SendResult(
        topic,
        target.partition_id,
        target.key(topic) if place is None else place[0],
        target.broker_id,
        message_id,
        -1 if append_time is None else append_time,
        -1 if append_offset is None else append_offset,
        _index_of(route, target) if place is None else place[1],
    )


def places_in(ctx: SendContext, topic: str, route: TopicRoute) -> dict[PartitionRef, tuple[str, int]]:
    """``place_of`` of every partition of ``route`` (the topic's current route), read once per route: a
    one-message send reports its place without a key built and a search per message."""
    cached = ctx.places.get(topic)
    if cached is not None and cached[0] is route:
        return cached[1]
    if len(ctx.places) >= 1024:  # dropped topics: start afresh
        ctx.places.clear()
    places: dict[PartitionRef, tuple[str, int]] = {}
    for ref in route.partitions:
        if ref not in places:
            places[ref] = place_of(topic, route, ref)
    ctx.places[topic] = (route, places)
    return places


def place_of(topic: str, route: TopicRoute, target: PartitionRef) -> tuple[str, int]:
    """``(partition key, index in the route)`` of ``target``, what ``_result`` reports."""
    return target.key(topic), _index_of(route, target)


def _index_of(route: TopicRoute, target: PartitionRef) -> int:
    """``target``'s index in the route's partitions, which are sorted (a binary search, O(log n))."""
    i = bisect_left(route.partitions, target)
    if i < len(route.partitions) and route.partitions[i] == target:
        return i
    return route.partitions.index(target)  # pragma: no cover - the route's list is always sorted


def _broker_token(ctx: SendContext) -> str | None:
    """The signed broker token when the pool carries credentials and the master gave no token (§9)."""
    credentials = ctx.pool.credentials
    return credentials.broker_token() if credentials is not None else None
