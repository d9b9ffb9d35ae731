"""The consumer's conversation with the master (register, heartbeat, close; §6.2, §6.3, §6.14) and the
per-broker heartbeats that keep its partition registrations alive (§6.11).

Master heartbeat, every ``heartbeat_interval`` (every ``unassigned_heartbeat_interval`` while no partition is
held, so a new member learns its first assignment promptly):

* a finished rebalance event is acknowledged (status DONE, the event's subscribeInfo as received) together
  with the full list of held partitions; a beat that fails keeps the acknowledgement for the next beat,
  because the master hands out no further event before it;
* otherwise the held partitions are reported on every ``report_every``-th beat, and also as soon as they
  changed while no event runs (a partition dropped after a broker failure is then re-balanced at once
  instead of up to six beats later; Java waits for the sixth beat);
* 411 (the master does not know the consumer: it expired or the master changed) re-registers at once with
  the held partitions; after ``heartbeat_failures_before_slowdown`` failures in a row the next beat waits
  ``heartbeat_interval_after_fail``.

Broker heartbeat, every ``broker_heartbeat_interval``, one request per broker holding partitions: partitions
in ``failureInfo`` are dropped; a 415 or a transport failure drops every partition of that broker (Java's
rule: the registration cannot be kept alive, the master re-balances it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.tubemq.consumer.events import ConsumerHeartbeatFailed, ConsumerRegistered
from gateway.tubemq.consumer.partition_registration import READ_PRIORITY
from gateway.tubemq.consumer.rebalance import Rebalancer, RebalanceTask
from gateway.tubemq.consumer.state import ConsumerContext
from gateway.tubemq.errors import ServerError, TubeMQError, for_code
from gateway.tubemq.net.backoff import Backoff, ConstantBackoff, ExponentialBackoff
from gateway.tubemq.net.master import MasterClient
from gateway.tubemq.wire import rpc
from gateway.tubemq.wire.meta import (
    BrokerInfo,
    MetaFormatError,
    Partition,
    SubscribeInfo,
    format_topic_condition,
    parse_failure_info,
)
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb

__all__ = ["BrokerHeartbeat", "MasterSession"]

log = logging.getLogger(__name__)

HB_NO_NODE = 411
#: master answers that registering again cannot fix (§6.2, §8.1); 415: the same credentials (and clock) are
#: refused again, so the caller hears it at once instead of after every attempt's wait
_FATAL_REGISTER = frozenset({400, 415, 424, 425, 426, 427, 428, 429, 430, 431, 450, 455})
_UNSET_ID = -2


class MasterSession:
    """Registration and heartbeats of one consumer at the master."""

    def __init__(
        self, ctx: ConsumerContext, master: MasterClient, rebalancer: Rebalancer, topics: list[str]
    ) -> None:
        self._ctx = ctx
        self._master = master
        self._rebalancer = rebalancer
        self._topics = topics
        self._session_time_ms = int(time.time() * 1000)
        self._beats = 0
        self._reported_version = -1
        self.failures = 0
        self._wake = asyncio.Event()

    def __repr__(self) -> str:
        return f"<MasterSession {self._ctx.client_id} beats={self._beats} failures={self.failures}>"

    def wake(self) -> None:
        """Send the next heartbeat now."""
        self._wake.set()

    # --- register -----------------------------------------------------------------------------------

    def register_request(self) -> master_pb.RegisterRequestC2M:
        ctx = self._ctx
        request = master_pb.RegisterRequestC2M(
            clientId=ctx.client_id,
            groupName=ctx.group,
            hostName=ctx.host_name,
            topicList=self._topics,
            subscribeInfo=self._held_subscribe_info(),
            topicCondition=[format_topic_condition(t, items) for t, items in ctx.filters.items() if items],
            requireBound=ctx.config.bound is not None,
            sessionTime=self._session_time_ms,
            groupFlowCheckId=_UNSET_ID,
            defFlowCheckId=_UNSET_ID,
            qryPriorityId=_UNSET_ID,
        )
        bound = ctx.config.bound
        if bound is not None:
            request.sessionKey = bound.session_key
            request.totalCount = bound.source_count
            request.selectBig = bound.select_big
            request.requiredPartition = bound.required_partition()
            request.notAllocated = ctx.not_allocated
        return request

    async def register(self, *, again: bool) -> None:
        """Register once; raises the master's ServerError or the transport/remote error."""
        ctx = self._ctx
        answer = await self._master.call(rpc.Method.CONSUMER_REGISTER, self.register_request())
        assert isinstance(answer, master_pb.RegisterResponseM2C)
        if not answer.success or answer.errCode != 200:
            raise for_code(answer.errCode, answer.errMsg)
        if answer.HasField("notAllocated") and not answer.notAllocated:
            ctx.not_allocated = False
        if answer.HasField("authorizedInfo"):
            ctx.visit_token = answer.authorizedInfo.visitAuthorizedToken
        self._reported_version = ctx.cache.version
        ctx.emit(ConsumerRegistered(ctx.client_id, ctx.group, again, len(ctx.cache)))

    async def register_with_retries(self) -> None:
        """start(): up to ``register_attempts`` attempts with growing waits; answers that another attempt
        cannot fix (bad request, refused credentials, inconsistent group, topic not deployed, forbidden) are
        raised at once."""
        config = self._ctx.config
        wait = config.register_retry_wait
        backoff: Backoff = ExponentialBackoff(wait, wait * 8) if wait > 0 else ConstantBackoff(0.0)
        for attempt in range(1, config.register_attempts + 1):
            try:
                await self.register(again=False)
                return
            except ServerError as exc:
                if exc.errno in _FATAL_REGISTER or attempt == config.register_attempts:
                    raise
            except TubeMQError:
                if attempt == config.register_attempts:
                    raise
            await asyncio.sleep(backoff.compute(attempt))

    async def close(self) -> None:
        request = master_pb.CloseRequestC2M(clientId=self._ctx.client_id, groupName=self._ctx.group)
        await self._master.call(rpc.Method.CONSUMER_CLOSE, request)

    # --- heartbeat ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeat loop: the first beat at once, then every interval; runs until cancelled."""
        config = self._ctx.config
        while True:
            try:
                await self.heartbeat()
            except Exception as exc:
                log.exception(
                    "consumer master heartbeat failed unexpectedly",
                    extra={"client_id": self._ctx.client_id, "group": self._ctx.group},
                )
                self._failed(f"unexpected: {exc!r}", None)
            slow = self.failures > config.heartbeat_failures_before_slowdown
            if slow:
                interval = config.heartbeat_interval_after_fail
            elif not len(self._ctx.cache):
                interval = min(config.heartbeat_interval, config.unassigned_heartbeat_interval)
            else:
                interval = config.heartbeat_interval
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._wake.wait()
            self._wake.clear()

    async def heartbeat(self) -> None:
        """One master heartbeat with its acknowledgement, report and event hand-off."""
        ctx = self._ctx
        ctx.cache.expire_unconfirmed(ctx.clock(), ctx.config.confirm_timeout)
        finished = self._rebalancer.finished
        task = finished.popleft() if finished else None
        self._beats += 1
        version = ctx.cache.version
        changed = version != self._reported_version and not self._rebalancer.busy
        report = task is not None or changed or self._beats % ctx.config.report_every == 0
        request = master_pb.HeartRequestC2M(
            clientId=ctx.client_id,
            groupName=ctx.group,
            reportSubscribeInfo=report,
            defFlowCheckId=_UNSET_ID,
            groupFlowCheckId=_UNSET_ID,
            qryPriorityId=_UNSET_ID,
        )
        if report:
            request.subscribeInfo.extend(self._held_subscribe_info())
        if task is not None:
            request.event.CopyFrom(task.done_proto())
        try:
            answer = await self._master.call(rpc.Method.CONSUMER_HEARTBEAT, request)
        except TubeMQError as exc:
            self._failed(str(exc), task)
            return
        assert isinstance(answer, master_pb.HeartResponseM2C)
        if not answer.success or answer.errCode != 200:
            if answer.errCode == HB_NO_NODE:
                await self._register_again()
            else:
                self._failed(f"errCode {answer.errCode}: {answer.errMsg}", task)
            return
        self.failures = 0
        if report:
            self._reported_version = version
        if answer.HasField("notAllocated") and not answer.notAllocated:
            ctx.not_allocated = False
        if answer.HasField("authorizedInfo"):
            ctx.visit_token = answer.authorizedInfo.visitAuthorizedToken
        if answer.HasField("event") and answer.event.rebalanceId > 0 and not ctx.closing:
            self._rebalancer.submit(RebalanceTask.from_proto(answer.event))

    async def _register_again(self) -> None:
        # The master lost us (expiry or master change): any unacknowledged event died with that state.
        try:
            await self.register(again=True)
        except TubeMQError as exc:
            self._failed(f"re-register: {exc}", None)
            return
        self.failures = 0

    def _failed(self, error: str, task: RebalanceTask | None) -> None:
        ctx = self._ctx
        if task is not None:
            self._rebalancer.finished.appendleft(task)
        self.failures += 1
        ctx.emit(ConsumerHeartbeatFailed(ctx.client_id, ctx.group, "master", error, self.failures))

    def _held_subscribe_info(self) -> list[str]:
        ctx = self._ctx
        return [str(SubscribeInfo(ctx.client_id, ctx.group, s.partition)) for s in ctx.cache.held()]


