"""Releasing the TubeMQ registrations of consumers whose process died without closing them.

A consumer that dies holds its partitions at their brokers and its place in the group at the master until
they time out (the broker's ``consumerRegTimeoutMs``, 35 s by default in the real broker, and the master's
heartbeat timeout): meanwhile a new consumer of the group is refused those partitions (``410 [Duplicated
Register] ... has been registered by``). Whoever knows the dead consumer's client id and group can close it
the way the real client's ``shutdown()`` does: unregister each held partition at its broker (``opType`` 32,
here with ``readStatus`` 1, so a batch handed out and not confirmed is rolled back and delivered again), then
tell the master (``CloseRequestC2M``), which drops it from the group and rebalances at once. The broker
accepts the unregistration from any link as long as the client id matches its holder's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.partition_registration import build_partition_unregister_request
from gateway.tubemq.errors import TubeMQError
from gateway.tubemq.net.master import MasterClient
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.wire.meta import BrokerInfo, MetaFormatError, Partition, parse_partition_key
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import Method

__all__ = ["LeftoverConsumer", "ReleaseOutcome", "release_leftovers"]

_UNDEFINED = -2
_SUCCESS = 200


@dataclass(frozen=True, slots=True)
class LeftoverConsumer:
    """A consumer a dead process left registered: its client id, group and held partition keys."""

    client_id: str
    group: str
    partition_keys: tuple[str, ...] = ()


@dataclass(slots=True)
class ReleaseOutcome:
    """What :func:`release_leftovers` did: partitions unregistered (or already free), failures, closes."""

    unregistered: int = 0
    failed: int = 0
    closed: int = 0


async def release_leftovers(
    pool: ConnectionPool,
    masters: Sequence[NodeAddress],
    brokers: Mapping[int, NodeAddress],
    leftovers: Sequence[LeftoverConsumer],
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 - bounds each call
    visit_token: int = _UNDEFINED,
) -> ReleaseOutcome:
    """Close ``leftovers`` as their own client would (module docstring); ``brokers`` gives the broker
    addresses by id (a partition on a broker not listed is left to time out). Never raises a TubeMQ error:
    what cannot be released expires by itself."""
    outcome = ReleaseOutcome()
    master = MasterClient(masters, pool, timeout=timeout)

    async def unregister(consumer: LeftoverConsumer, key: str) -> None:
        try:
            broker_id, topic, partition_id = parse_partition_key(key)
        except MetaFormatError:
            outcome.failed += 1
            return
        address = brokers.get(broker_id)
        if address is None:
            outcome.failed += 1
            return
        partition = Partition(BrokerInfo(broker_id, address.host, address.port), topic, partition_id)
        request = build_partition_unregister_request(
            consumer.client_id, consumer.group, partition, consumed=False, visit_token=visit_token
        )
        if pool.credentials is not None:
            pool.credentials.stamp_broker_request(request)
        try:
            answer = await pool.request(address, Method.CONSUMER_BROKER_REGISTER, request, timeout)
        except TubeMQError:
            outcome.failed += 1
            return
        assert isinstance(answer, broker_pb.RegisterResponseB2C)
        # 411: the broker has forgotten it already; 412: another consumer holds it now. Both mean free.
        if answer.errCode in (_SUCCESS, 411, 412):
            outcome.unregistered += 1
        else:
            outcome.failed += 1

    async def close(consumer: LeftoverConsumer) -> None:
        await asyncio.gather(*(unregister(consumer, key) for key in consumer.partition_keys))
        request = master_pb.CloseRequestC2M(clientId=consumer.client_id, groupName=consumer.group)
        try:
            await master.call(Method.CONSUMER_CLOSE, request)
        except TubeMQError:
            return
        outcome.closed += 1

    await asyncio.gather(*(close(consumer) for consumer in leftovers))
    return outcome
