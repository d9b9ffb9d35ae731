"""The embedded master's balancer and event hand-off, driven synchronously (no sockets, no sleeping)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.embedded.balancer import Balancer
from gateway.embedded.consumer_groups import ConsumerInfo, ConsumerRegistry, ConsumeType
from gateway.embedded.master_common import BrokerDirectory
from gateway.embedded.rebalance_queues import EventType
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.wire.meta import Partition
from tests.support.waiting import ManualClock


@dataclass
class StaticBroker:
    """A broker as the master sees it, without a server behind it."""

    broker_id: int
    address: NodeAddress
    topics: Mapping[str, TopicSpec] = field(default_factory=dict)
    is_serving: bool = True


def make(
    *specs: TopicSpec, brokers: int = 1, seed: int = 7, timeout: float = 30.0
) -> tuple[ConsumerRegistry, Balancer, list[StaticBroker], ManualClock]:
    clock = ManualClock(100.0)
    nodes = [StaticBroker(i, NodeAddress("127.0.0.1", 8122 + i), {s.name: s for s in specs}) for i in (1, 2)]
    nodes = nodes[:brokers]
    directory = BrokerDirectory(nodes, clock_ms=lambda: 1)
    registry = ConsumerRegistry(timeout, clock)
    return registry, Balancer(registry, directory.subscribable, rng=random.Random(seed)), nodes, clock


def join(registry: ConsumerRegistry, cid: str, group: str = "g", *topics: str, beat: bool = True) -> None:
    registry.add(ConsumerInfo(cid, group, frozenset(topics or ("demo",))), not_allocated=True)
    if beat:
        registry.holdings.setdefault(cid, {})  # what the first heartbeat does


def keys(parts: tuple[Partition, ...] | list[Partition]) -> list[str]:
    return [p.partition_key for p in parts]


def held(registry: ConsumerRegistry, cid: str) -> set[str]:
    return {key for parts in registry.holdings.get(cid, {}).values() for key in parts}


def drain(registry: ConsumerRegistry) -> int:
    """Let every consumer act like a well-behaved client until no event is left; returns events handled."""
    handled = 0
    progress = True
    while progress:
        progress = False
        for group in list(registry.groups.values()):
            for cid in list(group.consumers):
                event = registry.next_event(cid)
                if event is None:
                    continue
                mine = {
                    p.partition_key: p
                    for parts in registry.holdings.get(cid, {}).values()
                    for p in parts.values()
                }
                for part in event.partitions:
                    if event.is_disconnect:
                        mine.pop(part.partition_key, None)
                    else:
                        mine[part.partition_key] = part
                registry.report(cid, mine.values())
                registry.acknowledge(cid, group.name)
                handled += 1
                progress = True
    return handled


def test_first_round_splits_sorted_consumers_into_contiguous_runs() -> None:
    registry, balancer, _, _ = make(TopicSpec("demo", 5))
    for cid in ("c3", "c1", "c2"):
        join(registry, cid, beat=False)
    assert balancer.run_round() == 1
    got = {cid: registry.events.pending(cid) for cid in ("c1", "c2", "c3")}
    assert {cid: keys(evs[0].partitions) for cid, evs in got.items()} == {
        "c1": ["1:demo:0", "1:demo:1"],
        "c2": ["1:demo:2", "1:demo:3"],
        "c3": ["1:demo:4"],
    }
    assert all(evs[0].op_type is EventType.ONLY_CONNECT and evs[0].rebalance_id == 1 for evs in got.values())


def test_new_consumer_waits_for_its_first_heartbeat_then_gets_free_partitions() -> None:
    registry, balancer, _, _ = make(TopicSpec("demo", 3))
    balancer.run_round()  # the start-up round, with nobody registered yet
    join(registry, "c1", beat=False)
    balancer.run_round()
    assert registry.events.pending("c1") == []
    registry.holdings["c1"] = {}
    assert balancer.run_round() == 3
    [event] = registry.events.pending("c1")
    assert (event.rebalance_id, event.op_type, keys(event.partitions)) == (
        3,
        EventType.ONLY_CONNECT,
        ["1:demo:0", "1:demo:1", "1:demo:2"],
    )
    # handed out once, then held back until acknowledged
    assert registry.next_event("c1") is event and registry.next_event("c1") is None
    assert registry.groups["g"].not_allocated
    registry.acknowledge("c1", "g")
    assert not registry.groups["g"].not_allocated and registry.events.pending("c1") == []


def test_disconnects_of_a_group_go_out_before_its_connects() -> None:
    registry, balancer, _, _ = make(TopicSpec("demo", 4))
    balancer.run_round()
    join(registry, "a")
    balancer.run_round()
    drain(registry)
    assert held(registry, "a") == {f"1:demo:{i}" for i in range(4)}
    join(registry, "b")
    balancer.run_round()
    [give] = registry.events.pending("a")
    [take] = registry.events.pending("b")
    assert give.op_type is EventType.ONLY_DISCONNECT and take.op_type is EventType.ONLY_CONNECT
    assert len(give.partitions) == len(take.partitions) == 2
    assert set(keys(give.partitions)) == set(keys(take.partitions))
    assert registry.next_event("b") is None  # held back: a still has to release
    assert registry.next_event("a") is give
    registry.report("a", [p for p in registry.holdings["a"]["demo"].values() if p not in give.partitions])
    registry.acknowledge("a", "g")
    assert registry.next_event("b") is take


def test_groups_with_unfinished_events_are_skipped_and_stale_events_dropped() -> None:
    registry, balancer, _, _ = make(TopicSpec("demo", 2))
    balancer.run_round()
    join(registry, "a")
    balancer.run_round()
    assert len(registry.events.pending("a")) == 1
    for _ in range(10):
        balancer.run_round()  # a never acknowledges: the group is not balanced again
        assert len(registry.events.pending("a")) == 1
    balancer.run_round()  # eleventh round: a's unfinished events are dropped, the group is balanced anew
    [event] = registry.events.pending("a")
    assert event.rebalance_id == balancer.rounds


def test_release_and_expiry_return_partitions_to_the_others() -> None:
    registry, balancer, _, clock = make(TopicSpec("demo", 4), timeout=5.0)
    balancer.run_round()
    for cid in ("a", "b"):
        join(registry, cid)
    for _ in range(4):
        balancer.run_round()
        drain(registry)
    assert len(held(registry, "a")) == len(held(registry, "b")) == 2
    registry.release("b", "g")
    balancer.run_round()
    drain(registry)
    assert len(held(registry, "a")) == 4
    join(registry, "c")
    clock.advance(4)
    registry.touch("a", "g")
    clock.advance(2)
    assert registry.expire() == ["c@g"] and "c" not in registry.groups["g"].consumers
    clock.advance(4)
    assert registry.expire() == ["a@g"] and "g" not in registry.groups


def test_partitions_of_a_stopped_broker_are_taken_back() -> None:
    registry, balancer, nodes, _ = make(TopicSpec("demo", 2), brokers=2)
    balancer.run_round()
    join(registry, "a")
    balancer.run_round()
    drain(registry)
    assert len(held(registry, "a")) == 4
    nodes[1].is_serving = False
    balancer.run_round()
    [event] = registry.events.pending("a")
    assert event.op_type is EventType.ONLY_DISCONNECT and keys(event.partitions) == ["2:demo:0", "2:demo:1"]


# Like TubeMQ's balancer, ours can take a partition from a consumer above target without any consumer below
# `P // C` to give it to; it is then placed at random in the next round until it lands well. That converges
# with probability 1 but not in a bounded number of rounds, so the examples are fixed (derandomize) and the
# seed makes each one deterministic.
@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    partitions=st.integers(1, 12),
    stores=st.integers(1, 2),
    consumers=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    leave=st.integers(0, 4),
)
def test_balance_converges_to_an_even_exclusive_split(
    partitions: int, stores: int, consumers: int, seed: int, leave: int
) -> None:
    registry, balancer, _, _ = make(TopicSpec("demo", partitions, stores), TopicSpec("other", 3), seed=seed)
    balancer.run_round()
    members = [f"c{i}" for i in range(consumers)]
    for cid in members:
        join(registry, cid, "g", "demo", "other")
    for cid in members[: min(leave, consumers - 1)]:
        settle(registry, balancer)
        registry.release(cid, "g")
    settle(registry, balancer)
    live = list(registry.groups["g"].consumers)
    loads = [len(held(registry, cid)) for cid in live]
    total = partitions * stores + 3
    assert sum(loads) == total and max(loads) - min(loads) <= 1
    assert len(set().union(*(held(registry, cid) for cid in live))) == total


def settle(registry: ConsumerRegistry, balancer: Balancer) -> None:
    for _ in range(40):
        balancer.run_round()
        if drain(registry) == 0 and not registry.events.consumers_with_events():
            return
    raise AssertionError(f"no stable assignment after 40 rounds: {registry!r}")


def test_bound_group_waits_for_all_members_and_honours_requested_partitions() -> None:
    registry, balancer, _, _ = make(TopicSpec("demo", 4))
    balancer.run_round()

    def bound(cid: str, required: dict[str, int]) -> ConsumerInfo:
        return ConsumerInfo(
            cid,
            "b",
            frozenset({"demo"}),
            ConsumeType.BOUND,
            session_key="s1",
            source_count=2,
            required_parts=required,
        )

    registry.add(bound("x", {"1:demo:0": 10, "1:demo:1": 50}), not_allocated=True)
    registry.holdings["x"] = {}
    balancer.run_round()
    assert registry.events.pending("x") == []  # one of two members: nothing is handed out
    registry.add(bound("y", {"1:demo:1": 70, "1:demo:2": 0}), not_allocated=True)
    registry.holdings["y"] = {}
    assert registry.groups["b"].part_owner == {"1:demo:0": "x", "1:demo:1": "y", "1:demo:2": "y"}
    assert registry.groups["b"].part_offset["1:demo:1"] == 70  # selectBig: the larger offset wins
    balancer.run_round()
    assert keys(registry.events.pending("x")[0].partitions) == ["1:demo:0"]
    assert keys(registry.events.pending("y")[0].partitions) == ["1:demo:1", "1:demo:2"]
    drain(registry)
    assert not registry.groups["b"].not_allocated
    settle(registry, balancer)
    # once allocated, the group is an ordinary one: the fourth partition is placed and loads evened out
    assert len(held(registry, "x")) == len(held(registry, "y")) == 2
