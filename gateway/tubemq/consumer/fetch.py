"""One GetMessage for the consumer (§6.6): send it, decode the batch, or park the partition for the wait its
outcome asks for, and report the outcome as a :class:`FetchOutcome` event.

Outcomes: 200 with messages gives a batch (the partition stays taken until the batch is confirmed); 200
without messages left after decoding releases the partition as consumed (the next fetch commits the read
advance over filtered entries); 411/412/415 drop the partition (the master re-balances it); 404, 452, 403,
301, 503 and other codes park it for ``not_found_wait`` (doubled by each 404 in a row up to
``not_found_max_wait`` and back to the base after data, so idle partitions cost their broker little),
``minLimitTime`` (452), ``forbidden_wait``, ``moved_wait``, ``unavailable_wait`` and ``error_wait``; a
transport failure parks it for ``transport_error_wait``. Every release except a batch's is "not consumed":
the broker then reads the same data again.

A fetch whose ``lastPackConsumed`` carries a commit confirmed in the consumer alone (``Selection.commit_due``)
reports it as an :class:`OffsetCommitted` event once the broker answered. The broker commits before it reads
(``getOffset``), so a 200, 404 or 452 answer committed it; after any other answer the partition keeps the
commit due for its next request. A transport failure gives the partition back as not consumed, like every
failed fetch: if the broker did read a batch, only that keeps it from being skipped (the committed batch may
then come again: at-least-once).
"""

from __future__ import annotations

from gateway.tubemq.consumer.batch import (
    ConsumedBatch,
    DecodedAnswer,
    answer_reader,
    lag_entries,
    read_answer,
)
from gateway.tubemq.consumer.events import FetchOutcome, OffsetCommitted
from gateway.tubemq.consumer.rebalance import Rebalancer
from gateway.tubemq.consumer.state import ConsumerContext, Selection, empty_fetch_wait
from gateway.tubemq.errors import TubeMQError
from gateway.tubemq.wire import rpc
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb

__all__ = ["Fetcher"]

#: GetMessage answers the broker gives after its commit step (``getOffset``)
_COMMITTED_CODES = frozenset({200, 404, 452})


