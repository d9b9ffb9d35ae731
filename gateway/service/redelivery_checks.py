"""Checks of a new consumer instance's redelivery settings (retry topic, dead-letter topic, attempts,
deadline), before it joins its group: wrong combinations are refused naming the field, and the topics must
exist and accept publishing (TubeMQ topics are created by an administrator, not on first use)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from gateway.service.core_errors import Doing, service_error
from gateway.service.errors import InvalidInput, NotFound
from gateway.service.names import validate_topic
from gateway.service.redelivery import RedeliveryPolicy, Republisher
from gateway.tubemq import errors as core
from gateway.tubemq.consumer import MAX_FILTER_ITEM_LENGTH

if TYPE_CHECKING:
    from gateway.service.instance_spec import InstanceSpec

__all__ = ["MAX_DELIVERY_ATTEMPTS", "check_redelivery", "create_in_tubemq", "ensure_redelivery_topics"]

#: the most delivery attempts an instance may allow before dead-lettering
MAX_DELIVERY_ATTEMPTS = 1000


def check_redelivery(
    group: str, spec: InstanceSpec, can_publish: bool, max_ack_deadline: float, bounds: RedeliveryPolicy
) -> RedeliveryPolicy:
    """The instance's redelivery policy, with the gateway's ``bounds`` (the signer of retry copies, the
    longest delay, the retries outstanding); InvalidInput naming the field for a wrong combination."""
    if spec.ack_deadline is not None and not 0 < spec.ack_deadline <= max_ack_deadline:
        raise InvalidInput(f"ackDeadlineMs must be 1 to {max_ack_deadline * 1000:.0f}", field="ackDeadlineMs")
    retry, dead = spec.retry_topic, spec.dead_letter_topic
    if retry is None:
        if dead is not None or spec.max_delivery_attempts is not None:
            raise InvalidInput(
                "deadLetterTopic and maxDeliveryAttempts need a retryTopic (messages are retried through it "
                "until their last attempt)",
                field="retryTopic",
            )
        return RedeliveryPolicy()
    validate_topic(retry, "retryTopic")
    if len(group) > MAX_FILTER_ITEM_LENGTH:
        raise InvalidInput(
            f"a group with a retryTopic has a name of at most {MAX_FILTER_ITEM_LENGTH} characters (its "
            "retried messages carry it as their stream id)",
            field="group",
        )
    if retry in spec.topics:
        raise InvalidInput("retryTopic must not be one of the consumed topics", field="retryTopic")
    if not can_publish:
        raise InvalidInput("this gateway has no producer to publish retries with", field="retryTopic")
    attempts = spec.max_delivery_attempts
    if dead is not None:
        validate_topic(dead, "deadLetterTopic")
        if dead in spec.topics or dead == retry:
            raise InvalidInput(
                "deadLetterTopic must differ from the consumed topics and the retry topic",
                field="deadLetterTopic",
            )
        if attempts is None:
            attempts = 5
    elif attempts is not None:
        raise InvalidInput("maxDeliveryAttempts needs a deadLetterTopic", field="deadLetterTopic")
    if attempts is not None and not 1 <= attempts <= MAX_DELIVERY_ATTEMPTS:
        raise InvalidInput(
            f"maxDeliveryAttempts must be 1 to {MAX_DELIVERY_ATTEMPTS}", field="maxDeliveryAttempts"
        )
    return replace(bounds, retry_topic=retry, dead_letter_topic=dead, max_delivery_attempts=attempts)


def create_in_tubemq(topic: str) -> str:
    """What to do about a missing retry or dead-letter topic on a TubeMQ cluster."""
    return f"create topic {topic!r} in TubeMQ (deployed on a broker that accepts publishing and subscribing)"


async def ensure_redelivery_topics(
    republisher: Republisher, policy: RedeliveryPolicy, advice: Callable[[str], str] = create_in_tubemq
) -> None:
    """Make the retry and dead-letter topics known to the producer; NotFound naming the topic and saying
    how to create it here (``advice``) when the master lists no publishable partition of it."""
    for topic, field in ((policy.retry_topic, "retryTopic"), (policy.dead_letter_topic, "deadLetterTopic")):
        if topic is None:
            continue
        try:
            await republisher.register_topic(topic)
        except core.NoPartition:
            raise NotFound(
                f"{field} {topic!r} has no publishable partition: {advice(topic)}, then create the instance",
                field=field,
                resource_name=topic,
            ) from None
        except core.TubeMQError as exc:
            raise service_error(exc, Doing.PUBLISH, topic=topic) from exc
