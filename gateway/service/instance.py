"""One consumer instance: a core :class:`Consumer` plus what its client was given and has not committed.

The core hands out one batch per partition fetch and keeps the partition until the batch is confirmed. A
remote client reads with its own limits (messages and bytes per poll), so the instance sits in between:

* a fetched batch's messages go to the instance's **buffer**; a poll delivers from the front of the buffer
  within its budget and the remainder waits for the next poll;
* each delivered message gets a **token** (a per-instance sequence number, also the SSE event id) and stays
  **pending** until the client commits it (or rolls it back); a poll hands out **runs** (consecutive
  messages of one buffered stretch of a batch, with consecutive tokens, one attempt and one deadline) and
  the instance keeps them as runs (:mod:`.instance_pending`), with no object per message;
* a batch is confirmed to the broker as consumed once all its messages were delivered and committed;
  rolling back any of its tokens rolls the whole batch back (the broker redelivers all of it);
* each delivered message has a **deadline** (``ack_deadline`` after its delivery, extendable): past it the
  message goes to the retry topic alone when the instance has one (``gateway.service.redelivery``), else
  its whole batch is rolled back, so a client that forgets a token cannot stall its partition forever; a
  batch whose messages were not all delivered within ``commit_timeout`` of its fetch is rolled back too;
* a **nack** republishes single messages to the retry topic (or the dead-letter topic at their last
  attempt) and settles them once a broker stored the copy; the instance consumes the retry topic too and
  holds a retried message until it is due, then delivers it under its original position;
* when the core loses a partition (rebalance, broker drop), the instance forgets that partition's buffered
  and pending messages: their tokens become stale and the messages go to the partition's next holder;
* as a poll answers, and after a commit or a nack, the instance **fetches ahead** the batches a poll as
  large as the last one needs, from the partitions that are free (:mod:`gateway.service.prefetch` bounds
  it): a batch fetched ahead waits in the buffer, undelivered, like the rest of a batch a poll did not take;
  a poll that does not wait and has nothing in hand joins a fetch ahead still on its way.

With ``auto_commit`` every message delivered so far counts as committed when the next poll starts (or the
instance is deleted), like Kafka's auto-commit: a client that processes a response before asking for the
next one gets at-least-once delivery.

State changes are synchronous (no ``await`` in between), so commits may run while a poll waits for data;
polls of one instance run one at a time.

The instance is composed of collaborators, one job each, sharing one
:class:`~gateway.service.instance_holdings.Holdings` (what the instance holds; the records are in
:mod:`.instance_records`): a :class:`~gateway.service.instance_settle.Settler` (commits, rollbacks, batch
confirmations), a :class:`~gateway.service.instance_redelivery.Redeliverer` (retried messages, deadlines,
nacks) and a :class:`~gateway.service.instance_fetch.Fetcher` (core fetches into the buffer); this module
delivers (polls), seeks and closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence

from gateway.service.delivered import CommitResult, DeadlineResult, DeliveredRun, NackResult
from gateway.service.delivery import Delivery
from gateway.service.errors import InvalidInput, Unavailable
from gateway.service.instance_fetch import Fetcher
from gateway.service.instance_holdings import Holdings
from gateway.service.instance_id import redact
from gateway.service.instance_records import Budget
from gateway.service.instance_redelivery import Admit, Redeliverer
from gateway.service.instance_settle import Settler
from gateway.service.prefetch import FetchAhead
from gateway.service.prefetch_budget import PrefetchBudget
from gateway.service.redelivery import RedeliveryPolicy, Republisher, wall_ms
from gateway.tubemq.consumer import INDEX_ENTRY_SIZE, Consumer
from gateway.tubemq.errors import TubeMQError
from gateway.tubemq.events import EventBus
from gateway.tubemq.net import CloseOnce

__all__ = ["ConsumerInstance"]

log = logging.getLogger("gateway.service.consumers")


class ConsumerInstance:
    """See the module docstring. Built and started by the ConsumerService; times in seconds."""

    def __init__(
        self,
        instance_id: str,
        group: str,
        consumer: Consumer,
        *,
        auto_commit: bool,
        max_bytes: int | None,
        commit_timeout: float,
        assignment_wait: float,
        owner: str = "anonymous",
        clock: Callable[[], float] = time.monotonic,
        policy: RedeliveryPolicy | None = None,
        republisher: Republisher | None = None,
        ack_deadline: float | None = None,
        wall: Callable[[], int] = wall_ms,
        events: EventBus | None = None,
        ahead: FetchAhead | None = None,
    ) -> None:
        self.instance_id = instance_id
        #: the identity of the principal that created the instance (``Principal.identity``: method and
        #: name, issuer for a JWT); nobody else may use it
        self.owner = owner
        self.group = group
        self.consumer = consumer
        self.auto_commit = auto_commit
        self.max_bytes = max_bytes
        self.policy = policy or RedeliveryPolicy()
        #: seconds from delivery to a message's deadline
        self.ack_deadline = commit_timeout if ack_deadline is None else ack_deadline
        self._assignment_wait = assignment_wait
        self._state = state = Holdings(instance_id, group, consumer, self.policy, clock=clock, wall=wall)
        #: done once the gateway is stopping
        self._draining: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settler = settler = Settler(state)
        self._redeliverer = redeliverer = Redeliverer(
            state, settler, republisher=republisher, events=events, commit_timeout=commit_timeout
        )
        ahead = ahead if ahead is not None else FetchAhead(0, PrefetchBudget(0))
        self._fetcher = Fetcher(state, redeliverer, self._draining, ahead)
        #: the limits of the last poll, what a fetch ahead fetches for (None before the first poll)
        self._next_poll: tuple[int, int] | None = None
        #: the next token's sequence number
        self._next_seq = 1
        self._poll_lock = asyncio.Lock()
        self._waited_for_assignment = False
        self.last_used = clock()
        self.active = 0
        self.stream_generation = 0
        self._closer: CloseOnce | None = None

    def __repr__(self) -> str:
        state = self._state
        shown = f"closed ({self.closed_reason})" if self.closed_reason else f"active={self.active}"
        return (
            f"<ConsumerInstance {redact(self.instance_id)} group={self.group} {shown}"
            f" buffered={state.buffered()} pending={len(state.pending)} batches={len(state.batches)}>"
        )

    @property
    def closed_reason(self) -> str | None:
        """Why the instance closed (deleted, expired, the gateway stopped); None while it is open."""
        return self._state.closed_reason

    @property
    def closed(self) -> bool:
        return self._state.closed_reason is not None

    @property
    def pending_count(self) -> int:
        return len(self._state.pending)

    @property
    def buffered_count(self) -> int:
        return self._state.buffered()

    def delivered_to(self) -> dict[str, int]:
        """Per partition key, the index offset just past the last message delivered and not yet committed
        (of those whose offset is known)."""
        found: dict[str, int] = {}
        for pending, i in self._state.pending.items():
            run = pending.run
            offset = run.messages[run.start + i].offset
            if offset is not None:
                key = run.partition_key
                found[key] = max(found.get(key, -1), offset + INDEX_ENTRY_SIZE)
        return found

    def touch(self) -> None:
        self.last_used = self._state.clock()

    # --- settling and redelivery --------------------------------------------------------------------

    async def commit(self, tokens: Sequence[str] | None, *, consumed: bool = True) -> CommitResult:
        """Commit (or, with ``consumed=False``, roll back) the given tokens, or every delivered message when
        ``tokens`` is None (:meth:`Settler.settle`)."""
        self._state.check_open()
        result = await self._settler.settle(tokens, consumed=consumed)
        self._fetch_ahead()  # a batch it confirmed frees its partition
        return result

    async def nack(self, tokens: Sequence[str], delay: float, admit: Admit | None = None) -> NackResult:
        """Give messages back one by one, due ``delay`` seconds from now (:meth:`Redeliverer.nack`)."""
        self._state.check_open()
        result = await self._redeliverer.nack(tokens, delay, admit)
        self._fetch_ahead()  # a batch its settling confirmed frees its partition
        return result

    def extend_deadlines(self, tokens: Sequence[str], seconds: float) -> DeadlineResult:
        """Set the deadline of the given delivered messages to ``seconds`` from now."""
        self._state.check_open()
        return self._redeliverer.extend_deadlines(tokens, seconds)

    async def expire_uncommitted(self, now: float) -> int:
        """Roll back or redeliver what is past its deadline or commit timeout
        (:meth:`Redeliverer.expire_uncommitted`); returns how many batches were rolled back."""
        return await self._redeliverer.expire_uncommitted(now)

    # --- polling ------------------------------------------------------------------------------------

    async def poll(self, max_messages: int, max_bytes: int, timeout: float) -> Delivery:  # noqa: ASYNC109
        """Deliver up to ``max_messages`` messages whose values sum to at most ``max_bytes`` (one larger
        message is delivered alone), waiting up to ``timeout`` seconds for the first one. The first poll
        also waits up to ``assignment_wait`` seconds for a partition assignment."""
        async with self._poll_lock:
            state = self._state
            state.check_open()
            start = state.clock()
            draining = self._draining.done()
            if draining:
                timeout = 0.0  # the gateway is stopping: answer with what is there at once
            if self.auto_commit:
                self._settler.commit_at_poll()
            try:
                delivered = await self._poll(start, max_messages, max_bytes, timeout)
                self._next_poll = (max_messages, max_bytes)
                # before the due commits are sent: a fetch ahead of a partition carries its commit
                self._fetch_ahead()
                return delivered
            finally:
                if state.commits_due:
                    # shielded: a poll cancelled because its client left still sends the commits it made due
                    await asyncio.shield(self._settler.send_due_commits())

    async def _poll(
        self,
        start: float,
        max_messages: int,
        max_bytes: int,
        timeout: float,  # noqa: ASYNC109
    ) -> Delivery:
        """One poll's work under the poll lock, after its auto-commit (see :meth:`poll`)."""
        state = self._state
        redeliverer = self._redeliverer
        fetcher = self._fetcher
        clock = state.clock
        await redeliverer.expire_uncommitted(start)
        if not self._waited_for_assignment:
            self._waited_for_assignment = True
            await self.consumer.wait_for_assignment(max(timeout, self._assignment_wait))
        budget = Budget(max_messages, max_bytes)
        if state.delayed:
            redeliverer.release_due(start)
        self._take(budget)
        deadline = start + timeout
        # Fill the budget: block only while nothing is in hand, then take what is ready at once. A
        # retried message coming due ends a wait too.
        while not budget.full and not state.buffer and not self.closed and not self.consumer.closed:
            now = clock()
            until = min(deadline, state.delayed[0][0]) if state.delayed else deadline
            wait = 0.0 if budget.out else max(0.0, until - now)
            fetched = await fetcher.fetch(wait, fetcher.fetches_for(budget), empty=not budget.out)
            if state.delayed:
                redeliverer.release_due(clock())
            self._take(budget)
            # A joined fetch may end (empty) before this poll's deadline: then wait on with a new one.
            if not fetched and (budget.out or clock() >= deadline or self._draining.done()):
                break
        if not budget.out and self._draining.done():
            raise Unavailable(
                "the gateway is stopping; poll again in a moment (create a new instance if this one is gone)",
                retry_after=1.0,
            )
        return Delivery(budget.out, budget.taken)

    def begin_drain(self) -> None:
        """The gateway is stopping: a poll waiting now answers with what it has (503 when nothing), and
        later polls do not wait."""
        if not self._draining.done():
            self._draining.set_result(None)

    def _fetch_ahead(self) -> None:
        """Fetch ahead of the next poll, one as large as the last (:meth:`Fetcher.ahead`)."""
        if self._next_poll is not None:
            self._fetcher.ahead(*self._next_poll)

    @property
    def poll_fetches(self) -> int:
        """Core fetches a poll started and waited for (nothing in hand or on its way) that brought batches."""
        return self._fetcher.poll_fetches

    @property
    def fetches_ahead(self) -> int:
        """Core fetches started ahead of a poll."""
        return self._fetcher.fetches_ahead

    @property
    def fetching(self) -> int:
        """Core fetch loops running for this instance (0 or 1)."""
        return self._fetcher.running

    def pending_after(self, seq: int) -> Delivery:
        """Delivered, uncommitted messages with a token above ``seq``, in delivery order (SSE resume)."""
        return Delivery(self._state.pending.after(seq))

    def _take(self, budget: Budget) -> None:
        """Deliver from the front of the buffer within ``budget``: a run per buffered segment it takes from
        (or a part of one), with no work per message."""
        state = self._state
        buffer = state.buffer
        if not buffer:
            return
        out = budget.out
        pending = state.pending
        limit = budget.max_messages
        max_bytes = budget.max_bytes
        used = budget.used
        taken = budget.taken
        deadline = state.clock() + self.ack_deadline
        deadline_ms = state.wall() + int(self.ack_deadline * 1000)
        if deadline < state.next_deadline:
            state.next_deadline = deadline
        while buffer and taken < limit:
            segment = buffer[0]
            start, end, sizes = segment.start, segment.end, segment.sizes
            base = sizes[start - 1] if start else 0
            reach = base + max_bytes - used
            # the messages whose values fit in the bytes left (one larger message goes alone when nothing
            # was taken yet), up to the one whose value fills them
            fit = bisect_right(sizes, reach, start, end) - start
            if fit == 0:
                if taken:
                    break
                fit = 1
            n = min(fit, bisect_left(sizes, reach, start, end) - start + 1, limit - taken)
            seq = self._next_seq
            self._next_seq = seq + n
            batch = segment.batch
            where = segment.origin or batch
            attempt = segment.origin.attempt if segment.origin is not None else 1
            run = DeliveredRun(
                seq,
                where.topic,
                where.partition_key,
                where.broker_id,
                where.partition_id,
                segment.messages,
                start,
                n,
                attempt,
                deadline,
                deadline_ms,
            )
            batch.undelivered -= n
            batch.uncommitted += n
            pending.add(run, batch)
            out.append(run)
            taken += n
            used += sizes[start + n - 1] - base
            if start + n == end:
                buffer.popleft()
            else:
                segment.start = start + n
            if used >= max_bytes:
                break
        budget.used = used
        budget.taken = taken

    async def seek(self, offsets: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """Move the group's read position in held partitions (partition key -> broker index offset; 0 is
        the oldest message kept, ``LATEST_OFFSET`` the end): what this instance fetched, buffered or
        delivered of them and did not commit is rolled back first (its tokens become stale). Returns each
        partition's (current, max) offsets as the broker reports them."""
        state = self._state
        state.check_open()
        held = {p.partition_key for p in self.consumer.assignment()}
        unknown = sorted(k for k in offsets if k not in held or k.split(":")[1] == self.policy.retry_topic)
        if unknown:
            raise InvalidInput(
                f"this instance does not hold partitions {unknown[:10]} (its partitions are listed by "
                "GET on the instance; the retry topic's cannot be moved)",
                field="offsets",
            )
        settler = self._settler
        state.seeking.update(offsets)
        try:
            old = [b for b in state.batches.values() if b.partition_key in offsets]
            for batch in old:
                settler.discard(batch)
            await asyncio.gather(*(settler.confirm(b, False) for b in old))
            moved = await asyncio.gather(*(self.consumer.seek(k, o) for k, o in offsets.items()))
        finally:
            state.seeking.difference_update(offsets)
        return dict(zip(offsets, moved, strict=True))

    def partition_released(self, partition_key: str) -> None:
        """The core stopped holding a partition: its batches can no longer be confirmed."""
        for batch in [b for b in self._state.batches.values() if b.partition_key == partition_key]:
            self._settler.discard(batch)

    # --- closing ------------------------------------------------------------------------------------

    async def close(self, reason: str, *, commit_delivered: bool) -> None:
        """Leave the group. With ``commit_delivered`` every delivered message is committed first; anything
        else not confirmed is rolled back by the core and redelivered to the group.

        Safe to call twice and safe to cancel: the first call's steps run to their end in a task of their
        own (:mod:`gateway.tubemq.net.teardown`); later calls wait for them."""
        if self._closer is None:
            self._state.closed_reason = reason
            name = f"consumer-instance-close-{self.instance_id}"
            self._closer = CloseOnce(lambda: self._close_steps(commit_delivered), name=name)
        await self._closer()

    @property
    def close_done(self) -> bool:
        """Whether a close ran to its end."""
        return self._closer is not None and self._closer.done

    async def _close_steps(self, commit_delivered: bool) -> None:
        state = self._state
        if commit_delivered and state.pending:
            try:
                await self._settler.settle(None, consumed=True)
            except TubeMQError as exc:
                log.warning("committing %s before close failed: %s", redact(self.instance_id), exc)
        try:
            await self._settler.keep_committed_heads()
            await self.consumer.close()
        finally:
            await self._fetcher.join()
            state.buffer.clear()
            state.delayed.clear()
            state.pending.clear()
            state.batches.clear()
            self._fetcher.close()
