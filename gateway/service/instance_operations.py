"""The operations on one live consumer instance besides polls: commit, nack, deadlines, seek, describe, the
push cursor, and the in-flight mark that keeps its lease. A collaborator of
:class:`gateway.service.consumers.ConsumerService`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from gateway.observability import tracing
from gateway.service.consumer_types import InstanceInfo, InstanceState
from gateway.service.core_errors import Doing, service_error
from gateway.service.delivered import CommitResult, DeadlineResult, NackResult
from gateway.service.errors import InvalidInput
from gateway.service.instance import ConsumerInstance
from gateway.service.instance_lookup import InstanceLookup
from gateway.service.retry_admission import RetryAdmission
from gateway.service.seek import SeekOrder, SeekResult, offsets_for_time, plan_seek
from gateway.service.seek_admission import SeekAdmission
from gateway.service.stream_cursor import StreamCursor
from gateway.tubemq import errors as core
from gateway.tubemq.consumer import PartitionNotHeld
from gateway.tubemq.net import ConnectionPool

__all__ = ["InstanceOperations"]


class InstanceOperations:
    """Commit, nack, deadlines, seek, describe and stream of an instance this process holds, found by
    ``lookup``. A nack's retry publishes are charged through ``retry_admission`` and its delay bounded by
    ``max_nack_delay``; a deadline extension by ``max_ack_deadline`` (seconds); seeks are admitted by
    ``seeks`` and a search by time reads the brokers through ``pool`` within ``rpc_timeout`` a call."""

    __slots__ = (
        "_lookup",
        "_pool",
        "_retry_admission",
        "_rpc_timeout",
        "_seeks",
        "max_ack_deadline",
        "max_nack_delay",
    )

    def __init__(
        self,
        lookup: InstanceLookup,
        *,
        retry_admission: RetryAdmission,
        seeks: SeekAdmission,
        pool: ConnectionPool,
        rpc_timeout: float,
        max_ack_deadline: float,
        max_nack_delay: float,
    ) -> None:
        self._lookup = lookup
        self._retry_admission = retry_admission
        self._seeks = seeks
        self._pool = pool
        self._rpc_timeout = rpc_timeout
        self.max_ack_deadline = max_ack_deadline
        self.max_nack_delay = max_nack_delay

    async def commit(
        self, group: str, instance_id: str, tokens: Sequence[str] | None, *, consumed: bool = True
    ) -> CommitResult:
        """Commit tokens (None: everything delivered so far); ``consumed=False`` rolls them back."""
        instance = self._lookup.instance(group, instance_id)
        async with self.using(instance):
            attributes = {
                "messaging.system": "tubemq",
                "messaging.operation.type": "settle",
                "messaging.consumer.group.name": group,
                "tubemq.consumed": consumed,
            }
            with tracing.span(f"commit {group}", "client", attributes):
                try:
                    return await instance.commit(tokens, consumed=consumed)
                except core.TubeMQError as exc:
                    raise service_error(exc, Doing.COMMIT, group=group) from exc

    async def nack(
        self, group: str, instance_id: str, tokens: Sequence[str], *, delay: float = 0.0
    ) -> NackResult:
        """Give single messages back, due ``delay`` seconds from now (``ConsumerInstance.nack``)."""
        instance = self._lookup.instance(group, instance_id)
        if not tokens:
            raise InvalidInput("name at least one token to nack", field="tokens")
        if not 0 <= delay <= self.max_nack_delay:
            raise InvalidInput(f"delay must be 0 to {self.max_nack_delay * 1000:.0f} ms", field="delay")
        async with self.using(instance):
            result = await instance.nack(tokens, delay, admit=self._retry_admission.admit)
        if result.error is not None and not (result.retried or result.dead_lettered or result.stale):
            # Nothing went anywhere: the publish's own error tells the client what to do.
            raise service_error(result.error, Doing.PUBLISH, topic=instance.policy.retry_topic)
        return result

    def extend_deadlines(
        self, group: str, instance_id: str, tokens: Sequence[str], *, seconds: float
    ) -> DeadlineResult:
        """Move the deadline of delivered messages to ``seconds`` from now (at most ``max_ack_deadline``)."""
        instance = self._lookup.instance(group, instance_id)
        if not tokens:
            raise InvalidInput("name at least one token", field="tokens")
        if not 0 < seconds <= self.max_ack_deadline:
            raise InvalidInput(
                f"the extension must be 1 to {self.max_ack_deadline * 1000:.0f} ms", field="extension"
            )
        instance.touch()
        return instance.extend_deadlines(tokens, seconds)

    async def seek(self, group: str, instance_id: str, order: SeekOrder) -> list[SeekResult]:
        """Move the group's read position in partitions this instance holds, with the rules of a new
        instance's start position: ``earliest`` (the oldest message kept), ``latest`` (the end) or ``time``
        (where the messages' ``$msgTime$`` reaches ``time``'s minute in ``time_zone``: Unix ms or RFC 3339
        text) for ``partitions`` (default: every held partition of the subscribed topics), or ``offsets``
        (partition key -> broker index offset, clamped by the broker to what it keeps); see
        :mod:`gateway.service.seek`. What the instance fetched or delivered of them and did not commit is
        rolled back first."""
        instance = self._lookup.instance(group, instance_id)
        plan = plan_seek(instance, order)
        with self._seeks.admit(instance_id, by_time=plan.minute is not None):
            async with self.using(instance):
                try:
                    targets = plan.offsets
                    if plan.minute is not None:
                        targets = await offsets_for_time(instance, plan, self._pool, self._rpc_timeout)
                    moved = await instance.seek(targets)
                except PartitionNotHeld as exc:
                    raise InvalidInput(
                        f"{exc}; a rebalance moved it: describe the instance and seek again", field="offsets"
                    ) from None
                except core.TubeMQError as exc:
                    raise service_error(exc, Doing.COMMIT, group=group) from exc
        return [SeekResult(key, curr, end) for key, (curr, end) in moved.items()]

    def open_stream(self, group: str, instance_id: str, resume_after: str | None) -> StreamCursor:
        """A push cursor that resumes after the event id ``resume_after`` (a token the stream sent); without
        it the stream starts by sending every message delivered and not committed yet. Wrap its use in
        :meth:`using`."""
        instance = self._lookup.instance(group, instance_id)
        after = 0
        if resume_after:
            text = resume_after.strip()
            if not text.isascii() or not text.isdigit() or len(text) > 18:
                raise InvalidInput(
                    f"{resume_after!r} is not an event id of this stream", field="resume_after"
                )
            after = int(text)
        return StreamCursor(instance, after)

    def describe(self, group: str, instance_id: str) -> InstanceState:
        """What the instance holds right now."""
        instance = self._lookup.instance(group, instance_id)
        instance.touch()
        return InstanceState(
            info=InstanceInfo(
                instance_id,
                group,
                self._lookup.advertised_url,
                instance.consumer.client_id,
                instance.auto_commit,
            ),
            partitions=instance.consumer.assignment(),
            pending=instance.pending_count,
            buffered=instance.buffered_count,
        )

    @contextlib.asynccontextmanager
    async def using(self, instance: ConsumerInstance) -> AsyncIterator[ConsumerInstance]:
        """Mark a request in flight (no lease expiry meanwhile) and renew the lease when it ends."""
        instance.active += 1
        instance.touch()
        try:
            yield instance
        finally:
            instance.active -= 1
            instance.touch()
