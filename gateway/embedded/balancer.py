"""Server-side partition balancing for consumer groups, the way TubeMQ's ``DefaultLoadBalancer`` does it.

Each round (one ``rebalanceId``) computes a target assignment per consumer and turns the difference from what
the consumer reported holding into events: a DISCONNECT for partitions to give up and a CONNECT for partitions
to take (ONLY_DISCONNECT / ONLY_CONNECT when the other side is empty). The events are delivered one at a time
through consumer heartbeats (see ``ConsumerRegistry``).

* First round after start: every group is split deterministically, consumers sorted by id, each topic's
  partitions sorted and cut into contiguous runs (``P // C`` each, the first ``P % C`` consumers one more).
* Later rounds skip groups that still have unfinished events (for at most ``max_unfinished_rounds`` rounds,
  after which their consumers' events are dropped). A consumer keeps the partitions it holds that are still
  subscribable. Partitions nobody holds go to random members that have heart-beaten at least once; only when
  nothing is left unassigned does the group get evened out: consumers above the ``ceil(P / C)`` / ``P // C``
  targets give partitions up and consumers below take them. So a new member first waits one round, and an
  uneven random pick is corrected in the following round.
* Bound groups (§6.9) wait until ``totalCount`` members are registered, then each requested partition goes to
  the member that won it; the group is balanced normally once a member acknowledged an event (or after two
  bound attempts).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from gateway.embedded.consumer_groups import ConsumeGroup, ConsumerRegistry
from gateway.embedded.rebalance_queues import ConsumerEvent, EventType
from gateway.tubemq.wire.meta import Partition

# topics -> their subscribable partitions on serving brokers, keyed by partition key, in partition order
PartitionSource = Callable[[Iterable[str]], dict[str, Partition]]
# consumer id -> topic -> target partitions
Assignment = dict[str, dict[str, list[Partition]]]

MAX_UNFINISHED_ROUNDS = 10


class Balancer:
    """Runs balance rounds over a ``ConsumerRegistry``; ``rounds`` counts them and is the rebalanceId."""

    def __init__(
        self,
        registry: ConsumerRegistry,
        subscribable: PartitionSource,
        *,
        rng: random.Random | None = None,
        max_unfinished_rounds: int = MAX_UNFINISHED_ROUNDS,
    ) -> None:
        self._registry = registry
        self._subscribable = subscribable
        self._rng = rng or random.Random()
        self._max_unfinished_rounds = max_unfinished_rounds
        self.rounds = 0

    def __repr__(self) -> str:
        return f"Balancer(rounds={self.rounds}, registry={self._registry!r})"

    def run_round(self) -> int:
        """One balance round over every server-balanced group; returns its rebalanceId."""
        self.rounds += 1
        rebalance_id = self.rounds
        first = rebalance_id == 1
        groups = self._registry.server_balance_groups() if first else self._groups_to_balance()
        if groups:
            self._emit(rebalance_id, self._bound_assignment(groups))
            self._emit(rebalance_id, self._bulk_assign(groups) if first else self._balance_cluster(groups))
        return rebalance_id

    def _group(self, name: str) -> ConsumeGroup | None:
        group = self._registry.groups.get(name)
        if group is None or group.is_client_balance or not group.consumers:
            return None
        return group

    def _groups_to_balance(self) -> list[str]:
        registry, events = self._registry, self._registry.events
        unfinished: set[str] = set()
        for consumer_id in events.consumers_with_events():
            group = registry.group_of.get(consumer_id)
            if group is None or not registry.is_live(consumer_id, group):
                continue
            if events.unfinished_rounds.get(group, 0) >= self._max_unfinished_rounds:
                events.remove_all(consumer_id)
            else:
                unfinished.add(group)
        events.count_unfinished_round(unfinished)
        return [name for name in registry.server_balance_groups() if name not in unfinished]

    def _emit(self, rebalance_id: int, target: Mapping[str, Mapping[str, Sequence[Partition]]]) -> None:
        """Turn target assignments into events against what each consumer holds now."""
        registry = self._registry
        for consumer_id, topics in target.items():
            group = registry.groups.get(registry.group_of.get(consumer_id, ""))
            if group is None or consumer_id not in group.consumers:
                continue
            held = registry.holdings.get(consumer_id, {})
            removed: list[Partition] = []
            added: list[Partition] = []
            for topic, parts in topics.items():
                current = held.get(topic, {})
                wanted = {part.partition_key for part in parts}
                removed.extend(part for key, part in current.items() if key not in wanted)
                added.extend(part for part in parts if part.partition_key not in current)
            if removed:
                op = EventType.DISCONNECT if added else EventType.ONLY_DISCONNECT
                registry.events.add(consumer_id, ConsumerEvent(rebalance_id, op, tuple(removed)))
            if added:
                op = EventType.CONNECT if removed else EventType.ONLY_CONNECT
                registry.events.add(consumer_id, ConsumerEvent(rebalance_id, op, tuple(added)))

    def _bound_assignment(self, groups: Iterable[str]) -> Assignment:
        target: Assignment = {}
        for name in groups:
            group = self._group(name)
            if group is None or not group.is_unready_bound():
                continue
            if not group.is_full:
                continue
            parts = self._subscribable(group.topics)
            for key, consumer_id in group.part_owner.items():
                part = parts.get(key)
                if part is not None:
                    target.setdefault(consumer_id, {}).setdefault(part.topic, []).append(part)
            group.allocated_times += 1
        return target

    def _bulk_assign(self, groups: Iterable[str]) -> Assignment:
        target: Assignment = {}
        for name in groups:
            group = self._group(name)
            if group is None or group.is_unready_bound():
                continue
            consumers = sorted(group.consumers)
            for topic in sorted(group.topics):
                parts = sorted(
                    self._subscribable([topic]).values(),
                )
                per, extra = divmod(len(parts), len(consumers))
                for i, consumer_id in enumerate(consumers):
                    start = per * i + min(i, extra)
                    count = per + (1 if i < extra else 0)
                    target.setdefault(consumer_id, {}).setdefault(topic, []).extend(
                        parts[start : start + count]
                    )
        return target

    def _balance_cluster(self, groups: Sequence[str]) -> Assignment:
        target: Assignment = {}
        settled: list[str] = []
        for name in groups:
            group = self._group(name)
            if group is None or group.is_unready_bound():
                continue
            free = self._subscribable(group.topics)
            candidates: list[str] = []
            for consumer_id in group.consumers:
                mine = target[consumer_id] = {}
                held = self._registry.holdings.get(consumer_id)
                if held is None:
                    continue  # never heart-beaten: takes part only in evening out
                candidates.append(consumer_id)
                for topic, parts in held.items():
                    mine[topic] = [free.pop(key) for key in parts if key in free]
            if free:
                if candidates:
                    self._random_assign(free.values(), candidates, target)
            else:
                settled.append(name)
        for name in settled:
            group = self._group(name)
            if group is not None:
                self._even_out(group, target)
        return target

    def _random_assign(
        self, parts: Iterable[Partition], candidates: Sequence[str], target: Assignment
    ) -> None:
        for part in parts:
            consumer_id = candidates[self._rng.randrange(len(candidates))]
            target.setdefault(consumer_id, {}).setdefault(part.topic, []).append(part)

    def _even_out(self, group: ConsumeGroup, target: Assignment) -> None:
        total = len(self._subscribable(group.topics))
        low, over = divmod(total, len(group.consumers))
        high = low + 1 if over else low
        to_move: deque[Partition] = deque()
        to_take: dict[str, int] = {}
        for consumer_id in group.consumers:
            mine = target.get(consumer_id, {})
            load = sum(len(parts) for parts in mine.values())
            if load < high:
                if load == 0 or load < low:
                    to_take[consumer_id] = high - load
                continue
            if over > 0:
                over -= 1
                surplus = load - high
            else:
                surplus = load - low
            _give_up(mine.values(), surplus, to_move)
        for consumer_id, wanted in to_take.items():
            for _ in range(wanted):
                if not to_move:
                    break
                _assign(target, consumer_id, to_move.popleft())
        for consumer_id in to_take:
            if not to_move:
                break
            _assign(target, consumer_id, to_move.popleft())


def _give_up(lists: Collection[list[Partition]], surplus: int, to_move: deque[Partition]) -> int:
    """Move ``surplus`` partitions from the front of the per-topic lists (topic by topic) into ``to_move``."""
    for parts in lists:
        if surplus <= 0:
            break
        taken = parts[:surplus]
        del parts[:surplus]
        to_move.extend(taken)
        surplus -= len(taken)
    return surplus


def _assign(target: Assignment, consumer_id: str, part: Partition) -> None:
    target.setdefault(consumer_id, {}).setdefault(part.topic, []).append(part)
