"""One push subscription's delivery loop in this process: a member of the subscription's group (a consumer
instance of :class:`~gateway.service.consumers.ConsumerService`, so TubeMQ spreads the partitions over every
process of every replica running it) that posts each message to the endpoint and settles it by the answer.

* A 2xx answer commits the message. Anything else (another status, a timeout past the ack deadline, a
  refused or failed connection, an endpoint ``push.allow`` refuses) nacks it with the subscription's backoff
  for that attempt: the consumer service republishes it to the retry topic and hands it out again when due,
  or past ``maxDeliveryAttempts`` sends it to the dead-letter topic.
* At most ``maxConcurrency`` deliveries are in flight; the loop polls only as many messages as there are
  free places. With ``orderedByKey`` the messages of one key are posted one after the other (a retried
  message comes back after its delay, so a failure can still reorder a key).
* The message's deadline in the instance is moved out before each post, so a delivery that waits for its
  key's predecessor is not taken back under it; it lies past the request's own deadline by a margin
  (:func:`~gateway.service.push_subscription.message_hold`), so a slow endpoint never gets the message
  redelivered while its first request is still running or settling.
* Stopping deletes the instance: what was delivered and not settled goes back to the group.
* Trouble is logged once per state, not at every retry: the loop's own error (joining, polling) when it
  begins or changes and when it clears; the gateway's drain once, at info (nothing to fix: the partitions
  go to the other members when this process stops); an endpoint ``push.allow`` refuses when the refusal
  begins or changes and when a delivery goes out again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable

from gateway.observability.push_events import PushDelivered
from gateway.service.consumers import ConsumerService
from gateway.service.delivered import DeliveredMessage
from gateway.service.errors import Gone, NotFound, ServiceError
from gateway.service.instance_spec import InstanceSpec
from gateway.service.push_outbound import DeliveryAnswer, EndpointRefused, Outbound
from gateway.service.push_request import Renderer, build_request
from gateway.service.push_subscription import PushSubscription, message_hold
from gateway.service.push_token import PushTokens
from gateway.tubemq.events import EventBus

__all__ = ["SubscriptionRunner", "outcome_of"]

log = logging.getLogger("gateway.service.push")


def outcome_of(answer: DeliveryAnswer) -> str:
    """The delivery's outcome as the metrics count it (:data:`PUSH_OUTCOMES`)."""
    if answer.acknowledged:
        return "acked"
    if answer.status is not None:
        return "rejected"
    return answer.failure if answer.failure in ("timeout", "connect", "refused") else "error"


