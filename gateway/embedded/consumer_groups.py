"""Consumer groups held by the embedded master: membership, consistency rules, subscriptions and expiry.

A group takes its consume type, topics, filters and (bound mode) session parameters from its first member;
later members must agree (errCodes 424-430, §6.9, §8.1). The registry also keeps what each consumer reported
holding (the master's "current subscription" view the balancer works from), the pending rebalance events,
and a heartbeat deadline per consumer. Synchronous and I/O-free; times are ``clock()`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from gateway.embedded.rebalance_queues import ConsumerEvent, EventQueues
from gateway.tubemq.wire.meta import Partition

CLIENT_INCONSISTENT_CONSUMETYPE = 424
CLIENT_INCONSISTENT_TOPICSET = 425
CLIENT_INCONSISTENT_FILTERSET = 426
CLIENT_INCONSISTENT_SESSIONKEY = 427
CLIENT_INCONSISTENT_SELECTBIG = 428
CLIENT_INCONSISTENT_SOURCECOUNT = 429
CLIENT_DUPLICATE_INDEXID = 430

# topic -> partition key -> partition
Holdings = dict[str, dict[str, Partition]]


class ConsumeType(Enum):
    """How a group consumes; the value is the name TubeMQ uses in its error messages."""

    NORMAL = "unbound"
    BOUND = "bound"
    CLIENT_BALANCE = "client-rebalance"


@dataclass(slots=True)
class ConsumerInfo:
    """One consumer as registered. ``required_parts`` maps partition keys to bound start offsets."""

    consumer_id: str
    group: str
    topics: frozenset[str]
    consume_type: ConsumeType = ConsumeType.NORMAL
    conditions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    over_tls: bool = False
    session_key: str = ""
    source_count: int = -1
    select_big: bool = True
    required_parts: Mapping[str, int] = field(default_factory=dict)
    node_id: int = -1
    # client-balance (V2) report: ms timestamp of the client's last assignment and the meta id it uses
    last_assigned_ms: int = -2
    topic_meta_id: int = -2


class GroupError(Exception):
    """A consistency failure answered with an errCode (424-430)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _java_set(items: Iterable[str]) -> str:
    return "[" + ", ".join(sorted(items)) + "]"


def _java_conditions(conditions: Mapping[str, frozenset[str]]) -> str:
    return "{" + ", ".join(f"{t}={_java_set(c)}" for t, c in sorted(conditions.items())) + "}"


