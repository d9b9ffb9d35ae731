"""Seek: move a consumer group's read position in a partition this consumer holds, while it holds it.

TubeMQ has no seek call. A registration of a partition (RegisterRequestC2B) carries an optional
``currOffset``; the broker sets the group's offset to it (clamped to the partition's oldest and newest index
offsets) whenever it is given, also when the same consumer registers a partition it already holds, and
forgets the position of a batch still out (``DefaultOffsetManager.loadOffset``, ``getAndResetTmpOffset``;
``BrokerServiceServer.inProcessConsumerRegister`` accepts a second registration by the same client). So a
seek pauses the partition (no new fetch), waits for a batch still out to come back (the caller rolls it
back first), registers the partition again with the new offset, and hands it out again from there.
"""

from __future__ import annotations

from gateway.tubemq.consumer.config import READ_NORMAL
from gateway.tubemq.consumer.events import PartitionRegistered
from gateway.tubemq.consumer.partition_registration import build_partition_register_request
from gateway.tubemq.consumer.rebalance import Rebalancer
from gateway.tubemq.consumer.state import ConsumerContext
from gateway.tubemq.errors import ClientError, for_code
from gateway.tubemq.wire import rpc
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb

__all__ = ["LATEST_OFFSET", "PartitionNotHeld", "seek_partition"]

#: an offset past every partition's end: the broker clamps it to the newest index offset
LATEST_OFFSET = 2**62


class PartitionNotHeld(ClientError):
    """The consumer does not hold the partition (not assigned to it, or leaving in a rebalance)."""


async def seek_partition(
    ctx: ConsumerContext, rebalancer: Rebalancer, key: str, offset: int
) -> tuple[int, int]:
    """Move the group's position in held partition ``key`` to broker index ``offset`` (0: the oldest
    message kept, :data:`LATEST_OFFSET`: the end); returns the (current, max) offsets the broker reports.
    A batch still out when the wait (``rpc_timeout``) ends can no longer be confirmed."""
    state = ctx.cache.pause(key)
    if state is None:
        raise PartitionNotHeld(f"partition {key} is not held by this consumer (not assigned, or leaving)")
    try:
        await rebalancer.wait_returned([key], ctx.config.rpc_timeout)
        partition = state.partition
        request = build_partition_register_request(
            ctx.client_id,
            ctx.group,
            partition,
            read_status=READ_NORMAL,
            visit_token=ctx.visit_token,
            offset=max(0, offset),
            filters=ctx.filters.get(partition.topic, ()),
        )
        answer = await ctx.broker_call(partition, rpc.Method.CONSUMER_BROKER_REGISTER, request)
        assert isinstance(answer, broker_pb.RegisterResponseB2C)
        if not answer.success or answer.errCode != 200:
            raise for_code(answer.errCode, answer.errMsg)
        curr = answer.currOffset if answer.HasField("currOffset") else -1
        max_offset = answer.maxOffset if answer.HasField("maxOffset") else -1
        state.curr_offset, state.max_offset = curr, max_offset
        state.empty_fetches = 0
        ctx.emit(PartitionRegistered(ctx.client_id, ctx.group, key, curr, max_offset))
        return curr, max_offset
    finally:
        # A batch still out is forgotten by the broker at the registration: it can no longer be confirmed.
        ctx.cache.resume(key, forget_batch=True)
