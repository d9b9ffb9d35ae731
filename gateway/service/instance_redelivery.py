"""Per-message redelivery of a consumer instance: retried messages read back from the retry topic and held
until due, deadlines (expiry sends a message alone to the retry topic, or rolls its batch back without
one; extensions), and nacks (:mod:`gateway.service.redelivery` has the topics' rules). A collaborator of
:class:`gateway.service.instance.ConsumerInstance`."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
from collections.abc import Callable, Sequence

from gateway.observability.redelivery_events import RedeliveryCounted
from gateway.service.delivered import DeadlineResult, DeliveredMessage, NackResult
from gateway.service.errors import InvalidInput, Quota, RateLimited
from gateway.service.instance_holdings import Holdings
from gateway.service.instance_id import redact
from gateway.service.instance_records import Batch, Segment, parse_token
from gateway.service.instance_settle import Settler
from gateway.service.redelivery import Republisher, due_ms, parse_retried, republish
from gateway.tubemq.consumer import ConsumedMessage
from gateway.tubemq.events import EventBus

__all__ = ["Admit", "Redeliverer"]

#: charges a nack's retry publishes (messages, value bytes) to its caller, or raises to refuse them; returns
#: what gives back what they hold once they are done (``gateway.service.retry_admission``)
Admit = Callable[[int, int], Callable[[], None]]

log = logging.getLogger("gateway.service.consumers")


class Redeliverer:
    """Retried messages, deadlines and nacks of one consumer instance, on its :class:`Holdings`; what a
    redelivery settles goes through its :class:`Settler`. ``republisher`` publishes the retry and
    dead-letter copies (None: the instance has no retry topic); ``events`` counts redeliveries (None:
    nowhere); ``commit_timeout`` (seconds) bounds how long a fetched batch may wait for its delivery."""

    __slots__ = (
        "_commit_timeout",
        "_delay_order",
        "_events",
        "_outstanding",
        "_republisher",
        "_settler",
        "_settling",
        "_state",
    )

    def __init__(
        self,
        state: Holdings,
        settler: Settler,
        *,
        republisher: Republisher | None,
        events: EventBus | None,
        commit_timeout: float,
    ) -> None:
        self._state = state
        self._settler = settler
        self._republisher = republisher
        self._events = events
        self._commit_timeout = commit_timeout
        self._delay_order = itertools.count()
        #: tokens whose retry or dead-letter publish is in flight
        self._settling: set[int] = set()
        #: due times (``clock``'s) of the retry copies this instance published that are not due yet, a heap
        self._outstanding: list[float] = []

    def add_retried(self, record: Batch, messages: Sequence[ConsumedMessage]) -> None:
        """A batch of the retry topic: messages due now go to the buffer, the others wait in ``delayed``
        (holding the batch, so its partition, until they are delivered and settled). The batch's
        buffered-message timeout counts from when its last message is due. A message that is not a retry
        copy the gateway signed for this group is set aside: never delivered, counted, and its batch
        confirmed as consumed once nothing else of it is left."""
        state = self._state
        wall = state.wall()
        now = state.clock()  # read after the wall clock: the time left is counted from no earlier a moment
        latest = now
        set_aside = 0
        for message in messages:
            parsed = parse_retried(message, state.group, state.policy, now, wall)
            if parsed is None:
                set_aside += 1
                continue
            stripped, origin = parsed
            entry = Segment(record, [stripped], 0, 1, [len(stripped.body)], origin)
            if origin.due <= now:
                state.buffer.append(entry)
            else:
                heapq.heappush(state.delayed, (origin.due, next(self._delay_order), entry))
                latest = max(latest, origin.due)
        record.fetched_at = latest
        if set_aside:
            record.undelivered -= set_aside
            log.warning(
                "%d messages of retry topic %s were set aside: not retry copies the gateway signed for group "
                "%s (published there by another client, or signed with a secret no longer configured)",
                set_aside,
                record.topic,
                state.group,
            )
            if self._events is not None:
                self._events.emit(RedeliveryCounted(state.group, set_aside=set_aside))
            if record.undelivered == 0:
                self._settler.confirm_unseen(record)

    def release_due(self, now: float) -> None:
        """Move retried messages that are due from ``delayed`` to the buffer, in due order."""
        state = self._state
        delayed = state.delayed
        while delayed and delayed[0][0] <= now:
            entry = heapq.heappop(delayed)[2]
            if entry.batch.live:
                state.buffer.append(entry)

    async def expire_uncommitted(self, now: float) -> int:
        """Deadlines: a delivered message past its deadline goes to the retry topic as its next delivery
        attempt (or the dead-letter topic past the maximum), alone; without a retry topic (or when that
        publish fails) its whole batch is rolled back. A batch whose fetched messages were not all delivered
        within ``commit_timeout`` is rolled back too. Returns how many batches were rolled back."""
        state = self._state
        old = {
            b: None
            for b in state.batches.values()
            if b.undelivered and now - b.fetched_at > self._commit_timeout
        }
        if now >= state.next_deadline:
            expired: list[int] = []
            earliest = math.inf
            settling = self._settling
            for pending in state.pending.runs():
                run = pending.run
                if pending.deadlines is None and run.deadline >= now:
                    earliest = min(earliest, run.deadline)  # the whole run is within its deadline
                    continue
                for i in range(run.count):
                    if not pending.is_open(i):
                        continue
                    deadline = pending.deadline(i)[0]
                    if deadline < now and run.first + i not in settling:
                        expired.append(run.first + i)
                    elif deadline < earliest:
                        earliest = deadline
            state.next_deadline = earliest
            if expired and self._events is not None:
                self._events.emit(RedeliveryCounted(state.group, expired=len(expired)))
            if expired and state.policy.retry_topic is not None and self._republisher is not None:
                result = await self._redeliver_tokens([str(s) for s in expired], 0.0, "deadline")
                expired = [int(t) for t in result.failed]
                if result.error is not None:
                    log.warning(
                        "%d expired messages of %s could not go to the retry topic (%s); their batches are "
                        "rolled back instead",
                        len(expired),
                        redact(state.instance_id),
                        result.error,
                    )
            for seq in expired:
                found = state.pending.find(seq)
                if found is not None:
                    old[found[0].batch] = None
        for batch in old:
            self._settler.discard(batch, count=True)
        await asyncio.gather(*(self._settler.confirm(b, False) for b in old))
        return len(old)

    async def nack(self, tokens: Sequence[str], delay: float, admit: Admit | None = None) -> NackResult:
        """Give messages back one by one: each goes to the retry topic, due ``delay`` seconds from now, as
        its next delivery attempt (or, past ``max_delivery_attempts``, to the dead-letter topic) and is
        settled once a broker acknowledged that publish; its siblings are not redelivered. ``admit``
        charges the publishes to the caller (it raises to refuse them all); a nack that would leave more
        than the policy's ``max_outstanding`` retries not due yet is refused (RateLimited)."""
        state = self._state
        if state.policy.retry_topic is None or self._republisher is None:
            raise InvalidInput(
                "this instance has no retry topic: create it with retryTopic to nack single messages (or "
                "roll back whole batches with a commit of consumed false)",
                field="tokens",
            )
        for i, token in enumerate(tokens):
            parse_token(token, i)
        if delay > 0:
            self._check_outstanding(len(tokens))
        return await self._redeliver_tokens(tokens, delay, "nack", admit)

    def _check_outstanding(self, more: int) -> None:
        """RateLimited when ``more`` delayed retries would pass the policy's ``max_outstanding``."""
        state = self._state
        outstanding = self._outstanding
        now = state.clock()
        while outstanding and outstanding[0] <= now:
            heapq.heappop(outstanding)
        cap = state.policy.max_outstanding
        if len(outstanding) + more > cap:
            wait = max(0.0, outstanding[0] - now) if outstanding else 1.0
            raise RateLimited(
                f"consumer instance {redact(state.instance_id)} has {len(outstanding)} of its {cap} retries "
                f"outstanding (nacked with a delay, not due yet); nack fewer or with a shorter delay, commit "
                f"what needs no retry, or retry in {wait:.0f} s",
                retry_after=wait,
                quota=Quota("retries", cap, None, max(0, cap - len(outstanding)), "messages"),
            )

    async def _redeliver_tokens(
        self, tokens: Sequence[str], delay: float, why: str, admit: Admit | None = None
    ) -> NackResult:
        state = self._state
        chosen: list[tuple[str, int, DeliveredMessage]] = []
        stale: list[str] = []
        for token in tokens:
            seq = int(token)
            found = state.pending.find(seq)
            if found is None or seq in self._settling:
                stale.append(token)
                continue
            chosen.append((token, seq, state.pending.message(*found)))
        release = (
            admit(len(chosen), sum(len(d.message.body) for _, _, d in chosen)) if admit and chosen else None
        )
        self._settling.update(seq for _, seq, _ in chosen)
        try:
            outcomes = await asyncio.gather(
                *(self._republish(delivered, delay, why) for _, _, delivered in chosen),
                return_exceptions=True,
            )
        finally:
            self._settling.difference_update(seq for _, seq, _ in chosen)
            if release is not None:
                release()
        settled: list[str] = []
        failed: list[str] = []
        retried = dead = 0
        error: Exception | None = None
        for (token, _, _), outcome in zip(chosen, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                failed.append(token)
                error = error or outcome
                continue
            settled.append(token)
            if outcome:
                dead += 1
            else:
                retried += 1
        if retried and delay > 0:
            due = state.clock() + delay
            for _ in range(retried):
                heapq.heappush(self._outstanding, due)
        if self._events is not None and chosen:
            nacked = len(chosen) if why == "nack" else 0  # an expiry was counted by the deadline check
            counted = RedeliveryCounted(state.group, nacked=nacked, retried=retried, dead_lettered=dead)
            self._events.emit(counted)
        if settled:
            result = await self._settler.settle(settled, consumed=True)
            stale.extend(result.stale)  # settled meanwhile (committed, rolled back, lost): a duplicate copy
        return NackResult(retried, dead, stale, failed, len(state.pending), error)

    async def _republish(self, delivered: DeliveredMessage, delay: float, why: str) -> bool:
        """Publish one message to the retry or dead-letter topic (True: the latter); see ``republish``."""
        state = self._state
        assert self._republisher is not None
        return await republish(
            self._republisher,
            state.policy,
            state.group,
            delivered,
            due_ms=due_ms(state.wall(), delay),
            why=why,
        )

    def extend_deadlines(self, tokens: Sequence[str], seconds: float) -> DeadlineResult:
        """Set the deadline of the given delivered messages to ``seconds`` from now."""
        state = self._state
        seqs = [parse_token(token, i) for i, token in enumerate(tokens)]
        deadline = state.clock() + seconds
        deadline_ms = state.wall() + int(seconds * 1000)
        stale: list[str] = []
        extended = 0
        for token, seq in zip(tokens, seqs, strict=True):
            found = state.pending.find(seq)
            if found is None:
                stale.append(token)
                continue
            pending, i = found
            if pending.deadlines is None:
                pending.deadlines = {}
            pending.deadlines[i] = (deadline, deadline_ms)
            extended += 1
        if deadline < state.next_deadline:
            state.next_deadline = deadline
        return DeadlineResult(extended, stale, deadline_ms)