class ConsumeGroup:
    """A consumer group; its consume type, topics, filters and session settings come from its first member."""

    def __init__(self, first: ConsumerInfo) -> None:
        self.name = first.group
        self.consume_type = first.consume_type
        self.topics = first.topics
        self.conditions = dict(first.conditions)
        self.consumers: dict[str, ConsumerInfo] = {}
        self.session_key = ""
        self.source_count = -2
        self.select_big = True
        self.not_allocated = True
        self.allocated_times = 0
        # bound mode: partition key -> consumer that asked for it, and the offset it asked for
        self.part_owner: dict[str, str] = {}
        self.part_offset: dict[str, int] = {}
        # client-balance mode: topic -> topicMetaInfo string, under an id (ms timestamp) that changes with it
        self.topic_meta: dict[str, str] = {}
        self.topic_meta_id = -2

    def __repr__(self) -> str:
        return (
            f"ConsumeGroup({self.name!r}, {self.consume_type.value}, topics={sorted(self.topics)}, "
            f"consumers={sorted(self.consumers)}, not_allocated={self.not_allocated})"
        )

    @property
    def is_client_balance(self) -> bool:
        return self.consume_type is ConsumeType.CLIENT_BALANCE

    def add(self, info: ConsumerInfo) -> None:
        """Add or refresh a member; raises GroupError when it disagrees with the group."""
        if not self.consumers:
            if self.consume_type is ConsumeType.BOUND:
                self.session_key = info.session_key
                self.source_count = info.source_count
                self.select_big = info.select_big
            elif self.consume_type is ConsumeType.CLIENT_BALANCE:
                self.source_count = info.source_count
        else:
            self._check_consistent(info)
            known = self.consumers.get(info.consumer_id)
            if known is not None:
                if info.consume_type is ConsumeType.CLIENT_BALANCE:
                    known.over_tls, known.node_id = info.over_tls, info.node_id
                    self.update_report(known, info.last_assigned_ms, info.topic_meta_id)
                return
        self.consumers[info.consumer_id] = info
        if self.consume_type is ConsumeType.BOUND:
            self._book_required_parts(info)

    @staticmethod
    def update_report(info: ConsumerInfo, last_assigned_ms: int, topic_meta_id: int) -> None:
        if last_assigned_ms != -2:
            info.last_assigned_ms = last_assigned_ms
        if topic_meta_id != -2:
            info.topic_meta_id = topic_meta_id

    def remove(self, consumer_id: str) -> ConsumerInfo | None:
        for key in [k for k, owner in self.part_owner.items() if owner == consumer_id]:
            del self.part_owner[key]
            self.part_offset.pop(key, None)
        return self.consumers.pop(consumer_id, None)

    def set_allocated(self) -> None:
        self.not_allocated = False

    @property
    def is_full(self) -> bool:
        return len(self.consumers) >= self.source_count

    def is_unready_bound(self) -> bool:
        """A bound group whose requested partitions are not handed out yet (normal balancing waits)."""
        return (
            self.consume_type is ConsumeType.BOUND
            and self.not_allocated
            and bool(self.part_owner)
            and self.allocated_times < 2
        )

    def _book_required_parts(self, info: ConsumerInfo) -> None:
        # Several members may name the same partition: select_big keeps the larger offset, else the smaller.
        for key, offset in info.required_parts.items():
            owner = self.consumers.get(self.part_owner.get(key, ""))
            previous = owner.required_parts.get(key) if owner is not None else None
            if previous is None or (offset >= previous if self.select_big else offset < previous):
                self.part_owner[key] = info.consumer_id
                self.part_offset[key] = offset

    def _check_consistent(self, info: ConsumerInfo) -> None:
        cid = info.consumer_id
        prefix = f"[Inconsistency subscribe] {cid}"
        if info.consume_type is not self.consume_type:
            raise GroupError(
                CLIENT_INCONSISTENT_CONSUMETYPE,
                f"{prefix} using {info.consume_type.value} subscribe is inconsistency with other consumers "
                f"using {self.consume_type.value} subscribe in the group",
            )
        if self.topics and self.topics != info.topics:
            raise GroupError(
                CLIENT_INCONSISTENT_TOPICSET,
                f"{prefix} subscribed topics {_java_set(info.topics)} is inconsistency with other consumers "
                f"in the group, existedTopics: {_java_set(self.topics)}",
            )
        self._check_conditions(info, prefix)
        if self.consume_type is ConsumeType.BOUND:
            self._check_bound(info, prefix)
        elif self.consume_type is ConsumeType.CLIENT_BALANCE and self.source_count > 0:
            self._check_source_count(info, prefix)
            for other in self.consumers.values():
                if other.node_id == info.node_id and other.consumer_id != cid:
                    raise GroupError(
                        CLIENT_DUPLICATE_INDEXID,
                        f"{prefix}'s nodeId value({info.node_id}) is occupied by {other.consumer_id}'s "
                        f"nodeId value({other.node_id}) in the group!",
                    )

    def _check_conditions(self, info: ConsumerInfo, prefix: str) -> None:
        mine, theirs = self.conditions, dict(info.conditions)
        if mine == theirs:
            return
        if not mine:
            detail = (
                f" subscribe with filter condition {_java_conditions(theirs)} is inconsistency with other "
                "consumers in the group: topic without conditions"
            )
        elif not theirs:
            detail = (
                " subscribe without filter condition  is inconsistency with other consumers in the group, "
                f"existed topic conditions is {_java_conditions(mine)}"
            )
        else:
            detail = (
                f" subscribe with filter condition {_java_conditions(theirs)} is inconsistency with other "
                f"consumers in the group, existed topic conditions is {_java_conditions(mine)}"
            )
        raise GroupError(CLIENT_INCONSISTENT_FILTERSET, prefix + detail)

    def _check_bound(self, info: ConsumerInfo, prefix: str) -> None:
        if self.session_key != info.session_key:
            raise GroupError(
                CLIENT_INCONSISTENT_SESSIONKEY,
                f"{prefix}'s sessionKey is inconsistency with other consumers in the group, required is "
                f"{self.session_key}, request is {info.session_key}",
            )
        if self.select_big != info.select_big:
            raise GroupError(
                CLIENT_INCONSISTENT_SELECTBIG,
                f"{prefix}'s isSelectBig is inconsistency with other consumers in the group, required is "
                f"{str(self.select_big).lower()}, request is {str(info.select_big).lower()}",
            )
        self._check_source_count(info, prefix)

    def _check_source_count(self, info: ConsumerInfo, prefix: str) -> None:
        if self.source_count != info.source_count:
            raise GroupError(
                CLIENT_INCONSISTENT_SOURCECOUNT,
                f"{prefix}'s sourceCount is inconsistency with other consumers in the group, required is "
                f"{self.source_count}, request is {info.source_count}",
            )


