"""Publishing: validate a batch, send it through the shared producer, and report a result per message.

A message is reported as published only when a broker acknowledged it (the producer guarantees that); the
whole batch is validated before anything is sent, so a 4xx never leaves half a batch behind.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, cast

from gateway.observability import tracing
from gateway.service.access import ALLOW_ALL, DESCRIBE, DESCRIBE_CLUSTER, PUBLISH, AccessPolicy
from gateway.service.core_errors import Doing, service_error
from gateway.service.errors import InvalidInput, NotFound, PayloadTooLarge, ServiceError
from gateway.service.names import validate_topic
from gateway.service.principal import current_principal
from gateway.service.publish_rules import batch_preparer
from gateway.service.quotas import Quotas
from gateway.tubemq import errors as core
from gateway.tubemq.net import BreakerState
from gateway.tubemq.producer import Producer, SendResult, TopicRouteInfo
from gateway.tubemq.wire import PreparedMessage, slots_constructor

__all__ = [
    "OutgoingMessage",
    "PartitionView",
    "PreparedMessage",
    "PublishOutcome",
    "PublishService",
    "TopicView",
    "failed_alike",
    "new_prepared",
]

_MESSAGING = {"messaging.system": "tubemq"}

#: ``PreparedMessage(*fields)`` (all seven, in order), compiled where the extension is (for the adapters'
#: compiled readers of a batch: :meth:`PublishService.publish_prepared`)
new_prepared = slots_constructor(PreparedMessage)


@dataclass(slots=True)
class OutgoingMessage:
    """One message to publish, already decoded to bytes by the adapter."""

    value: bytes
    key: str | None = None
    partition: int | None = None
    attributes: Mapping[str, str] | None = None
    stream_id: str | None = None
    msg_time: str | None = None


@dataclass(slots=True)
class PublishOutcome:
    """The fate of one message of a batch: ``result`` when a broker stored it, else ``error``."""

    index: int
    result: SendResult | None = None
    error: ServiceError | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None


#: ``PublishOutcome(index, result, error)``, compiled where the extension is
_new_outcome = slots_constructor(PublishOutcome)


def failed_alike(outcomes: Sequence[PublishOutcome]) -> ServiceError | None:
    """The error to fail the whole request with when nothing was stored and every message failed alike (one
    kind of error), as a single message's failure would (REST: that status instead of a 207; gRPC: that
    status instead of a response listing the failures); else None."""
    first = outcomes[0].error if outcomes else None
    if first is None:
        return None
    kind = first.kind
    for outcome in outcomes:
        if outcome.error is None or outcome.error.kind is not kind:
            return None
    return first


@dataclass(slots=True)
class PartitionView:
    index: int
    broker_id: int
    broker: str | None  # host:port; None for a caller not allowed describe_cluster
    partition_id: int
    key: str


@dataclass(slots=True)
class TopicView:
    topic: str
    max_message_size: int
    partitions: list[PartitionView] = field(default_factory=list)
    shielded_brokers: list[int] = field(default_factory=list)


#: a batch as the service takes it: messages to prepare, or prepared already (then also given as such)
_Batch = Sequence[OutgoingMessage | PreparedMessage]
_Given = list[PreparedMessage] | None


def _named(raw: bool, i: int) -> tuple[str, int | None]:
    """How an error names message ``i``: ``message`` without a batch envelope, else ``messages[i]`` (built
    only when an error names it, not for every message on the way)."""
    return ("message", None) if raw else (f"messages[{i}]", i)


def _prepared(
    messages: Sequence[OutgoingMessage], raw: bool, limit: int
) -> tuple[list[PreparedMessage], int, bool]:
    """Each message checked and encoded once by the publish rules, in order (the first broken rule raises,
    named as the client named the message), and each size checked against the topic's ``limit``; with the
    batch's total size and whether a message has a key or a partition."""
    total = 0
    pinned = False  # a message with a key or a partition
    prepared: list[PreparedMessage] = []
    prepare = batch_preparer(len(messages))
    for i, message in enumerate(messages):
        try:
            ready = prepare(
                message.value,
                message.attributes,
                message.stream_id,
                message.msg_time,
                message.key,
                message.partition,
            )
        except core.InvalidMessage as exc:  # named as the client named it: messages[i].<field>
            prefix, index = _named(raw, i)
            raise InvalidInput(str(exc), field=f"{prefix}.{exc.field}", index=index) from None
        if ready.size > limit:
            _too_large(ready, raw, limit, i)
        total += ready.size
        prepared.append(ready)
        if ready.key is not None or ready.partition is not None:
            pinned = True
    return prepared, total, pinned


