"""Configuration of the server-balanced pull consumer (§6).

Every interval is in seconds (floats); the wire carries milliseconds. The defaults are the Java client's
(§6.1, §6.6); tests shrink them so that a whole rebalance runs in well under a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from gateway.tubemq.wire.meta import format_required_partitions, parse_partition_key

__all__ = ["BoundConsumption", "ConsumerConfig", "StartPosition"]

# readStatus codes of RegisterRequestC2B (§6.8)
READ_NORMAL = 0
READ_FROM_MAX = 1
READ_FROM_MAX_ALWAYS = 2


class StartPosition(IntEnum):
    """Where a group without a stored offset starts (Java ``ConsumePosition``, §6.8).

    The value only matters on the first registration of a partition by one consumer instance; later
    registrations (after a rebalance) always continue from the group's stored offset.
    """

    #: start at the end of the partition when the group has no offset yet (Java default)
    LATEST = 0
    #: start at the end of the partition even when the group has an offset
    LATEST_ALWAYS = 1
    #: start at the oldest stored message when the group has no offset yet
    EARLIEST = -1

    def read_status(self, first_registration: bool) -> int:
        """The ``readStatus`` to send when registering a partition at its broker."""
        if not first_registration or self is StartPosition.EARLIEST:
            return READ_NORMAL
        return READ_FROM_MAX if self is StartPosition.LATEST else READ_FROM_MAX_ALWAYS


@dataclass(frozen=True, slots=True)
class BoundConsumption:
    """Bound (offset-specified) consumption of one session (§6.9).

    ``session_key`` names the session; every member of the group sends the same key, ``source_count``
    (how many consumers take part) and ``select_big`` (on conflicting offsets for one partition, the larger
    wins when true). ``offsets`` maps partition keys ``brokerId:topic:partitionId`` to broker index offsets
    (§10.3) to start from; the master hands each named partition to the consumer that asked for it and the
    consumer forces the offset at its first registration of the partition.
    """

    session_key: str
    source_count: int
    select_big: bool = True
    offsets: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.session_key.strip():
            raise ValueError("bound consumption needs a non-blank session_key")
        if self.source_count <= 0:
            raise ValueError(f"source_count must be > 0, got {self.source_count}")
        for key, offset in self.offsets.items():
            parse_partition_key(key)  # raises MetaFormatError, a ValueError
            if "," in key or "=" in key:
                raise ValueError(f"partition key {key!r} must not contain ',' or '='")
            if offset < 0:
                raise ValueError(f"offset of {key!r} must be >= 0, got {offset}")

    def required_partition(self) -> str:
        """The ``requiredPartition`` text of the master registration: ``key=offset,...`` (§5.1)."""
        return format_required_partitions(self.offsets)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Behaviour and timing of a :class:`~gateway.tubemq.consumer.client.Consumer` (seconds unless noted)."""

    start_position: StartPosition = StartPosition.LATEST
    bound: BoundConsumption | None = None
    #: topics whose partitions start at the oldest message when the group has no offset yet, whatever
    #: ``start_position`` says (a gateway's retry topic: nothing republished there may be skipped)
    earliest_topics: frozenset[str] = frozenset()
    #: period of the master heartbeat (which also carries the rebalance events)
    heartbeat_interval: float = 13.0
    #: period of the master heartbeat while no partition is held: the master hands out assignments only in
    #: heartbeat answers, so a new or emptied member asks more often to learn its partitions promptly
    unassigned_heartbeat_interval: float = 1.0
    #: period of the per-broker heartbeat that keeps the partition registrations alive
    broker_heartbeat_interval: float = 13.0
    #: deadline of every request
    rpc_timeout: float = 10.0
    #: master registration attempts in start(); waits grow from register_retry_wait
    register_attempts: int = 5
    register_retry_wait: float = 1.0
    #: after this many heartbeat failures in a row the next beat waits heartbeat_interval_after_fail
    heartbeat_failures_before_slowdown: int = 5
    heartbeat_interval_after_fail: float = 60.0
    #: the held partitions are reported to the master on every n-th heartbeat (and whenever they changed)
    report_every: int = 6
    #: acknowledge a finished rebalance event at once instead of on the next periodic beat
    report_events_immediately: bool = True
    #: a CONNECT event retries failed broker registrations in this many rounds, this far apart
    broker_register_rounds: int = 5
    broker_register_retry_wait: float = 1.0
    #: a DISCONNECT waits this long for a delivered batch to be confirmed before rolling it back
    rebalance_confirm_wait: float = 3.0
    #: close() waits this long for a running rebalance event to finish
    close_rebalance_wait: float = 10.0
    #: a delivered batch not confirmed within this time is released as not consumed
    confirm_timeout: float = 60.0
    #: waits before a partition is fetched again after these GetMessage outcomes (§6.6)
    not_found_wait: float = 0.4
    #: 404s in a row double the wait from not_found_wait up to this (None: 10 x not_found_wait); data resets
    #: it. Bounds what an idle partition costs its broker, and the delay before new data on it is seen.
    not_found_max_wait: float | None = None
    forbidden_wait: float = 2.0
    moved_wait: float = 0.2
    unavailable_wait: float = 0.3
    error_wait: float = 0.3
    #: after a transport failure of a fetch; Java retries at once, which spins against a stopped broker
    transport_error_wait: float = 0.2
    #: ``hostName`` sent to the master; None = this host's IPv4 address
    host_name: str | None = None
    #: consumer id; None = generated like the Java client's (§6.1)
    client_id: str | None = None

    @property
    def empty_fetch_cap(self) -> float:
        """The longest wait after empty fetches (``not_found_max_wait`` resolved)."""
        cap = self.not_found_max_wait
        return 10 * self.not_found_wait if cap is None else max(cap, self.not_found_wait)

    def __post_init__(self) -> None:
        if self.not_found_max_wait is not None and self.not_found_max_wait < 0:
            raise ValueError(f"not_found_max_wait must be >= 0 seconds, got {self.not_found_max_wait}")
        positive = {
            "heartbeat_interval": self.heartbeat_interval,
            "unassigned_heartbeat_interval": self.unassigned_heartbeat_interval,
            "broker_heartbeat_interval": self.broker_heartbeat_interval,
            "rpc_timeout": self.rpc_timeout,
            "confirm_timeout": self.confirm_timeout,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value}")
        if self.register_attempts < 1 or self.broker_register_rounds < 1 or self.report_every < 1:
            raise ValueError(
                f"register_attempts={self.register_attempts}, broker_register_rounds="
                f"{self.broker_register_rounds} and report_every={self.report_every}: each must be >= 1"
            )
