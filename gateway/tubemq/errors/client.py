"""Local checks: a check failed before anything was sent."""

from __future__ import annotations

from collections.abc import Collection

from gateway.tubemq.errors.base import TubeMQError


class ClientError(TubeMQError):
    """A local check failed before anything was sent."""


class InvalidAttribute(ClientError, ValueError):
    """A message attribute key or value cannot be encoded (reserved characters or tokens, empty key)."""


class InvalidMessage(InvalidAttribute):
    """A field of a message to publish breaks a publish rule (``payload.prepare_message``). ``field``
    names it as the gateway's API does: ``value``, ``key``, ``partition``, ``attributes``,
    ``attributes.<name>``, ``streamId`` or ``msgTime``."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class MessageTooLarge(ClientError):
    """The message (body plus attribute text) exceeds the topic's maximum size."""

    def __init__(self, size: int, limit: int, topic: str | None = None) -> None:
        self.size = size
        self.limit = limit
        self.topic = topic
        where = f" of topic {topic!r}" if topic else ""
        super().__init__(
            f"message of {size} bytes exceeds the limit{where} of {limit} bytes; "
            "send a smaller body or fewer attributes"
        )


class TopicNotPublished(ClientError):
    """The producer has not published the topic, so it knows no partition for it."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} is not published by this producer; publish it before sending")


class NoPartition(ClientError):
    """No partition of the topic is currently available for sending."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(
            f"no partition of topic {topic!r} is available: no broker accepts it now; "
            "check that the topic is deployed and its brokers are online, then retry"
        )


class PartitionsAway(NoPartition):
    """A topic that had partitions has none now while the brokers that held them are still configured: a
    broker outage (a stopped broker's partitions leave the master's answers until it registers again), so
    the same send may succeed later; a topic never seen with partitions raises plain ``NoPartition``."""

    retriable = True

    def __init__(self, topic: str, brokers: Collection[int]) -> None:
        self.brokers = tuple(sorted(brokers))
        super().__init__(topic)
        self.message = (
            f"topic {topic!r} has no publishable partition now: broker(s) {list(self.brokers)} that held its "
            "partitions are offline (stopped or restarting); retry later"
        )
        self.args = (self.message,)


class ClientClosed(ClientError):
    """The producer, consumer or session was closed; create a new one."""

    def __init__(self, message: str = "the client has been closed; create a new one") -> None:
        super().__init__(message)
