"""What a client asks for when it creates a consumer instance: shared by the consumer service and the
redelivery checks, so neither imports the other."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """What a client asks for when creating an instance.

    ``topics`` maps each topic to its stream id filter (None or empty: every message). ``start_position``:
    ``latest`` (a group without a stored offset starts at the end), ``earliest`` (... at the oldest message)
    or ``offsets`` (bound consumption: start the partitions in ``offsets``, partition key -> broker index
    offset, exactly there; ``session_key`` and ``source_count`` coordinate several instances doing so).
    ``max_bytes`` is the instance's default byte budget per poll.
    """

    topics: Mapping[str, Collection[str] | None]
    start_position: str = "latest"
    offsets: Mapping[str, int] | None = None
    auto_commit: bool = False
    max_bytes: int | None = None
    session_key: str | None = None
    source_count: int = 1
    #: redelivery (``gateway.service.redelivery``): nacked and expired messages go through ``retry_topic``,
    #: past ``max_delivery_attempts`` to ``dead_letter_topic``
    retry_topic: str | None = None
    dead_letter_topic: str | None = None
    max_delivery_attempts: int | None = None
    #: seconds from delivery to a message's deadline (None: the service's commit timeout)
    ack_deadline: float | None = None
