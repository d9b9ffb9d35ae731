"""Range reads and partition discovery against embedded brokers and a master over loopback.

Ground truth comes from the broker's own store: every append returns the message's index offset, so the
messages of partition P in ``[start, end)`` are known exactly, and a read must return exactly those.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest

from gateway.embedded.broker import EmbeddedBroker
from gateway.embedded.master import EmbeddedMaster
from gateway.embedded.msgid import ID_EPOCH, ID_PERIOD_NS
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.consumer.batch import ConsumedMessage
from gateway.tubemq.errors import InternalServerError, TopicNotDeployed
from gateway.tubemq.net.backoff import ConstantBackoff
from gateway.tubemq.net.master import MasterClient
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.ranges.partitions import TopicLayout, discover_partitions, parse_topic_meta
from gateway.tubemq.ranges.reader import OffsetBounds, RangeReader
from gateway.tubemq.wire.meta import BrokerInfo, Partition
from gateway.tubemq.wire.payload import encode_payload, java_string_hash
from tests.support.faultproxy import FaultProxy
from tests.support.waiting import ManualClock

TOPICS = [
    TopicSpec("mixed", 3),  # three partitions share one store: their entries interleave
    TopicSpec("solo", 1, 2),  # two stores of one partition each: every batch is dense
    TopicSpec("readonly", 2, accept_publish=False),
]


@pytest.fixture
async def pool(network: MemoryNetwork) -> AsyncIterator[ConnectionPool]:
    async with ConnectionPool(
        connect_timeout=1.0, backoff=ConstantBackoff(0.01), connector=network.create_connection
    ) as p:
        yield p


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def brokers(network: MemoryNetwork, clock: ManualClock) -> AsyncIterator[list[EmbeddedBroker]]:
    started = [
        EmbeddedBroker(i, TOPICS, consumer_timeout=30.0, clock=clock, start_server=network.start_server)
        for i in (1, 2)
    ]
    for broker in started:
        await broker.start()
    yield started
    for broker in started:
        await broker.stop()


@pytest.fixture
async def master(network: MemoryNetwork, brokers: list[EmbeddedBroker]) -> AsyncIterator[EmbeddedMaster]:
    async with EmbeddedMaster(brokers, start_server=network.start_server) as m:
        yield m


@pytest.fixture
def reader(pool: ConnectionPool) -> RangeReader:
    return RangeReader(pool, group_prefix="test_range", retry_wait=0.01)


def partition(broker: EmbeddedBroker, topic: str, partition_id: int) -> Partition:
    return Partition(
        BrokerInfo(broker.broker_id, broker.address.host, broker.address.port), topic, partition_id
    )


class Log:
    """Appends to one broker's stores and remembers (offset, message id, body) per partition."""

    def __init__(self, broker: EmbeddedBroker, topic: str) -> None:
        self.broker = broker
        self.topic = topic
        self.by_partition: dict[int, list[tuple[int, int, bytes]]] = {}
        self.counter = 0

    def append(self, partition_id: int, size: int = 16, stream_id: str | None = None) -> None:
        self.counter += 1
        body = f"m{self.counter}-".encode().ljust(size, b"x")
        data, flag = encode_payload(body, {"n": str(self.counter)}, stream_id)
        store = self.broker.store(self.topic, partition_id // 10000)
        type_hash = java_string_hash(stream_id) if stream_id else -1
        result = store.append(partition_id, data, flag, type_hash)
        self.by_partition.setdefault(partition_id, []).append((result.append_offset, result.message_id, body))

    def expected(self, partition_id: int, start: int, end: int) -> list[int]:
        return [mid for off, mid, _ in self.by_partition.get(partition_id, []) if start <= off < end]

    def offset_of(self, partition_id: int) -> dict[int, int]:
        return {mid: off for off, mid, _ in self.by_partition.get(partition_id, [])}


async def read_all(reader: RangeReader, part: Partition, start: int, end: int) -> list[ConsumedMessage]:
    out: list[ConsumedMessage] = []
    position = start
    async with aclosing(reader.read(part, start, end)) as batches:
        async for batch in batches:
            assert batch.start >= position and batch.end <= end
            position = batch.end
            out.extend(batch.messages)
    return out


# --- discovery ------------------------------------------------------------------------------------------


async def test_discovery_lists_every_subscribable_partition(
    master: EmbeddedMaster, brokers: list[EmbeddedBroker], pool: ConnectionPool
) -> None:
    client = MasterClient([master.address], pool, timeout=2.0)
    layout = await discover_partitions(client, "solo", client_id="c1", group="g_disc", host_name="127.0.0.1")
    assert isinstance(layout, TopicLayout)
    assert sorted(layout.by_key()) == ["1:solo:0", "1:solo:10000", "2:solo:0", "2:solo:10000"]
    assert {p.broker.address for p in layout.partitions} == {b.address for b in brokers}
    assert layout.visit_token == master.visit_token
    readonly = await discover_partitions(client, "readonly", client_id="c1", group="g_disc", host_name="h")
    assert [p.partition_key for p in readonly.partitions] == [
        "1:readonly:0",
        "1:readonly:1",
        "2:readonly:0",
        "2:readonly:1",
    ]
    # The private consumer closed: registering the same group again with another id is fine.
    await discover_partitions(client, "mixed", client_id="c2", group="g_disc", host_name="h")
    with pytest.raises(TopicNotDeployed):
        await discover_partitions(client, "nosuch", client_id="c3", group="g_disc", host_name="h")
    await brokers[1].stop()
    down = await discover_partitions(client, "solo", client_id="c4", group="g_disc", host_name="h")
    assert sorted(down.by_key()) == ["1:solo:0", "1:solo:10000"]


def test_topic_meta_parsing_skips_unknown_brokers_and_closed_partitions() -> None:
    brokers = {1: BrokerInfo(1, "h1", 8123), 2: BrokerInfo(2, "h2", 8123)}
    topic, parts = parse_topic_meta("demo#1:2:2:1,2:1:3:0,9:1:1:1", brokers)
    assert topic == "demo"
    assert [p.partition_key for p in parts] == ["1:demo:0", "1:demo:1", "1:demo:10000", "1:demo:10001"]
    with pytest.raises(ValueError):
        parse_topic_meta("demo#1:2:x:1", brokers)
    with pytest.raises(ValueError):
        parse_topic_meta("no-separator", brokers)


# --- bounds ---------------------------------------------------------------------------------------------


async def test_bounds_answer_store_min_and_max(brokers: list[EmbeddedBroker], reader: RangeReader) -> None:
    part = partition(brokers[0], "mixed", 1)
    assert await reader.bounds(part) == OffsetBounds(0, 0)
    log = Log(brokers[0], "mixed")
    for i in range(10):
        log.append(i % 3)
    assert await reader.bounds(part) == OffsetBounds(0, 280)
    assert brokers[0].consumers.registrations == {}


# --- exact ranges -----------------------------------------------------------------------------------------


async def test_random_ranges_on_an_interleaved_store_are_exact(
    brokers: list[EmbeddedBroker], reader: RangeReader
) -> None:
    rng = random.Random(7)
    log = Log(brokers[0], "mixed")
    for _ in range(400):
        log.append(rng.choice([0, 0, 1, 2]), stream_id=rng.choice([None, "a", "b"]))
    top = brokers[0].store("mixed").max_offset
    for _ in range(30):
        pid = rng.randrange(3)
        start, end = sorted(28 * rng.randrange(top // 28 + 1) for _ in range(2))
        got = await read_all(reader, partition(brokers[0], "mixed", pid), start, end)
        assert [m.message_id for m in got] == log.expected(pid, start, end)
        offsets = log.offset_of(pid)
        assert all(m.offset is None or m.offset == offsets[m.message_id] for m in got)
    first = await read_all(reader, partition(brokers[0], "mixed", 0), 0, top)
    _, _, body = log.by_partition[0][0]
    number = body.split(b"-")[0][1:].decode()
    assert first[0].body == body and first[0].attributes == {"n": number}
    assert brokers[0].consumers.registrations == {}


async def test_a_batch_straddling_the_end_is_cut_by_a_probe(
    brokers: list[EmbeddedBroker], reader: RangeReader
) -> None:
    log = Log(brokers[0], "mixed")
    for i in range(300):
        log.append(i % 3)
    planned = {pid: brokers[0].store("mixed").max_offset for pid in range(3)}
    for i in range(300):  # appended after planning: the first batch now reaches past the planned end
        log.append((i * 7) % 3)
    for pid, end in planned.items():
        got = await read_all(reader, partition(brokers[0], "mixed", pid), 0, end)
        assert [m.message_id for m in got] == log.expected(pid, 0, end)
        assert len(got) == 100
    assert reader.stats.probes >= 3
    # Ranges that end inside the later appends, too.
    for end in (28 * 301, 28 * 450, 28 * 599):
        got = await read_all(reader, partition(brokers[0], "mixed", 2), 28 * 5, end)
        assert [m.message_id for m in got] == log.expected(2, 28 * 5, end)


async def test_dense_batches_are_cut_without_a_probe_and_carry_offsets(
    brokers: list[EmbeddedBroker], reader: RangeReader
) -> None:
    log = Log(brokers[0], "solo")
    for _ in range(50):
        log.append(10000)
    end = brokers[0].store("solo", 1).max_offset
    for _ in range(50):
        log.append(10000)
    got = await read_all(reader, partition(brokers[0], "solo", 10000), 28 * 10, end)
    assert [m.message_id for m in got] == log.expected(10000, 28 * 10, end)
    assert [m.offset for m in got] == [28 * i for i in range(10, 50)]
    assert reader.stats.probes == 0


async def test_ranges_stay_exact_while_messages_keep_arriving(
    brokers: list[EmbeddedBroker], pool: ConnectionPool
) -> None:
    log = Log(brokers[0], "mixed")
    rng = random.Random(3)
    for _ in range(2000):
        log.append(rng.randrange(3), size=200)
    end = brokers[0].store("mixed").max_offset
    stop = asyncio.Event()

    async def keep_appending() -> None:
        while not stop.is_set():
            for _ in range(20):
                log.append(rng.randrange(3), size=200)
            await asyncio.sleep(0)

    writer = asyncio.create_task(keep_appending())
    readers = [RangeReader(pool, group_prefix="concurrent") for _ in range(3)]
    try:
        results = await asyncio.gather(
            *(read_all(readers[pid], partition(brokers[0], "mixed", pid), 0, end) for pid in range(3)),
            read_all(readers[0], partition(brokers[0], "mixed", 0), 28 * 100, end),
        )
    finally:
        stop.set()
        await writer
    for pid in range(3):
        assert [m.message_id for m in results[pid]] == log.expected(pid, 0, end)
    assert [m.message_id for m in results[3]] == log.expected(0, 28 * 100, end)
    assert len(log.by_partition[0]) > len(log.expected(0, 0, end))  # appends really overlapped


async def test_a_lost_registration_is_taken_up_again_without_gaps(
    brokers: list[EmbeddedBroker], reader: RangeReader, clock: ManualClock
) -> None:
    log = Log(brokers[0], "mixed")
    for i in range(60):
        log.append(i % 2, size=100_000)  # about five messages per 512 KiB batch
    end = brokers[0].store("mixed").max_offset
    part = partition(brokers[0], "mixed", 0)
    got: list[ConsumedMessage] = []
    async with aclosing(reader.read(part, 0, end)) as batches:
        async for batch in batches:
            got.extend(batch.messages)
            clock.advance(60.0)  # every registration times out before the next fetch
    assert [m.message_id for m in got] == log.expected(0, 0, end)
    assert reader.stats.retries >= 2


async def test_a_cut_link_is_survived_without_gaps(clock: ManualClock) -> None:
    # on loopback sockets: the fault proxy cuts a real TCP link between the reader and the broker
    broker = EmbeddedBroker(1, TOPICS, consumer_timeout=30.0, clock=clock)
    await broker.start()
    try:
        log = Log(broker, "mixed")
        for i in range(60):
            log.append(i % 3, size=100_000)
        end = broker.store("mixed").max_offset
        async with (
            ConnectionPool(connect_timeout=1.0, backoff=ConstantBackoff(0.01)) as pool,
            FaultProxy(broker.address) as proxy,
        ):
            reader = RangeReader(pool, group_prefix="test_range", retry_wait=0.01)
            part = Partition(BrokerInfo(1, proxy.address.host, proxy.address.port), "mixed", 1)
            got: list[ConsumedMessage] = []
            async with aclosing(reader.read(part, 0, end)) as batches:
                async for batch in batches:
                    got.extend(batch.messages)
                    proxy.cut()
        assert [m.message_id for m in got] == log.expected(1, 0, end)
        assert reader.stats.retries >= 1
    finally:
        await broker.stop()


async def test_private_groups_are_reused_and_read_nothing_twice(
    brokers: list[EmbeddedBroker], reader: RangeReader
) -> None:
    log = Log(brokers[0], "mixed")
    for i in range(30):
        log.append(i % 3)
    part = partition(brokers[0], "mixed", 0)
    end = brokers[0].store("mixed").max_offset
    first, second = await asyncio.gather(read_all(reader, part, 0, end), read_all(reader, part, 0, end))
    assert [m.message_id for m in first] == [m.message_id for m in second] == log.expected(0, 0, end)
    await read_all(reader, part, 0, end)
    groups = {g for g, _, _ in brokers[0].offsets._committed}
    assert len(groups) == 2  # two reads at once needed two groups; the third reused one
    assert brokers[0].consumers.registrations == {}
    assert await read_all(reader, part, end, end) == []
    assert await read_all(reader, part, end, end + 280) == []


async def test_runs_in_other_processes_share_a_few_group_names(
    brokers: list[EmbeddedBroker], pool: ConnectionPool, clock: ManualClock
) -> None:
    """Every reader object stands for one Spark worker process or run: with one prefix they leave as many
    groups behind as reads ran at once on a partition, not one set per run (issue #15, item 11)."""
    log = Log(brokers[0], "mixed")
    for i in range(30):
        log.append(i % 3)
    end = brokers[0].store("mixed").max_offset
    parts = [partition(brokers[0], "mixed", pid) for pid in range(3)]
    for _ in range(30):
        run = RangeReader(pool, group_prefix="runs")
        got = await asyncio.gather(*(read_all(run, p, 0, end) for p in parts))
        assert [[m.message_id for m in g] for g in got] == [log.expected(pid, 0, end) for pid in range(3)]
    assert {g for g, _, _ in brokers[0].offsets._committed} == {"runs_0"}
    # Two processes reading one partition at once: the broker's 410 sends the second to the next name.
    twins = [RangeReader(pool, group_prefix="runs") for _ in range(2)]
    both = await asyncio.gather(*(read_all(r, parts[0], 0, end) for r in twins))
    assert [m.message_id for m in both[0]] == [m.message_id for m in both[1]] == log.expected(0, 0, end)
    # A process that died holding runs_0 on the partition: the next run reads on with another name.
    dead = RangeReader(pool, group_prefix="runs")
    await dead._register(parts[0], "runs_0", 0)
    assert [
        m.message_id for m in await read_all(RangeReader(pool, group_prefix="runs"), parts[0], 0, end)
    ] == (log.expected(0, 0, end))
    assert {g for g, _, _ in brokers[0].offsets._committed} == {"runs_0", "runs_1"}


async def test_a_partition_the_broker_does_not_have_raises(
    brokers: list[EmbeddedBroker], reader: RangeReader
) -> None:
    with pytest.raises(InternalServerError):
        await read_all(reader, partition(brokers[0], "mixed", 7), 0, 28)
    with pytest.raises(ValueError):
        RangeReader(reader.pool, group_prefix="9bad")


async def test_a_stream_id_filter_reads_exactly_those_messages_of_the_range(
    brokers: list[EmbeddedBroker], reader: RangeReader
) -> None:
    log = Log(brokers[0], "mixed")
    kinds: dict[int, str | None] = {}
    rng = random.Random(15)
    for _ in range(400):
        kind = rng.choice(["a", "b", "c", None])
        log.append(rng.randrange(3), size=rng.choice([16, 30_000]), stream_id=kind)
        kinds[log.counter] = kind
    top = brokers[0].store("mixed").max_offset
    for pid, start, end in ((0, 0, top), (1, 28 * 37, 28 * 251), (2, 28 * 5, 28 * 390)):
        wanted = {
            m
            for off, m, body in log.by_partition[pid]
            if start <= off < end and kinds[_n(body)] in ("a", "c")
        }
        got: list[ConsumedMessage] = []
        async with aclosing(reader.read(partition(brokers[0], "mixed", pid), start, end, ["c", "a"])) as it:
            async for batch in it:
                got.extend(batch.messages)
        assert [m.message_id for m in got] == [m for _, m, _ in log.by_partition[pid] if m in wanted]
        assert {m.stream_id for m in got} <= {"a", "c"}


def _n(body: bytes) -> int:
    return int(body[1 : body.index(b"-")])


async def test_offsets_are_set_exactly_where_the_answer_places_messages(
    brokers: list[EmbeddedBroker], reader: RangeReader
) -> None:
    log = Log(brokers[0], "mixed")
    for i in range(30):
        log.append(i % 3)
    stretch = brokers[0].store("mixed").max_offset
    for _ in range(20):
        log.append(1)  # partition 1 alone
    end = brokers[0].store("mixed").max_offset
    for i in range(30):
        log.append(i % 3)  # after planning: the batch read from `stretch` holds siblings' entries past `end`
    top = brokers[0].store("mixed").max_offset
    part = partition(brokers[0], "mixed", 1)
    offsets = log.offset_of(1)

    # The probe cuts the batch at `end`; what it keeps fills [stretch, end), so each message is placed.
    got = await read_all(reader, part, stretch, end)
    assert [m.message_id for m in got] == log.expected(1, stretch, end)
    assert [m.offset for m in got] == [offsets[m.message_id] for m in got] == list(range(stretch, end, 28))
    assert reader.stats.probes == 1

    # One batch over the whole store: 40 of its 80 entries are partition 1's, and nothing in the answer
    # says which (message ids do not follow index order: tests/embedded/test_msgid.py).
    batches = reader.stats.batches
    mixed = await read_all(reader, part, 0, top)
    assert reader.stats.batches == batches + 1
    assert [m.message_id for m in mixed] == log.expected(1, 0, top)
    assert [m.offset for m in mixed] == [None] * 40


async def test_a_probe_places_the_end_when_ids_repeat_across_a_turn_of_the_id_cycle(
    network: MemoryNetwork, clock: ManualClock, reader: RangeReader
) -> None:
    # A real broker's id generator mirrors around each turn of its cycle: a message drawn d ns before the
    # top gets the same id as one drawn d ns after it. With the id clock moving 1 ns per message through
    # the turn, partition 0's batch holds its id sequence forwards then backwards, and the first message
    # at or after `end` has the id of one of its messages before `end`.
    top = ID_EPOCH + ID_PERIOD_NS // 2
    ticks = itertools.count(top - 20)
    broker = EmbeddedBroker(
        3, TOPICS, clock=clock, id_clock=lambda: next(ticks), start_server=network.start_server
    )
    await broker.start()
    try:
        log = Log(broker, "mixed")
        for i in range(41):
            log.append(i % 2)  # entry i: partition i % 2, id clock top - 20 + i
        end = 28 * 21
        kept = log.expected(0, 0, end)
        after = [mid for off, mid, _ in log.by_partition[0] if off >= end]
        assert after[0] in kept and kept[-1] != after[0]  # a single id would cut the batch too early
        got = await read_all(reader, partition(broker, "mixed", 0), 0, end)
        assert reader.stats.probes == 1
        assert [m.body for m in got] == [body for off, _, body in log.by_partition[0] if off < end]
        assert [m.message_id for m in got] == kept
    finally:
        await broker.stop()