def _sized(prepared: list[PreparedMessage], raw: bool, limit: int) -> tuple[int, bool]:
    """The total size of messages already prepared, and whether one has a key or a partition; the first
    above the topic's ``limit`` is refused as :func:`_prepared` refuses it."""
    total = 0
    pinned = False
    for i, ready in enumerate(prepared):
        if ready.size > limit:
            _too_large(ready, raw, limit, i)
        total += ready.size
        if ready.key is not None or ready.partition is not None:
            pinned = True
    return total, pinned


def _too_large(ready: PreparedMessage, raw: bool, limit: int, i: int) -> NoReturn:
    prefix, index = _named(raw, i)
    raise PayloadTooLarge(
        f"message of {ready.size} bytes is above the topic's limit of {limit} bytes",
        limit=limit,
        field=f"{prefix}.value",
        index=index,
    )


def _check_count(count: int, most: int) -> None:
    if count > most:
        raise InvalidInput(f"a batch holds at most {most} messages, got {count}; split it", field="messages")


async def _all_or_none(sends: list[Coroutine[Any, Any, None]]) -> None:
    """Run the sends of one request concurrently. If the request fails (cancelled, or a send raised
    something no outcome can hold) the sends still outstanding are cancelled and awaited before the
    failure propagates: a failed request leaves nothing of its own running."""
    tasks = [asyncio.ensure_future(send) for send in sends]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        raise