class SubscriptionRunner:
    """Runs one subscription until :meth:`stop`; times in seconds."""

    def __init__(
        self,
        subscription: PushSubscription,
        consumers: ConsumerService,
        outbound: Outbound,
        render: Renderer,
        *,
        poll_wait: float = 1.0,
        error_backoff: float = 1.0,
        events: EventBus | None = None,
        clock: Callable[[], float] | None = None,
        tokens: PushTokens | None = None,
    ) -> None:
        self.subscription = subscription
        self._tokens = tokens
        self._consumers = consumers
        self._outbound = outbound
        self._render = render
        self._poll_wait = poll_wait
        self._error_backoff = error_backoff
        self._events = events
        self._clock = clock or asyncio.get_running_loop().time
        self._task: asyncio.Task[None] | None = None
        self._deliveries: set[asyncio.Task[None]] = set()
        self._room = asyncio.Condition()
        self._last_of_key: dict[str, asyncio.Task[None]] = {}
        self.instance_id: str | None = None
        #: the last error of the loop itself (joining, polling), for the overview; None while it runs well
        self.last_error: str | None = None
        self._drain_seen = False
        #: why the endpoint was last refused by push.allow (None: the last delivery went out)
        self._refused: str | None = None
        #: this process's deliveries by outcome (:data:`PUSH_OUTCOMES`), for the subscriptions API
        self.outcomes: Counter[str] = Counter()
        #: the last delivery's outcome and when it ended (Unix time); None before the first
        self.last_outcome: tuple[str, float] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._deliveries)

    def start(self) -> None:
        name = f"push-{self.subscription.name}"
        self._task = asyncio.create_task(self._run(), name=name)

    async def stop(self) -> None:
        """Stop polling, cancel the deliveries in flight and leave the group (unsettled messages go back)."""
        tasks = [t for t in (self._task, *self._deliveries) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._leave()

    async def _leave(self) -> None:
        instance_id, self.instance_id = self.instance_id, None
        if instance_id is not None:
            with contextlib.suppress(ServiceError):
                await self._consumers.delete(self.subscription.group, instance_id)

    def _spec(self) -> InstanceSpec:
        s = self.subscription
        return InstanceSpec(
            topics={topic: list(filters) or None for topic, filters in s.topics.items()},
            start_position=s.start_position,
            retry_topic=s.retry_topic,
            dead_letter_topic=s.dead_letter_topic,
            max_delivery_attempts=s.max_delivery_attempts,
            ack_deadline=self._hold(),
        )

    def _hold(self) -> float:
        """How long the instance holds a message out for a delivery: the request (the subscription's ack
        deadline) and its settling, within the consumer service's longest deadline."""
        return message_hold(self.subscription.ack_deadline, self._consumers.max_ack_deadline)

    async def _run(self) -> None:
        s = self.subscription
        while True:
            try:
                if self.instance_id is None:
                    info = await self._consumers.create(s.group, self._spec(), trusted=True)
                    self.instance_id = info.instance_id
                    log.info(
                        "push subscription joined its group", extra={"subscription": s.name, "group": s.group}
                    )
                await self._pump(self.instance_id)
            except (Gone, NotFound):
                self.instance_id = None  # the instance closed (lease, gateway stopping): join again
            except ServiceError as exc:
                self._trouble(exc.message)
                await asyncio.sleep(self._error_backoff)
            except Exception as exc:  # a bug must not end the subscription: log it loudly and go on
                error = f"{type(exc).__name__}: {exc}"
                if error != self.last_error:
                    log.exception(
                        "push subscription loop failed; retrying (logged again when the error changes)",
                        extra={"subscription": s.name},
                    )
                self.last_error = error
                await asyncio.sleep(self._error_backoff)

    def _trouble(self, error: str) -> None:
        """The loop cannot join or poll: log it when the state begins or changes, not at every retry."""
        s = self.subscription
        if self._consumers.draining:
            if not self._drain_seen:
                self._drain_seen = True
                log.info(
                    "push subscription stops taking messages: the gateway is draining; its partitions go to "
                    "the group's other members when this process stops",
                    extra={"subscription": s.name, "group": s.group},
                )
        elif error != self.last_error:
            log.warning(
                "push subscription cannot consume; retrying every %gs, logged again when the error changes: "
                "check that its topics and retry topic exist and TubeMQ is reachable",
                self._error_backoff,
                extra={"subscription": s.name, "group": s.group, "error": error},
            )
        self.last_error = error

    def _consuming(self) -> None:
        """A poll went through: clear the loop's error, saying so when there was one."""
        if self.last_error is not None:
            log.info(
                "push subscription consuming again",
                extra={"subscription": self.subscription.name, "error_was": self.last_error},
            )
            self.last_error = None

    async def _pump(self, instance_id: str) -> None:
        s = self.subscription
        while True:
            async with self._room:
                await self._room.wait_for(lambda: len(self._deliveries) < s.max_concurrency)
                free = s.max_concurrency - len(self._deliveries)
            messages = await self._consumers.poll(
                s.group, instance_id, max_messages=free, timeout=self._poll_wait
            )
            self._consuming()
            for message in messages:
                self._spawn(instance_id, message)

    def _spawn(self, instance_id: str, message: DeliveredMessage) -> None:
        key = message.message.key if self.subscription.ordered_by_key else None
        before = self._last_of_key.get(key) if key is not None else None
        task = asyncio.create_task(self._deliver(instance_id, message, before))
        self._deliveries.add(task)
        if key is not None:
            self._last_of_key[key] = task
        task.add_done_callback(lambda t: self._done(t, key))

    def _done(self, task: asyncio.Task[None], key: str | None) -> None:
        self._deliveries.discard(task)
        if key is not None and self._last_of_key.get(key) is task:
            del self._last_of_key[key]
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "push delivery failed unexpectedly",
                extra={"subscription": self.subscription.name},
                exc_info=task.exception(),
            )
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._room:
            self._room.notify_all()

    async def _deliver(
        self, instance_id: str, message: DeliveredMessage, before: asyncio.Task[None] | None
    ) -> None:
        s = self.subscription
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        token = [message.token]
        try:
            self._consumers.extend_deadlines(s.group, instance_id, token, seconds=self._hold())
        except ServiceError:
            return  # the instance is gone: the message went back to the group
        audience = s.token_audience
        bearer = None if audience is None or self._tokens is None else self._tokens.token(s.name, audience)
        body, headers = build_request(s, message, self._render, token=bearer)
        start = self._clock()
        try:
            answer = await self._outbound.post(body, headers, s.ack_deadline)
        except EndpointRefused as exc:
            if str(exc) != self._refused:
                log.warning(
                    "push endpoint refused by push.allow; its messages are retried and dead-lettered (logged "
                    "again when this changes): list the address in push.allow or change the endpoint",
                    extra={"subscription": s.name, "endpoint": self._outbound.shown, "error": str(exc)},
                )
            self._refused = str(exc)
            answer = DeliveryAnswer(None, "refused")
        else:
            if self._refused is not None:
                self._refused = None
                shown = self._outbound.shown
                log.info("push endpoint allowed again", extra={"subscription": s.name, "endpoint": shown})
        seconds = self._clock() - start
        settled = True
        try:
            if answer.acknowledged:
                await self._consumers.commit(s.group, instance_id, token)
            else:
                await self._consumers.nack(s.group, instance_id, token, delay=s.backoff(message.attempt))
        except ServiceError as exc:
            settled = False
            log.warning(
                "push delivery could not be settled; the message comes back after its deadline",
                extra={"subscription": s.name, "error": exc.message},
            )
        outcome = outcome_of(answer)
        self.outcomes[outcome] += 1
        self.last_outcome = (outcome, time.time())
        if self._events is not None:
            self._events.emit(PushDelivered(s.name, outcome, seconds, message.attempt, settled))