class Fetcher:
    """Runs GetMessage requests for partitions handed out by the cache."""

    def __init__(self, ctx: ConsumerContext, rebalancer: Rebalancer) -> None:
        self._ctx = ctx
        self._rebalancer = rebalancer

    def __repr__(self) -> str:
        return f"<Fetcher {self._ctx.client_id}>"

    async def fetch(self, selection: Selection) -> ConsumedBatch | None:
        """One GetMessage; returns a batch (the partition stays taken) or None (the partition is back,
        possibly after a wait, or dropped)."""
        ctx = self._ctx
        partition = selection.partition
        key = partition.partition_key
        request = broker_pb.GetMessageRequestC2B(
            clientId=ctx.client_id,
            partitionId=partition.partition_id,
            groupName=ctx.group,
            topicName=partition.topic,
            lastPackConsumed=selection.last_consumed,
            manualCommitOffset=False,
            escFlowCtrl=False,
        )
        started = ctx.clock()
        filters = ctx.filters.get(partition.topic) or None
        try:
            answer = await ctx.broker_call_decoded(
                partition, rpc.Method.GET_MESSAGES, request, answer_reader(filters)
            )
        except TubeMQError:
            # Not consumed: if the broker did read a batch, only a rollback keeps it from being skipped.
            self._give_back(selection, ctx.config.transport_error_wait)
            self._fetched(selection, "transport", -1, started)
            if selection.commit_due:
                self._committed(selection, -1, -1)
            return None
        if isinstance(answer, DecodedAnswer):  # a 200 read straight from its bytes (batch.answer_reader)
            if selection.commit_due:
                self._committed(selection, answer.curr_offset, 200)
            return self._batch(selection, answer, started)
        assert isinstance(answer, broker_pb.GetMessageResponseB2C)
        code = answer.errCode
        committed = code in _COMMITTED_CODES
        if selection.commit_due and committed:
            self._committed(selection, answer.currOffset if answer.HasField("currOffset") else -1, 200)
        if code == 200:
            return self._batch(selection, read_answer(answer, filters), started)
        if code in (411, 412, 415):
            self._rebalancer.drop(key, "broker")
            self._fetched(selection, "dropped", code, started)
            return None
        outcome, wait = self.error_wait(answer)
        if code == 404:
            state = selection.state
            config = ctx.config
            wait = empty_fetch_wait(state.empty_fetches, config.not_found_wait, config.empty_fetch_cap)
            state.empty_fetches += 1
        self._give_back(selection, wait, keep_commit=selection.commit_due and not committed)
        # 404: the read position has reached the end of the store, so nothing is left to read.
        self._fetched(selection, outcome, code, started, lag=0 if outcome == "not_found" else -1)
        return None

    def _batch(self, selection: Selection, answer: DecodedAnswer, started: float) -> ConsumedBatch | None:
        ctx = self._ctx
        partition = selection.partition
        key = partition.partition_key
        if not ctx.cache.is_in_use(key, selection.token):
            # Released meanwhile (rebalance timeout, close, broker failure); its broker rolls the read back.
            self._fetched(selection, "dropped", 200, started)
            return None
        curr, max_offset, fetched = answer.curr_offset, answer.max_offset, answer.fetched_count
        messages, stats = answer.messages, answer.stats
        ctx.cache.update_offsets(key, curr, max_offset)
        selection.state.empty_fetches = 0  # data: fetch at the base rate again
        lag = lag_entries(curr, max_offset, fetched)
        if not messages:
            # Nothing to hand over: let the next fetch commit the read advance (over filtered entries).
            ctx.cache.release(key, selection.token, consumed=True, wait=0.0, now=ctx.clock())
            self._fetched(selection, "empty", 200, started, lag=lag)
            return None
        self._fetched(selection, "ok", 200, started, len(messages), stats.bytes, lag=lag)
        return ConsumedBatch(
            topic=partition.topic,
            partition_key=key,
            partition_id=partition.partition_id,
            broker_id=partition.broker.broker_id,
            broker=partition.broker.address,
            messages=messages,
            curr_offset=curr,
            max_offset=max_offset,
            lag_bytes=answer.lag_bytes,
            fetched_count=fetched,
            confirm_context=f"{key}:{selection.token}",
            offsets_exact=answer.offsets_exact,
            body_bytes=stats.bytes,
        )

    def error_wait(self, answer: broker_pb.GetMessageResponseB2C) -> tuple[str, float]:
        """The outcome name and the wait before the partition is fetched again (§6.6)."""
        config = self._ctx.config
        code = answer.errCode
        if code == 404:
            return "not_found", config.not_found_wait
        if code == 452:
            has_limit = answer.HasField("minLimitTime") and answer.minLimitTime >= 0
            return "speed_limit", answer.minLimitTime / 1000 if has_limit else config.not_found_wait
        if code == 403:
            return "forbidden", config.forbidden_wait
        if code == 301:
            return "moved", config.moved_wait
        if code == 503:
            return "unavailable", config.unavailable_wait
        return "error", config.error_wait

    def _give_back(self, selection: Selection, wait: float, *, keep_commit: bool = False) -> None:
        """Release as not consumed, or with ``keep_commit`` (an answer given before the broker's commit
        step, which read nothing) with the due commit still due."""
        ctx = self._ctx
        ctx.cache.release(
            selection.partition.partition_key,
            selection.token,
            consumed=keep_commit,
            commit_due=keep_commit,
            wait=wait,
            now=ctx.clock(),
        )

    def _committed(self, selection: Selection, offset: int, code: int) -> None:
        ctx = self._ctx
        partition = selection.partition
        ctx.emit(
            OffsetCommitted(
                ctx.client_id, ctx.group, partition.topic, partition.partition_key, True, offset, code
            )
        )

    def _fetched(
        self,
        selection: Selection,
        outcome: str,
        code: int,
        started: float,
        messages: int = 0,
        size: int = 0,
        *,
        lag: int = -1,
    ) -> None:
        ctx = self._ctx
        if ctx.events is None:
            return
        partition = selection.partition
        duration = ctx.clock() - started
        ctx.emit(
            FetchOutcome(
                ctx.client_id,
                ctx.group,
                partition.topic,
                partition.partition_key,
                outcome,
                code,
                messages,
                size,
                duration,
                lag,
            )
        )