class PublishService:
    """Publishes batches through one shared :class:`Producer`; ``quotas``, when given, limits each caller's
    messages and bytes per second (a refused batch raises RateLimited and sends nothing)."""

    def __init__(
        self,
        producer: Producer,
        *,
        max_batch_messages: int = 1000,
        concurrency: int = 256,
        send_timeout: float = 10.0,
        quotas: Quotas | None = None,
        access: AccessPolicy = ALLOW_ALL,
    ) -> None:
        self._producer = producer
        self._quotas = quotas
        self._access = access
        self._max_batch = max_batch_messages
        self._concurrency = concurrency
        self._send_timeout = send_timeout

    async def ensure_topic(self, topic: str) -> TopicRouteInfo:
        """Make the topic known to the producer; returns its route (partitions, max message size)."""
        validate_topic(topic)
        try:
            return await self._producer.register_topic(topic)
        except core.PartitionsAway as exc:
            # seen with partitions, brokers still configured: an outage (503 + Retry-After), not a 404
            raise service_error(exc, Doing.PUBLISH, topic=topic) from exc
        except core.NoPartition as exc:
            # The master lists no publishable partition: the topic is not deployed, or none of its
            # brokers is online. From the client side the two look the same.
            raise NotFound(
                f"topic {topic!r} has no publishable partition: check that it is deployed and accepts "
                "publishing, and that its brokers are online",
                field="topic",
                resource_name=topic,
            ) from exc
        except Exception as exc:
            raise service_error(exc, Doing.PUBLISH, topic=topic) from exc

    async def publish(
        self, topic: str, messages: Sequence[OutgoingMessage], *, raw: bool = False
    ) -> list[PublishOutcome]:
        """Validate the whole batch, then send it; messages sharing a key or partition keep their order.

        ``raw`` marks a single message that came without a batch envelope: errors then name ``message.*``
        instead of ``messages[i].*``. Traced as ``publish <topic>`` when tracing is on.
        """
        return await self._traced(topic, messages, raw, None)

    @property
    def max_batch_messages(self) -> int:
        """The most messages one batch may hold (more are refused: InvalidInput naming ``messages``)."""
        return self._max_batch

    def prepare(self, messages: Sequence[OutgoingMessage]) -> list[PreparedMessage]:
        """The messages of a batch checked and encoded once by the publish rules, for
        :meth:`publish_prepared` (what the REST adapter's compiled reader does for the usual batch, for an
        adapter that reads messages first). The first broken rule raises :class:`InvalidInput` naming
        ``messages[i].<field>``, and so does a batch above :attr:`max_batch_messages` (checked before any
        message is prepared); :meth:`publish` of the same messages raises the errors it meets first (access,
        the topic) ahead of those."""
        _check_count(len(messages), self._max_batch)
        return _prepared(messages, False, sys.maxsize)[0]

    async def publish_prepared(self, topic: str, prepared: list[PreparedMessage]) -> list[PublishOutcome]:
        """:meth:`publish` of a batch whose messages were already checked and encoded by the publish rules,
        as ``prepare_message`` does (:meth:`prepare`, or the REST adapter's compiled reader of the usual
        batch). Everything else is :meth:`publish`'s: access, the batch's bounds, the topic, each message's
        size against the topic's limit, quotas, the order of messages sharing a key or a partition, the
        send, the span."""
        return await self._traced(topic, prepared, False, prepared)

    async def _traced(self, topic: str, messages: _Batch, raw: bool, given: _Given) -> list[PublishOutcome]:
        if not tracing.enabled():
            return await self._publish(topic, messages, raw, given)
        attributes = {**_MESSAGING, "messaging.operation.type": "send", "messaging.destination.name": topic}
        with tracing.span(f"publish {topic}", "producer", attributes) as span:
            outcomes = await self._publish(topic, messages, raw, given)
            span.set_attribute("messaging.batch.message_count", len(messages))
            span.set_attribute("tubemq.failed_count", sum(1 for o in outcomes if not o.ok))
            return outcomes

    async def _publish(self, topic: str, messages: _Batch, raw: bool, given: _Given) -> list[PublishOutcome]:
        """``given``: the messages already prepared (``messages`` itself), else None: prepared here."""
        if self._access.enforcing:
            self._access.check(current_principal(), PUBLISH, topic=topic)
        if not messages:
            raise InvalidInput("messages must hold at least one message", field="messages")
        _check_count(len(messages), self._max_batch)
        limit = (await self.ensure_topic(topic)).max_msg_size
        single = len(messages) == 1
        if given is None:
            prepared, total, pinned = _prepared(cast("Sequence[OutgoingMessage]", messages), raw, limit)
        else:  # prepared by the publish rules already: only the sizes to check
            prepared = given
            total, pinned = _sized(given, raw, limit)
        if self._quotas is not None:
            # One check for the whole, valid batch, before anything is sent (raises RateLimited).
            self._quotas.charge_publish(len(messages), total)
        if single:
            outcome = PublishOutcome(0)
            await self._send_one(topic, prepared[0], outcome)
            return [outcome]
        new = _new_outcome  # compiled: no dataclass __init__ per message
        outcomes = [new(i, None, None) for i in range(len(messages))]
        # Messages pinned to one key or partition go out one after another so they stay in batch order;
        # free messages go out together (Producer.send_prepared: one request each, written per broker in one
        # go, at most ``concurrency`` in flight). A chain of pinned messages counts as one send in flight.
        free: list[int] = [] if pinned else list(range(len(prepared)))  # all free: the usual batch
        chains: dict[tuple[str, object], list[int]] = {}
        for i, ready in enumerate(prepared if pinned else ()):
            if ready.key is not None:
                pin: tuple[str, object] = ("k", ready.key)
            elif ready.partition is not None:
                pin = ("p", ready.partition)
            else:
                free.append(i)
                continue
            chain = chains.get(pin)
            if chain is None:
                chain = chains[pin] = []
            chain.append(i)

        async def run_chain(indexes: list[int]) -> None:
            for i in indexes:
                await self._send_one(topic, prepared[i], outcomes[i])

        if not chains:
            await self._send_free(topic, prepared, free, outcomes, self._concurrency)
            return outcomes
        window = self._concurrency - len(chains)
        if window >= 1:
            sends = [run_chain(chain) for chain in chains.values()]
            if free:
                sends.append(self._send_free(topic, prepared, free, outcomes, window))
            await _all_or_none(sends)
            return outcomes
        # More chains than sends allowed in flight: every unit (a chain or a free message) takes a turn.
        gate = asyncio.Semaphore(self._concurrency)

        async def gated(unit: int | list[int]) -> None:
            async with gate:
                if isinstance(unit, int):
                    await self._send_one(topic, prepared[unit], outcomes[unit])
                else:
                    await run_chain(unit)

        units: list[int | list[int]] = [*free, *chains.values()]
        await _all_or_none([gated(unit) for unit in units])
        return outcomes

    async def _send_free(
        self,
        topic: str,
        prepared: list[PreparedMessage],
        indexes: list[int],
        outcomes: list[PublishOutcome],
        window: int,
    ) -> None:
        """Send the messages at ``indexes`` (no key, no partition) in windows of at most ``window``."""
        for start in range(0, len(indexes), window):
            part = indexes[start : start + window]
            batch = prepared if len(part) == len(prepared) else [prepared[i] for i in part]
            try:
                results = await self._producer.send_prepared(topic, batch, timeout=self._send_timeout)
            except Exception as exc:  # the whole batch: producer closed, topic unpublished or unrouted
                for i in part:
                    outcomes[i].error = service_error(exc, Doing.PUBLISH, topic=topic, index=i)
                continue
            for i, result in zip(part, results, strict=True):
                if isinstance(result, SendResult):
                    outcomes[i].result = result
                else:
                    outcomes[i].error = service_error(result, Doing.PUBLISH, topic=topic, index=i)

    async def _send_one(self, topic: str, message: PreparedMessage, outcome: PublishOutcome) -> None:
        """Send one message (a batch of one: pinned messages go out one after another to keep their order)."""
        try:
            (result,) = await self._producer.send_prepared(topic, (message,), timeout=self._send_timeout)
        except Exception as exc:
            result = exc
        if isinstance(result, SendResult):
            outcome.result = result
        else:
            outcome.error = service_error(result, Doing.PUBLISH, topic=topic, index=outcome.index)

    async def topic(self, topic: str) -> TopicView:
        """What the gateway knows about a topic: partitions, brokers and the max message size. Broker
        addresses only for a caller allowed ``describe_cluster``."""
        principal = current_principal()
        self._access.check(principal, DESCRIBE, topic=topic)
        addresses = self._access.allows(principal, DESCRIBE_CLUSTER)
        route = await self.ensure_topic(topic)
        view = TopicView(topic=topic, max_message_size=route.max_msg_size)
        for p in route.partitions:
            view.partitions.append(
                PartitionView(
                    index=p.index,
                    broker_id=p.broker_id,
                    broker=str(p.broker_address) if addresses else None,
                    partition_id=p.partition_id,
                    key=p.partition_key,
                )
            )
        brokers = {p.broker_id for p in route.partitions}
        view.shielded_brokers = sorted(
            h.broker_id
            for h in self._producer.broker_health()
            if h.broker_id in brokers and h.state is not BreakerState.CLOSED
        )
        return view