class ConsumerRegistry:
    """Every group, which group each consumer is in, what each consumer holds, events and deadlines.

    ``timeout`` is the consumer heartbeat timeout in seconds; a consumer silent for longer is released by
    ``expire()`` (its partitions go back to the balancer).
    """

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self.groups: dict[str, ConsumeGroup] = {}
        self.group_of: dict[str, str] = {}
        self.holdings: dict[str, Holdings] = {}
        self.events = EventQueues()
        self._deadlines: dict[tuple[str, str], float] = {}

    def __repr__(self) -> str:
        return f"ConsumerRegistry(groups={list(self.groups.values())!r}, events={self.events!r})"

    def members(self, group: str) -> list[str]:
        found = self.groups.get(group)
        return list(found.consumers) if found is not None else []

    def add(
        self, info: ConsumerInfo, not_allocated: bool, reported: Iterable[Partition] = ()
    ) -> ConsumeGroup:
        """Register (or re-register) a consumer; raises GroupError. ``reported`` = partitions it holds."""
        group = self.groups.get(info.group) or ConsumeGroup(info)
        group.add(info)
        self.groups[info.group] = group
        if not not_allocated:
            group.set_allocated()
        self.group_of[info.consumer_id] = info.group
        held = list(reported)
        if held:
            self.holdings[info.consumer_id] = _as_holdings(held)
        self._deadlines[(info.consumer_id, info.group)] = self._clock() + self.timeout
        return group

    def touch(self, consumer_id: str, group: str) -> bool:
        """Refresh a consumer's heartbeat deadline; False when it is not registered."""
        node = (consumer_id, group)
        if node not in self._deadlines:
            return False
        self._deadlines[node] = self._clock() + self.timeout
        return True

    def is_live(self, consumer_id: str, group: str) -> bool:
        return (consumer_id, group) in self._deadlines

    def release(self, consumer_id: str, group: str) -> None:
        """Forget a consumer (close or timeout): membership, holdings and pending events."""
        self._deadlines.pop((consumer_id, group), None)
        found = self.groups.get(group)
        if found is not None:
            found.remove(consumer_id)
            if not found.consumers:
                del self.groups[group]
        self.group_of.pop(consumer_id, None)
        self.holdings.pop(consumer_id, None)
        self.events.remove_all(consumer_id)

    def expire(self) -> list[str]:
        """Release every consumer whose deadline has passed; return their ``consumerId@group`` keys."""
        now = self._clock()
        overdue = [node for node, deadline in self._deadlines.items() if deadline < now]
        for consumer_id, group in overdue:
            self.release(consumer_id, group)
        return [f"{cid}@{group}" for cid, group in overdue]

    def report(self, consumer_id: str, partitions: Iterable[Partition]) -> bool:
        """Adopt the partitions a consumer says it holds if they differ from ours; True when they differed."""
        reported = list(partitions)
        held = self.holdings.setdefault(consumer_id, {})
        ours = {key for parts in held.values() for key in parts}
        if len(ours) == len(reported) and all(p.partition_key in held.get(p.topic, {}) for p in reported):
            return False
        self.holdings[consumer_id] = _as_holdings(reported)
        return True

    def acknowledge(self, consumer_id: str, group: str) -> ConsumerEvent | None:
        """The consumer finished an event: the group counts as allocated and its oldest event goes away."""
        found = self.groups.get(group)
        if found is not None:
            found.set_allocated()
        return self.events.remove_first(consumer_id, self.members(self.group_of.get(consumer_id, "")))

    def next_event(self, consumer_id: str) -> ConsumerEvent | None:
        """The event to hand out in this heartbeat answer, if any; it is marked as being processed."""
        group = self.group_of.get(consumer_id)
        if group is None:
            return None
        event = self.events.peek(consumer_id, self.members(group))
        if event is None or event.processing:
            return None
        event.processing = True
        return event

    def server_balance_groups(self) -> list[str]:
        return [name for name, group in self.groups.items() if not group.is_client_balance]

    def client_balance_groups(self) -> list[str]:
        return [name for name, group in self.groups.items() if group.is_client_balance]


def _as_holdings(partitions: Iterable[Partition]) -> Holdings:
    held: Holdings = {}
    for part in partitions:
        held.setdefault(part.topic, {})[part.partition_key] = part
    return held
