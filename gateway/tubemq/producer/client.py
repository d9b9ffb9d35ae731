"""The TubeMQ producer: one master session shared by every topic the process publishes (§7).

Like Java's ``ProducerManager`` one ``Producer`` registers once with the master, heartbeats every
``heartbeat_interval`` seconds with all published topics, and keeps the broker list and partition table
(``routes.RouteTable``) current. Its session task re-registers, with backoff and for as long as the
producer is open, whenever the master forgets it (411), a heartbeat cannot reach any master, or a
registration fails; published topics survive that.

Every message is prepared once (``payload.prepare_message``: the publish rules, the payload) and goes out
through ``send_prepared``, the one send path (``send`` is a batch of one): it checks the size against the
topic's limit, picks a partition (``partitioner``) on a broker the ``breaker`` allows, and sends
``SendMessageRequestP2B`` (``batch``). Only an answer
with ``errCode`` 200 counts as success. Transport errors and retriable codes (419, 500, 503, other 5xx)
are retried on another partition - preferring another broker - within ``max_send_attempts`` and the
caller's deadline; with a key or an explicit partition the retry stays on that partition. Other codes are
raised at once as ``ServerError`` subclasses.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import (
    ClientClosed,
    ClientError,
    MessageTooLarge,
    NoPartition,
    PartitionsAway,
    TopicNotPublished,
)
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.breaker import BreakerState, BreakerTransition, BrokerBreaker, BrokerHealth
from gateway.tubemq.net.master import MasterClient
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.net.teardown import CloseOnce
from gateway.tubemq.producer.batch import send_batch
from gateway.tubemq.producer.config import PartitionRoute, ProducerConfig, TopicRouteInfo
from gateway.tubemq.producer.events import BrokerShielded, BrokerUnshielded
from gateway.tubemq.producer.partitioner import Partitioner
from gateway.tubemq.producer.route_info import RouteViews
from gateway.tubemq.producer.routes import RouteTable
from gateway.tubemq.producer.send import SendContext, SendResult
from gateway.tubemq.producer.session import ProducerSession
from gateway.tubemq.producer.single import send_one
from gateway.tubemq.wire.client_id import local_ipv4, producer_id
from gateway.tubemq.wire.meta import default_broker_port
from gateway.tubemq.wire.payload import PreparedMessage, ipv4_to_sent_addr, prepare_message

__all__ = ["BatchMessage", "PartitionRoute", "Producer", "ProducerConfig", "SendResult", "TopicRouteInfo"]

#: seconds between the master calls that publishes to a topic in an outage may force (PartitionsAway)
OUTAGE_ASK_INTERVAL = 1.0

#: A message for ``Producer.send_batch``: ``(body, attributes, stream_id, msg_time)``.
BatchMessage = tuple[bytes, Mapping[str, str] | None, str | None, str | datetime | None]


class Producer:
    """A TubeMQ producer sharing ``pool`` with the rest of the process; see the module docstring."""

    def __init__(
        self,
        masters: Sequence[NodeAddress],
        *,
        pool: ConnectionPool,
        config: ProducerConfig | None = None,
        events: EventBus | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = cfg = config or ProducerConfig()
        self._pool = pool
        self._events = events
        self._local_ip = cfg.local_ip or local_ipv4()
        self._client_id = cfg.client_id or producer_id(self._local_ip)
        broker_port = cfg.default_broker_port
        self._routes = RouteTable(default_port=broker_port or default_broker_port(pool.tls))
        self._master = MasterClient(masters, pool, timeout=cfg.rpc_timeout, events=events)
        self._breaker = BrokerBreaker(
            unavailable_cooldown=cfg.unavailable_cooldown,
            check_interval=cfg.quality_check_interval,
            quality_cooldown=cfg.quality_check_interval,
            failure_threshold=cfg.failure_threshold,
            failure_window=cfg.failure_window,
            failure_cooldown=cfg.failure_cooldown,
            max_shielded_share=cfg.max_shielded_share,
            trial_timeout=cfg.rpc_timeout,
            on_change=self._breaker_changed,
            clock=clock,
        )
        self._partitioner = Partitioner(failure_limit=cfg.partition_failure_limit, delay=cfg.partition_delay)
        self._session = ProducerSession(
            self._master,
            self._routes,
            client_id=self._client_id,
            host_name=self._local_ip,
            heartbeat_interval=cfg.heartbeat_interval,
            register_backoff_base=cfg.register_backoff_base,
            register_backoff_max=cfg.register_backoff_max,
            broker_refresh_interval=cfg.broker_refresh_interval,
            on_brokers=self._brokers_changed,
            events=events,
        )
        self._send_context = SendContext(
            pool=pool,
            routes=self._routes,
            breaker=self._breaker,
            partitioner=self._partitioner,
            client_id=self._client_id,
            sent_addr=ipv4_to_sent_addr(self._local_ip),
            rpc_timeout=cfg.rpc_timeout,
            max_attempts=cfg.max_send_attempts,
            events=events,
        )
        self._closed = False
        self._closer = CloseOnce(self._session.close, name=f"producer-close-{self._client_id}")
        self._route_views = RouteViews(self._breaker)  # register_topic() asks on every gateway request

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("registered" if self.registered else "unregistered")
        return (
            f"<Producer {self._client_id} {state} master={self._master.current} "
            f"topics={sorted(self._session.topics)} {self._routes!r}>"
        )

    # --- state ---------------------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        return self._client_id

    @property
    def registered(self) -> bool:
        """Whether the master currently knows this producer (as far as the last answer tells)."""
        return self._session.registered

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def master_failures(self) -> int:
        """Master calls in a row that no master answered (0 after any answer)."""
        return self._session.master_failures

    @property
    def master_reachable(self) -> bool:
        """Started, open, and fewer than ``master_failures_before_unready`` master calls in a row failed."""
        return (
            self._session.started
            and not self._closed
            and self._session.master_failures < self.config.master_failures_before_unready
        )

    @property
    def routes_lost(self) -> bool:
        """Every published topic has been without partitions for ``master_failures_before_unready``
        answered heartbeats in a row (a broker outage the master reports): nothing can be published."""
        return bool(self._session.topics) and (
            self._session.unroutable_heartbeats >= self.config.master_failures_before_unready
        )

    def usable_routes(self) -> int:
        """Published topics with a partition on a broker that is not shielded: sends to them work without
        a master, on the route learnt last."""
        usable = 0
        for topic in self._session.topics:
            route = self._routes.route(topic)
            if route is not None and any(self._breaker.is_available(r.broker_id) for r in route.partitions):
                usable += 1
        return usable

    @property
    def master(self) -> NodeAddress:
        """The master the next master call goes to."""
        return self._master.current

    @property
    def published_topics(self) -> frozenset[str]:
        return frozenset(self._session.topics)

    def broker_addresses(self) -> dict[int, NodeAddress]:
        """Every broker the master lists (online or not), by id."""
        return {bid: info.address for bid, info in self._routes.brokers.items()}

    @property
    def visit_token(self) -> int:
        """The master's ``visitAuthorizedToken`` (-2 before it sent one)."""
        return self._routes.visit_token

    def broker_health(self) -> list[BrokerHealth]:
        """Shielding state and counters of every known broker."""
        return self._breaker.snapshot()

    def topic_route(self, topic: str) -> TopicRouteInfo | None:
        """Partitions (with broker addresses) and max message size of a published topic, else None."""
        route = self._routes.route(topic)
        if route is None or topic not in self._session.topics:
            return None
        return self._route_views.view(topic, route)

    # --- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register with the master (one pass over the master list) and start the session task.

        Raises the registration error, leaving the producer unstarted (``start`` may be called again).
        """
        self._check_open()
        await self._session.start()

    async def register_topic(self, topic: str) -> TopicRouteInfo:
        """Register ``topic`` with the master for publishing (what the Java ``MessageProducer.publish``
        does; it sends nothing): add it to the published set and heartbeat at once to learn its partitions.
        Returns its route (at once when it is known already).

        Raises ``PartitionsAway`` when it had partitions that are gone while their brokers are still
        configured (an outage: retriable), ``NoPartition`` when the master lists no publishable partition
        for it otherwise, a ``TubeMQError``
        when the master cannot be reached within ``publish_timeout``.
        """
        self._check_open()
        name = topic.strip()
        if not name:
            raise ClientError("topic must not be blank")
        if not self._session.started:
            raise ClientError("the producer is not started: call start() first")
        known = self.topic_route(name)
        if known is not None:
            return known
        if name in self._session.topics:
            # an outage: the master is asked again at most once a second, not on every call
            recent = self._routes.outage_asked(name, time.monotonic(), OUTAGE_ASK_INTERVAL)
            if recent is not None:
                raise recent
        added = self._session.add_topic(name)
        try:
            await self._session.heartbeat_now(self.config.publish_timeout)
        except BaseException:
            if added:
                self._session.remove_topic(name)
            raise
        route = self.topic_route(name)
        if route is None:
            error = self._routes.no_route(name)
            if isinstance(error, PartitionsAway):
                raise error  # an outage, not an unknown topic: it stays published to see it come back
            if added:
                self._session.remove_topic(name)
            raise NoPartition(name)
        return route

    def unpublish(self, topic: str) -> None:
        """Drop ``topic`` from the published set (sends to it then fail with ``TopicNotPublished``)."""
        name = topic.strip()
        self._session.remove_topic(name)
        self._routes.forget_topic(name)
        self._route_views.forget(name)
        self._partitioner.forget(name)

    async def close(self) -> None:
        """Stop the session and tell the master (``CloseRequestP2M``); idempotent. The pool stays open.

        Safe to cancel: the steps run in a task of their own that a cancelled caller does not stop
        (:mod:`gateway.tubemq.net.teardown`); a later ``close()`` waits for it."""
        self._closed = True
        await self._closer()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # --- sending -------------------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        key: str | None = None,
        partition: int | str | None = None,
        attributes: Mapping[str, str] | None = None,
        stream_id: str | None = None,
        msg_time: str | datetime | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the deadline travels down to every attempt
    ) -> SendResult:
        """Send one message and return where the broker stored it.

        ``key`` pins the message to ``Partitioner.by_key``'s partition, ``partition`` to an index into
        the topic's sorted partitions or a ``brokerId:topic:partitionId`` key (``key`` and ``partition``
        are exclusive). ``stream_id`` becomes ``$msgType$`` and the broker's filter key; ``msg_time`` the
        ``$msgTime$`` (``yyyyMMddHHmm`` text or a datetime). ``key`` also travels with the message as the
        reserved attribute ``$msgKey$`` (``payload`` module docstring), so consumers get it back.
        ``timeout`` (seconds, default ``send_timeout``) bounds all attempts. The fields are checked by the
        publish rules (``payload.prepare_message``: ``InvalidMessage`` names the field at fault) and the
        message goes out as a batch of one (``send_prepared``).
        """
        message = prepare_message(body, attributes, stream_id, msg_time, key, partition)
        (result,) = await self.send_prepared(topic, (message,), timeout=timeout)
        if isinstance(result, Exception):
            raise result
        return result

    async def send_batch(
        self,
        topic: str,
        messages: Sequence[BatchMessage],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the deadline travels down to every attempt
    ) -> list[SendResult | Exception]:
        """Send several messages without key or partition; a message is ``(body, attributes, stream_id,
        msg_time)`` as ``send`` takes them. Returns, in order, each message's result or the error ``send``
        would have raised for it; raises (for the whole batch) what ``send_prepared`` raises."""
        results: list[SendResult | Exception | None] = [None] * len(messages)
        prepared: list[PreparedMessage] = []
        slots: list[int] = []
        for i, (body, attributes, stream_id, msg_time) in enumerate(messages):
            try:
                prepared.append(prepare_message(body, attributes, stream_id, msg_time))
            except ClientError as exc:
                results[i] = exc
                continue
            slots.append(i)
        sent = await self.send_prepared(topic, prepared, timeout=timeout)
        for i, result in zip(slots, sent, strict=True):
            results[i] = result
        return [r for r in results if r is not None]

    async def send_prepared(
        self,
        topic: str,
        messages: Sequence[PreparedMessage],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the deadline travels down to every attempt
    ) -> list[SendResult | Exception]:
        """The send path of every message: send messages prepared by ``payload.prepare_message``, each its
        own request and broker answer, together (``producer.batch``: one write per broker and round).

        Returns, in order, each message's result or the error that ended it: ``MessageTooLarge`` above the
        topic's limit, ``ClientError`` for a message with both a key and a partition, else what its sends
        ended with (module docstring). Messages of one call go out together, so their order is not kept:
        send one message at a time what must stay in order. Raises (for the whole batch) only when the
        producer is closed or the topic unpublished or unrouted. ``timeout`` (seconds, default
        ``send_timeout``) bounds all attempts.
        """
        self._check_open()
        if topic not in self._session.topics:
            raise TopicNotPublished(topic)
        route = self._routes.route(topic)
        if route is None:
            raise self._routes.no_route(topic)
        limit = route.max_msg_size
        budget = self.config.send_timeout if timeout is None else timeout
        deadline = asyncio.get_running_loop().time() + budget
        for message in messages:
            if message.size > limit or (message.key is not None and message.partition is not None):
                break
        else:  # the usual batch: every message may go
            if len(messages) == 1:  # a request of one message, the most common one
                return [await send_one(self._send_context, topic, messages[0], deadline=deadline)]
            return await send_batch(self._send_context, topic, messages, deadline=deadline)
        refused: dict[int, Exception] = {}
        for i, message in enumerate(messages):
            if message.key is not None and message.partition is not None:
                refused[i] = ClientError("give either a key or an explicit partition, not both")
            elif message.size > limit:
                refused[i] = MessageTooLarge(message.size, limit, topic)
        items = [m for i, m in enumerate(messages) if i not in refused]
        sent = await send_batch(self._send_context, topic, items, deadline=deadline) if items else []
        done = iter(sent)
        return [refused[i] if i in refused else next(done) for i in range(len(messages))]

    # --- internals -----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the producer has been closed; create a new one")

    def _brokers_changed(self) -> None:
        self._breaker.track(self._routes.brokers)
        with contextlib.suppress(ClientClosed):
            self._pool.preconnect(b.address for b in self._routes.brokers.values())

    def _breaker_changed(self, change: BreakerTransition) -> None:
        if self._events is None:
            return
        if change.new is BreakerState.OPEN:
            reason = change.reason.value if change.reason else "unknown"
            self._events.emit(BrokerShielded(change.broker_id, reason))
        elif change.new is BreakerState.CLOSED:
            self._events.emit(BrokerUnshielded(change.broker_id))
