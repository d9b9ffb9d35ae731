"""Retention of the embedded broker's stores: old messages are deleted by size or age, offsets of the rest
stay, and a file store is compacted (and reopens with the same offsets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.store import INDEX_ENTRY_BYTES, Retention, TopicStore
from gateway.embedded.topics import TopicSpec
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from tests.support.waiting import ManualClock, eventually


def fill(store: TopicStore, clock: ManualClock, count: int, size: int) -> list[int]:
    offsets = []
    for i in range(count):
        offsets.append(store.append(0, f"{i:04d}".encode().ljust(size, b"."), 0).append_offset)
        clock.advance(1.0)
    return offsets


def bodies(store: TopicStore) -> list[bytes]:
    return [m.data[:4] for m in store.read(0, 0, max_entries=10_000, max_bytes=1 << 30).messages]


def test_size_retention_drops_the_oldest_and_keeps_offsets() -> None:
    clock = ManualClock()
    store = TopicStore("t", 0, clock=clock, retention=Retention(max_bytes=100))
    offsets = fill(store, clock, 10, 30)
    assert store.enforce_retention() == 7  # 3 x 30 bytes fit in 100
    assert store.min_offset == offsets[7] == 7 * INDEX_ENTRY_BYTES
    assert bodies(store) == [b"0007", b"0008", b"0009"]
    kept = store.read(0, offsets[8], max_entries=1).messages
    assert kept[0].offset == offsets[8] and kept[0].data[:4] == b"0008"
    assert store.append(0, b"n" * 30, 0).append_offset == offsets[-1] + INDEX_ENTRY_BYTES
    assert store.enforce_retention() == 1  # 4 x 30 bytes: one too many


def test_age_retention_keeps_the_newest_even_when_old() -> None:
    clock = ManualClock()
    store = TopicStore("t", 0, clock=clock, retention=Retention(max_age=3.5))
    fill(store, clock, 10, 10)  # appended at 1000 .. 1009, now 1010: older than 1006.5 goes
    assert store.enforce_retention() == 7
    assert bodies(store) == [b"0007", b"0008", b"0009"]
    clock.advance(100)
    assert store.enforce_retention() == 2  # the last message stays
    assert bodies(store) == [b"0009"]


def test_no_retention_keeps_everything() -> None:
    clock = ManualClock()
    store = TopicStore("t", 0, clock=clock)
    fill(store, clock, 5, 10)
    assert store.enforce_retention() == 0 and store.min_offset == 0
    with pytest.raises(ValueError, match="max_age"):
        Retention(max_age=0)


def test_a_file_store_is_compacted_and_reopens_with_the_same_offsets(tmp_path: Path) -> None:
    clock = ManualClock()
    path = tmp_path / "t" / "store-0.log"
    store = TopicStore("t", 0, path=path, clock=clock, retention=Retention(max_bytes=5000))
    offsets = fill(store, clock, 20, 1000)
    before = path.stat().st_size
    assert store.enforce_retention() == 15
    assert path.stat().st_size < before / 3  # compacted: the dropped records are gone from the disk
    assert bodies(store) == [f"{i:04d}".encode() for i in range(15, 20)]
    store.append(0, b"0020".ljust(1000, b"."), 0)
    store.close()

    reopened = TopicStore("t", 0, path=path, clock=clock, retention=Retention(max_bytes=5000))
    assert reopened.min_offset == offsets[15]
    assert bodies(reopened) == [f"{i:04d}".encode() for i in range(15, 21)]
    assert reopened.append(0, b"0021", 0).append_offset == offsets[-1] + 2 * INDEX_ENTRY_BYTES
    reopened.close()


async def test_the_embedded_broker_applies_retention_while_serving() -> None:
    async with (
        EmbeddedCluster(
            [TopicSpec("demo", 1)],
            consumer_timeout=0.6,  # the broker's sweeper runs every 0.2 s
            retention=Retention(max_bytes=10_000),
            retention_interval=0.05,
        ) as cluster,
        ConnectionPool() as pool,
    ):
        config = ProducerConfig(heartbeat_interval=0.5)
        producer = Producer(cluster.master_addresses, pool=pool, config=config)
        await producer.start()
        try:
            await producer.register_topic("demo")
            sent = [await producer.send("demo", f"{i:04d}".encode().ljust(1000, b".")) for i in range(30)]
        finally:
            await producer.close()
        store = cluster.broker(1).store("demo", 0)

        async def trimmed() -> bool:
            return store.min_offset > 0

        await eventually(trimmed, what="retention on the running broker")
        assert store.min_offset <= sent[-1].append_offset
        assert len(store) <= 10
