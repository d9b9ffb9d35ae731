"""Confirming batches (§6.7): a CommitOffset per batch, or a commit confirmed in the consumer alone that
the partition's next GetMessage carries (Java's ``pullConfirmInLocal``). Part of
:class:`gateway.tubemq.consumer.client.Consumer`, which checks that it runs before each call."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from gateway.tubemq.consumer.events import OffsetCommitted
from gateway.tubemq.consumer.state import ConsumerContext
from gateway.tubemq.errors import ClientError, TubeMQError, for_code
from gateway.tubemq.wire import rpc
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb

__all__ = ["Confirmer", "InvalidConfirmContext", "parse_context"]


class InvalidConfirmContext(ClientError):
    """The confirm context is malformed, was already confirmed, expired, or its partition was released."""


class Confirmer:
    """Confirms the batches of one consumer; see ``Consumer.confirm``, ``confirm_local`` and
    ``send_due_commits``."""

    def __init__(self, ctx: ConsumerContext) -> None:
        self._ctx = ctx
        #: contexts whose CommitOffset is on its way
        self._confirming: set[str] = set()

    async def confirm(self, context: str, consumed: bool = True) -> int:
        """A CommitOffset for the batch of ``context`` (see ``Consumer.confirm``)."""
        ctx = self._ctx
        key, token = parse_context(context)
        state = ctx.cache.get(key)
        if state is None or not ctx.cache.is_in_use(key, token) or context in self._confirming:
            raise InvalidConfirmContext(
                f"confirm context {context!r} is not pending: already confirmed, expired after "
                f"{ctx.config.confirm_timeout:g}s, or its partition was released"
            )
        partition = state.partition
        request = broker_pb.CommitOffsetRequestC2B(
            clientId=ctx.client_id,
            topicName=partition.topic,
            partitionId=partition.partition_id,
            groupName=ctx.group,
            lastPackConsumed=consumed,
        )
        self._confirming.add(context)
        try:
            answer = await ctx.broker_call(partition, rpc.Method.CONSUMER_COMMIT, request)
        except TubeMQError:
            ctx.emit(OffsetCommitted(ctx.client_id, ctx.group, partition.topic, key, consumed, -1, -1))
            raise
        finally:
            # Only now: a fetch sent before the commit arrived would let the commit hit the next batch.
            self._confirming.discard(context)
            ctx.cache.release(key, token, consumed=consumed, wait=0.0, now=ctx.clock())
        assert isinstance(answer, broker_pb.CommitOffsetResponseB2C)
        offset = answer.currOffset if answer.HasField("currOffset") and answer.currOffset >= 0 else -1
        max_offset = answer.maxOffset if answer.HasField("maxOffset") else -1
        ctx.emit(
            OffsetCommitted(ctx.client_id, ctx.group, partition.topic, key, consumed, offset, answer.errCode)
        )
        if not answer.success or answer.errCode != 200:
            raise for_code(answer.errCode, answer.errMsg)
        ctx.cache.update_offsets(key, offset, max_offset)
        return offset

    def confirm_local(self, context: str) -> str | None:
        """The batch of ``context`` confirmed as consumed here alone (see ``Consumer.confirm_local``)."""
        ctx = self._ctx
        key, token = parse_context(context)
        if context in self._confirming or not ctx.cache.is_in_use(key, token):
            return None
        ctx.cache.release(key, token, consumed=True, commit_due=True, wait=0.0, now=ctx.clock())
        return key

    async def send_due_commits(self, keys: Collection[str]) -> None:
        """CommitOffsets for the due commits of ``keys`` (see ``Consumer.send_due_commits``)."""
        ctx = self._ctx
        sends = []
        for key in keys:
            state = ctx.cache.get(key)
            if state is None or not state.commit_due:
                continue
            selection = ctx.cache.take(key, ctx.clock())
            if selection is not None:
                sends.append(self.confirm(f"{key}:{selection.token}", True))
        await asyncio.gather(*sends)


def parse_context(context: str) -> tuple[str, int]:
    """The partition key and token of a confirm context (``brokerId:topic:partitionId:token``)."""
    key, sep, token = context.rpartition(":")
    if not sep or key.count(":") != 2 or not token.isascii() or not token.isdigit():
        raise InvalidConfirmContext(
            f"confirm context {context!r} is malformed: expected brokerId:topic:partitionId:token"
        )
    return key, int(token)
