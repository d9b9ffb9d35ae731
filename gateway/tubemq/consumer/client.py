"""The server-balanced pull consumer (§6): the master assigns partitions, the application polls batches and
confirms each one.

Life cycle::

    consumer = Consumer(masters, "group", {"demo": None, "orders": {"paid"}}, pool=pool)
    await consumer.start()                      # register at the master; heartbeats start
    await consumer.wait_for_assignment(30.0)    # optional: until the first partition is registered
    batch = await consumer.poll(5.0)            # ConsumedBatch or None
    if batch is not None:
        ...
        await consumer.confirm(batch.confirm_context, consumed=True)
    await consumer.close()                      # unregister every partition, leave the group

A partition is fetched by one poll at a time and stays taken from the poll that delivered a batch until
the batch is confirmed (or ``confirm_timeout`` passes: it is then rolled back). ``confirm(consumed=True)``
commits the batch (the broker's offset moves past it); ``consumed=False`` rolls it back, so the same
messages come again from the next fetch of that partition, in this consumer or, after a rebalance, in
another member of the group. Delivery is therefore at-least-once.

Offsets: see :mod:`gateway.tubemq.consumer.batch`. ``confirm`` returns the committed offset, which for a
batch confirmed as consumed is the offset right after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.batch import ConsumedBatch
from gateway.tubemq.consumer.config import ConsumerConfig
from gateway.tubemq.consumer.confirm import Confirmer, InvalidConfirmContext
from gateway.tubemq.consumer.events import ConsumerClosed
from gateway.tubemq.consumer.fetch import Fetcher
from gateway.tubemq.consumer.heartbeat import BrokerHeartbeat, MasterSession
from gateway.tubemq.consumer.rebalance import Rebalancer
from gateway.tubemq.consumer.seek import seek_partition
from gateway.tubemq.consumer.state import ConsumerContext, Selection
from gateway.tubemq.errors import ClientClosed, ClientError, TubeMQError
from gateway.tubemq.net.master import MasterClient
from gateway.tubemq.net.teardown import CloseOnce, cancel_and_wait
from gateway.tubemq.wire.client_id import consumer_id, local_ipv4
from gateway.tubemq.wire.meta import Partition

if TYPE_CHECKING:
    from gateway.tubemq.events import EventBus
    from gateway.tubemq.net.pool import ConnectionPool

__all__ = ["AssignedPartition", "Consumer", "InvalidConfirmContext"]

MAX_FILTER_ITEMS = 500
MAX_FILTER_ITEM_LENGTH = 256


@dataclass(frozen=True, slots=True)
class AssignedPartition:
    """A partition the consumer holds. Offsets are the last the broker reported (-1 unknown)."""

    partition_key: str
    topic: str
    partition_id: int
    broker_id: int
    broker: NodeAddress
    curr_offset: int
    max_offset: int
    in_use: bool


class Consumer:
    """A member of a consumer group that pulls batches from the partitions the master assigns to it.

    ``topics`` maps each topic to its filter items (stream ids, ``$msgType$`` values) or None for every
    message. ``masters`` are tried in the Java client's fail-over order (§7.7).
    """

    def __init__(
        self,
        masters: Sequence[NodeAddress],
        group: str,
        topics: Mapping[str, Collection[str] | None],
        *,
        pool: ConnectionPool,
        config: ConsumerConfig | None = None,
        events: EventBus | None = None,
    ) -> None:
        config = config or ConsumerConfig()
        filters = _check_topics(topics)
        self._ctx = ConsumerContext(
            client_id=config.client_id or consumer_id(group),
            group=group,
            host_name=config.host_name or local_ipv4(),
            filters=filters,
            config=config,
            pool=pool,
            events=events,
        )
        master = MasterClient(masters, pool, timeout=config.rpc_timeout, events=events)
        self._rebalancer = Rebalancer(self._ctx, on_finished=self._event_finished)
        self._session = MasterSession(self._ctx, master, self._rebalancer, list(filters))
        self._broker_heartbeat = BrokerHeartbeat(self._ctx, self._rebalancer)
        self._fetcher = Fetcher(self._ctx, self._rebalancer)
        self._master_task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._broker_task: asyncio.Task[None] | None = None
        self._closer = CloseOnce(self._close_steps, name=f"consumer-close-{self._ctx.client_id}")
        self._released = 0
        self._left = False
        self._confirmer = Confirmer(self._ctx)
        self._started = False
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._started else "new"
        return f"<Consumer {self._ctx.client_id} group={self._ctx.group} {state} {self._ctx.cache!r}>"

    @property
    def client_id(self) -> str:
        return self._ctx.client_id

    @property
    def group(self) -> str:
        return self._ctx.group

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def topics(self) -> dict[str, frozenset[str]]:
        """The subscription: each topic with its filter items (empty = every message)."""
        return dict(self._ctx.filters)

    # --- life cycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Register at the master (with retries and master fail-over) and start the heartbeats.

        Raises the master's ServerError (e.g. TopicNotDeployed, an inconsistent group) or the last
        transport error when every attempt failed; ClientClosed when ``close()`` ran meanwhile.
        """
        if self._started or self._closed:
            raise ClientError("start() may be called once, on a new consumer")
        self._started = True
        try:
            await self._session.register_with_retries()
        except BaseException:
            self._closed = True
            raise
        if self._closed:
            # close() ran while the registration was on its way: leave the group it just joined.
            await self._closer()
            raise ClientClosed(f"consumer {self.client_id} was closed while it started")
        self._master_task = asyncio.create_task(
            self._session.run(), name=f"consumer-master-hb-{self.client_id}"
        )
        self._rebalance_task = asyncio.create_task(
            self._rebalancer.run(), name=f"consumer-rebalance-{self.client_id}"
        )
        self._broker_task = asyncio.create_task(
            self._broker_heartbeat.run(), name=f"consumer-broker-hb-{self.client_id}"
        )

    async def close(self) -> None:
        """Leave the group (§6.14): stop fetching and the master heartbeat, let a running rebalance event
        finish (at most ``close_rebalance_wait``), unregister every held partition (a batch not confirmed
        yet is rolled back) and tell the master. Errors of the goodbye calls are swallowed.

        Safe to call twice and safe to cancel: the steps run in a task of their own that a cancelled
        caller does not stop (:mod:`gateway.tubemq.net.teardown`); a later ``close()`` waits for it.
        """
        if not self._closed:
            self._closed = True
            self._ctx.closing = True
            self._ctx.cache.wake()
        if self._started:
            await self._closer()

    async def _close_steps(self) -> None:
        ctx = self._ctx
        # The master heartbeat first: a beat answered 411 would register the leaving consumer again.
        await cancel_and_wait([self._master_task, self._broker_task])
        if self._rebalance_task is not None and not self._rebalance_task.done():
            await self._rebalancer.wait_idle(ctx.config.close_rebalance_wait)
        await cancel_and_wait([self._rebalance_task])
        keys = [state.partition.partition_key for state in ctx.cache.held()]
        await asyncio.gather(*(self._rebalancer.release(key, reason="close") for key in keys))
        self._released += len(keys)
        if not self._left:
            with contextlib.suppress(TubeMQError):
                await self._session.close()
            self._left = True
            ctx.emit(ConsumerClosed(ctx.client_id, ctx.group, self._released))

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # --- assignment ---------------------------------------------------------------------------------

    def assignment(self) -> list[AssignedPartition]:
        """The partitions held right now."""
        return [
            AssignedPartition(
                partition_key=s.partition.partition_key,
                topic=s.partition.topic,
                partition_id=s.partition.partition_id,
                broker_id=s.partition.broker.broker_id,
                broker=s.partition.broker.address,
                curr_offset=s.curr_offset,
                max_offset=s.max_offset,
                in_use=s.in_use,
            )
            for s in self._ctx.cache.held()
        ]

    def held_partition(self, partition_key: str) -> Partition | None:
        """The partition ``partition_key`` when it is held right now."""
        state = self._ctx.cache.get(partition_key)
        return None if state is None else state.partition

    @property
    def visit_token(self) -> int:
        """The master's last ``visitAuthorizedToken`` (for reads beside this consumer's, e.g. range reads)."""
        return self._ctx.visit_token

    async def wait_for_assignment(self, timeout: float) -> bool:  # noqa: ASYNC109 - a bound, not I/O
        """Wait up to ``timeout`` seconds until at least one partition is held; False if none is."""
        cache = self._ctx.cache
        deadline = self._ctx.clock() + timeout
        while not len(cache) and not self._closed:
            remaining = deadline - self._ctx.clock()
            if remaining <= 0:
                return False
            await cache.wait_changed(remaining)
        return bool(len(cache))

    # --- consuming ----------------------------------------------------------------------------------

    async def poll(self, timeout: float) -> ConsumedBatch | None:  # noqa: ASYNC109 - bounds the wait
        """Fetch the next batch, trying held partitions round-robin for up to ``timeout`` seconds.

        Returns None when no partition delivered a message in time (none assigned, all waiting after an
        empty fetch, all taken by unconfirmed batches). Raises ClientClosed once the consumer is closed.
        """
        self._check_running()
        ctx = self._ctx
        deadline = ctx.clock() + timeout
        while not self._closed:
            now = ctx.clock()
            ctx.cache.expire_unconfirmed(now, ctx.config.confirm_timeout)
            selection = ctx.cache.select(now)
            if selection is not None:
                batch = await self._fetcher.fetch(selection)
                if batch is not None:
                    return batch
                continue
            remaining = deadline - now
            if remaining <= 0:
                return None
            soonest = ctx.cache.next_ready_in(now)
            await ctx.cache.wait_changed(remaining if soonest is None else min(remaining, soonest))
        return None

    async def poll_many(self, timeout: float, most: int) -> list[ConsumedBatch]:  # noqa: ASYNC109
        """Like :meth:`poll`, but when several partitions are ready now, fetch up to ``most`` of them at
        once (one round trip for several batches); their batches come in the order they were handed out.
        Each stays taken until confirmed, as a polled batch does."""
        self._check_running()
        ctx = self._ctx
        now = ctx.clock()
        ctx.cache.expire_unconfirmed(now, ctx.config.confirm_timeout)
        count = min(most, ctx.cache.ready_now(now))
        if count > 1:
            batches = await self._fetch_selected(self._select(count, now))
            if batches:
                return batches
            timeout -= ctx.clock() - now
        batch = await self.poll(max(0.0, timeout))
        return [] if batch is None else [batch]

    def fetch_ready(self, most: int) -> asyncio.Future[list[ConsumedBatch]] | None:
        """Start fetching up to ``most`` partitions that are ready now, without waiting for any (a fetch ahead
        of the next poll); None when none is ready. The partitions are taken before this returns, so a
        commit due on one of them (:meth:`confirm_local`) goes with its fetch and :meth:`send_due_commits`
        leaves it alone. The future gives their batches (each taken until confirmed, as a polled batch is),
        or raises a fetch's error when none brought a batch."""
        self._check_running()
        ctx = self._ctx
        now = ctx.clock()
        ctx.cache.expire_unconfirmed(now, ctx.config.confirm_timeout)
        selections = self._select(min(most, ctx.cache.ready_now(now)), now)
        if not selections:
            return None
        return asyncio.ensure_future(self._fetch_selected(selections))

    def _select(self, count: int, now: float) -> list[Selection]:
        return [s for _ in range(count) if (s := self._ctx.cache.select(now)) is not None]

    async def _fetch_selected(self, selections: Sequence[Selection]) -> list[ConsumedBatch]:
        """Fetch the selected partitions at once; their batches in selection order, or the first error when
        none brought a batch."""
        results = await asyncio.gather(*(self._fetcher.fetch(s) for s in selections), return_exceptions=True)
        batches = [b for b in results if isinstance(b, ConsumedBatch)]
        if not batches:
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        return batches

    async def seek(self, partition_key: str, offset: int) -> tuple[int, int]:
        """Move the group's read position in a held partition to broker index ``offset`` (0: the oldest
        message kept, ``LATEST_OFFSET``: the end; the broker clamps), see :mod:`.seek`. Roll back a batch
        still out for it first. Returns the (current, max) offsets; raises PartitionNotHeld."""
        self._check_running()
        return await seek_partition(self._ctx, self._rebalancer, partition_key, offset)

    async def confirm(self, context: str, consumed: bool = True) -> int:
        """Confirm a batch: ``consumed`` commits it, False rolls it back for redelivery.

        Returns the committed offset the broker reports (-1 if it reports none). Raises
        InvalidConfirmContext for an unknown, expired or already confirmed context, the broker's
        ServerError, or a transport error; in the last case the outcome still reaches the broker with
        the partition's next fetch.
        """
        self._check_running()
        return await self._confirmer.confirm(context, consumed)

    def confirm_local(self, context: str) -> str | None:
        """Confirm a batch as consumed without a request (Java's ``pullConfirmInLocal``): the partition is
        ready again at once and its next GetMessage carries the commit (``lastPackConsumed``). Returns the
        partition key, or None for a context that is not pending (as ``confirm`` would refuse it).

        Until a fetch of that partition carries it, the commit lives only here: :meth:`send_due_commits`
        sends it on its own, and leaving the group (or a rebalance) carries it in the unregistration.
        """
        self._check_running()
        return self._confirmer.confirm_local(context)

    async def send_due_commits(self, keys: Collection[str]) -> None:
        """Send a CommitOffset for each partition of ``keys`` whose commit (:meth:`confirm_local`) no request
        carried yet and that is ready now; one fetching or parked carries it with its next GetMessage.
        Errors are as ``confirm``'s; after a failed one the partition's next fetch carries the commit."""
        self._check_running()
        await self._confirmer.send_due_commits(keys)

    # --- internals ----------------------------------------------------------------------------------

    def _event_finished(self) -> None:
        if self._ctx.config.report_events_immediately:
            self._session.wake()

    def _check_running(self) -> None:
        if self._closed:
            raise ClientClosed(f"consumer {self.client_id} is closed")
        if not self._started:
            raise ClientError("call start() before polling or confirming")


def _check_topics(topics: Mapping[str, Collection[str] | None]) -> dict[str, frozenset[str]]:
    """Validate the subscription (§6.10) and return each topic's filter items (empty = no filter)."""
    if not topics:
        raise ValueError("subscribe at least one topic")
    filters: dict[str, frozenset[str]] = {}
    for topic, items in topics.items():
        if not topic.strip() or any(ch in topic for ch in ":#,@"):
            raise ValueError(f"topic name {topic!r} is blank or contains ':', '#', ',' or '@'")
        chosen = frozenset(items or ())
        if len(chosen) > MAX_FILTER_ITEMS:
            raise ValueError(f"topic {topic!r} has {len(chosen)} filter items; at most 500 are allowed")
        for item in chosen:
            if not item.strip() or len(item) > MAX_FILTER_ITEM_LENGTH or any(ch in item for ch in ",#"):
                raise ValueError(
                    f"filter item {item!r} of topic {topic!r} must be non-blank, at most 256 characters "
                    "and free of ',' and '#'"
                )
        filters[topic] = chosen
    return filters