class BrokerHeartbeat:
    """Heartbeats to every broker where the consumer holds partitions."""

    def __init__(self, ctx: ConsumerContext, rebalancer: Rebalancer) -> None:
        self._ctx = ctx
        self._rebalancer = rebalancer
        self._failures: dict[BrokerInfo, int] = {}

    def __repr__(self) -> str:
        return f"<BrokerHeartbeat failures={self._failures}>"

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._ctx.config.broker_heartbeat_interval)
            try:
                await self.beat_all()
            except Exception:
                log.exception(
                    "consumer broker heartbeat failed unexpectedly",
                    extra={"client_id": self._ctx.client_id, "group": self._ctx.group},
                )

    async def beat_all(self) -> None:
        groups = self._ctx.cache.by_broker()
        await asyncio.gather(*(self.beat(broker, parts) for broker, parts in groups.items()))

    async def beat(self, broker: BrokerInfo, partitions: list[Partition]) -> None:
        ctx = self._ctx
        request = broker_pb.HeartBeatRequestC2B(
            clientId=ctx.client_id,
            groupName=ctx.group,
            readStatus=0,
            partitionInfo=[str(p) for p in partitions],
            qryPriorityId=READ_PRIORITY,  # as registered: a heartbeat's value replaces the registration's
            authInfo=broker_pb.AuthorizedInfo(visitAuthorizedToken=ctx.visit_token),
        )
        try:
            answer = await ctx.broker_call(partitions[0], rpc.Method.CONSUMER_BROKER_HEARTBEAT, request)
        except TubeMQError as exc:
            self._broker_failed(broker, partitions, str(exc))
            return
        assert isinstance(answer, broker_pb.HeartBeatResponseB2C)
        if not answer.success:
            if answer.errCode == 415:
                self._broker_failed(broker, partitions, f"errCode 415: {answer.errMsg}")
            else:
                self._note_failure(broker, f"errCode {answer.errCode}: {answer.errMsg}")
            return
        self._failures.pop(broker, None)
        for text in answer.failureInfo:
            try:
                failure = parse_failure_info(text)
            except MetaFormatError:
                continue
            self._rebalancer.drop(failure.partition.partition_key, "broker")

    def _broker_failed(self, broker: BrokerInfo, partitions: list[Partition], error: str) -> None:
        self._note_failure(broker, error)
        for partition in partitions:
            self._rebalancer.drop(partition.partition_key, "broker")

    def _note_failure(self, broker: BrokerInfo, error: str) -> None:
        ctx = self._ctx
        count = self._failures[broker] = self._failures.get(broker, 0) + 1
        ctx.emit(ConsumerHeartbeatFailed(ctx.client_id, ctx.group, f"broker:{broker.address}", error, count))
