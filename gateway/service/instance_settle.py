"""Settling what a consumer instance delivered: commits and rollbacks of tokens, and the confirmation of a
batch to the broker once all its messages are settled (a rollback gives the whole batch back). A
collaborator of :class:`gateway.service.instance.ConsumerInstance`."""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Sequence

from gateway.service.delivered import CommitResult
from gateway.service.instance_holdings import Holdings
from gateway.service.instance_pending import PendingRuns
from gateway.service.instance_records import Batch, PendingRun, parse_token
from gateway.tubemq.consumer import InvalidConfirmContext, offset_at_index
from gateway.tubemq.errors import ClientClosed, TubeMQError

__all__ = ["Settler"]

log = logging.getLogger("gateway.service.consumers")


class Settler:
    """Commits, rollbacks and batch confirmations of one consumer instance, on its :class:`Holdings`."""

    __slots__ = ("_state",)

    def __init__(self, state: Holdings) -> None:
        self._state = state

    async def settle(self, tokens: Sequence[str] | None, *, consumed: bool) -> CommitResult:
        """Commit (or, with ``consumed=False``, roll back) the given tokens, or every delivered message when
        ``tokens`` is None. Raises InvalidInput for a token that is not a token of any instance."""
        state = self._state
        if tokens is None and consumed:
            return await self._commit_all()
        if tokens is None:
            chosen = [(str(p.run.first + i), p.run.first + i) for p, i in state.pending.items()]
        else:
            chosen = [(token, parse_token(token, i)) for i, token in enumerate(tokens)]
        stale: list[str] = []
        touched: dict[Batch, list[str]] = {}
        given_back: list[tuple[PendingRun, int]] = []
        pending = state.pending
        for token, seq in chosen:
            found = pending.pop(seq)
            if found is None:
                stale.append(token)
                continue
            batch = found[0].batch
            batch.uncommitted -= 1
            if consumed:
                batch.committed += 1
            else:
                given_back.append(found)
            touched.setdefault(batch, []).append(token)
        rolled_back = 0
        if consumed:
            done = [b for b in touched if b.uncommitted == 0 and b.undelivered == 0]
        else:
            done = list(touched)
            rolled_back = sum(len(touched[b]) + self.discard(b, count=True) for b in done)
            for run, i in given_back:  # the named tokens left ``pending`` before the discard
                self._remember_attempt(run, i)
        outcomes = await asyncio.gather(*(self.confirm(b, consumed) for b in done))
        committed = sum(len(t) for t in touched.values()) if consumed else 0
        for batch, ok in zip(done, outcomes, strict=True):
            if not ok and consumed:
                # The core had already given the partition up: these messages come again.
                stale.extend(touched[batch])
                committed -= len(touched[batch])
        return CommitResult(committed, rolled_back, stale, len(state.pending), self._awaiting_batch())

    def commit_at_poll(self) -> None:
        """Auto-commit at the start of a poll: every delivered message counts as committed now. A batch
        whose messages are all committed is confirmed in the core alone: the next fetch of its partition
        (the poll's own, or the one it starts ahead of the next poll) carries the commit to the broker
        (``lastPackConsumed``), which saves a round trip before that fetch; :meth:`send_due_commits` sends,
        before the poll answers, what no fetch carries."""
        state = self._state
        if not state.pending:
            return
        state.pending = PendingRuns()
        for batch in [b for b in state.batches.values() if b.uncommitted]:
            batch.committed += batch.uncommitted
            batch.uncommitted = 0
            if batch.undelivered == 0:
                self.confirm_unseen(batch)

    def confirm_unseen(self, batch: Batch) -> None:
        """Confirm a batch as consumed in the core alone, for a commit nobody waits for: the partition's next
        fetch carries it to the broker, or :meth:`send_due_commits` before a poll answers. When the core had
        already given the partition up (as :meth:`confirm`'s False) its messages come again, and nobody is
        told."""
        state = self._state
        state.batches.pop(batch.context, None)
        batch.live = False
        key = state.consumer.confirm_local(batch.context)
        if key is not None:
            state.commits_due.add(key)

    async def send_due_commits(self) -> None:
        """Send the commits :meth:`commit_at_poll` left due that no fetch carried; a failed one stays due
        in the core and goes with the partition's next fetch (as a failed confirm's does)."""
        state = self._state
        keys, state.commits_due = state.commits_due, set()
        try:
            await state.consumer.send_due_commits(keys)
        except (InvalidConfirmContext, ClientClosed):
            return
        except TubeMQError as exc:
            log.warning("a commit failed (%s); it goes with the partition's next fetch", exc)

    async def _commit_all(self) -> CommitResult:
        """Commit every delivered message: per batch, not per message. Every pending message's batch is
        live (a batch leaves ``batches`` only once confirmed with nothing pending, or discarded with its
        pending messages)."""
        state = self._state
        pending = state.pending
        if not pending:
            return CommitResult(0, 0, [], 0, self._awaiting_batch())
        state.pending = PendingRuns()
        touched = [b for b in state.batches.values() if b.uncommitted]
        committed = 0
        for batch in touched:
            committed += batch.uncommitted
            batch.committed += batch.uncommitted
            batch.uncommitted = 0
        done = [b for b in touched if b.undelivered == 0]
        outcomes = await asyncio.gather(*(self.confirm(b, True) for b in done))
        failed = {b for b, ok in zip(done, outcomes, strict=True) if not ok}
        stale: list[str] = []
        if failed:
            # The core had already given those partitions up: their messages come again.
            stale = [str(p.run.first + i) for p, i in pending.items() if p.batch in failed]
            committed -= len(stale)
        return CommitResult(committed, 0, stale, len(state.pending), self._awaiting_batch())

    def _awaiting_batch(self) -> int:
        """Messages committed whose batch is still out (one batch per held partition at most)."""
        return sum(b.committed for b in self._state.batches.values())

    async def keep_committed_heads(self) -> int:
        """Before the instance leaves the group: for each batch whose first messages were committed and
        whose rest was not, set the group's offset in its partition to the first message not committed
        (the broker confirms whole batches only, so leaving would give the whole batch back). Returns how
        many partitions were moved.

        The offset is the batch's start plus one index entry per wire message before that message
        (:func:`offset_at_index`): exact where the partition's messages follow each other in its store (one
        partition per store, no filter); where siblings' entries lie between them it falls short, so a few
        committed messages come again and no other message is skipped. Moving it is a registration of the
        partition with that offset (:mod:`gateway.tubemq.consumer.seek`); where that fails the batch is
        rolled back whole."""
        state = self._state
        first_open: dict[Batch, int] = {}
        for segment in state.buffer:
            batch = segment.batch
            for message in segment.messages[segment.start : segment.end]:
                if batch not in first_open or message.index < first_open[batch]:
                    first_open[batch] = message.index
        for pending, i in state.pending.items():
            batch = pending.batch
            index = pending.run.messages[pending.run.start + i].index
            if batch not in first_open or index < first_open[batch]:
                first_open[batch] = index
        heads = [
            (batch, index)
            for batch, index in first_open.items()
            if batch.live
            and batch.start_offset >= 0
            and index > batch.first_index
            and batch.topic != state.policy.retry_topic
        ]
        for batch, _ in heads:
            self.discard(batch)
        given_back = await asyncio.gather(*(self.confirm(b, False) for b, _ in heads))
        moves = [
            (batch.partition_key, offset_at_index(batch.start_offset, index))
            for (batch, index), ok in zip(heads, given_back, strict=True)
            if ok
        ]
        outcomes = await asyncio.gather(
            *(state.consumer.seek(key, offset) for key, offset in moves), return_exceptions=True
        )
        moved = 0
        for (key, offset), outcome in zip(moves, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                log.warning(
                    "keeping the committed head of a batch of %s failed (%s): the batch comes again whole",
                    key,
                    outcome,
                    extra={"offset": offset},
                )
            else:
                moved += 1
        return moved

    async def confirm(self, batch: Batch, consumed: bool) -> bool:
        """Confirm a batch to the broker; False when the core no longer knows it (partition lost)."""
        state = self._state
        state.batches.pop(batch.context, None)
        batch.live = False
        try:
            await state.consumer.confirm(batch.context, consumed)
        except (InvalidConfirmContext, ClientClosed):
            return False
        except TubeMQError as exc:
            # The core released the partition with this outcome; the next fetch carries it to the broker.
            log.warning(
                "confirm of %s failed (%s); the outcome goes with the next fetch", batch.partition_key, exc
            )
        return True

    def discard(self, batch: Batch, *, count: bool = False) -> int:
        """Forget a batch's pending, buffered and delayed messages; returns how many were dropped. With
        ``count`` (a rollback) the delivered ones count a delivery attempt for when they come back here."""
        state = self._state
        state.batches.pop(batch.context, None)
        batch.live = False
        dropped = state.pending.drop_batch(batch)
        if count:
            for pending, i in dropped:
                self._remember_attempt(pending, i)
        before = state.buffered()
        if any(s.batch is batch for s in state.buffer):
            state.buffer = deque(s for s in state.buffer if s.batch is not batch)
        delayed = len(state.delayed)
        if delayed:
            state.delayed = [d for d in state.delayed if d[2].batch is not batch]
            heapq.heapify(state.delayed)
        return len(dropped) + before - state.buffered() + delayed - len(state.delayed)

    def _remember_attempt(self, pending: PendingRun, i: int) -> None:
        """Count a delivery attempt of a message given back (the ``i``-th of ``pending``), for when its
        partition hands it out again."""
        state = self._state
        batch = pending.batch
        if batch.topic != state.policy.retry_topic:  # a retried message keeps its count in its attributes
            run = pending.run
            message = run.messages[run.start + i]
            state.attempts.delivered_again(batch.partition_key, message.message_id, run.attempt)
