"""File stores write and read off the event loop: writes batched in order and acknowledged only once written,
payload reads in a worker thread, unaffected by a compaction meanwhile (#11)."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from pathlib import Path

import pytest

from gateway.config import Settings
from gateway.embedded import store_file
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.msgid import id_for
from gateway.embedded.store import INDEX_ENTRY_BYTES, NO_MSG_TYPE, AppendResult, Retention, TopicStore
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import ConsumerConfig, StartPosition
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig


async def put(store: TopicStore, partition_id: int, data: bytes) -> AppendResult:
    return await store.append_async(partition_id, data, 0, NO_MSG_TYPE, 0, None)


def counting_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the file writes of every store (their sizes) while still writing."""
    sizes: list[int] = []
    real = store_file.write_all

    def write(fd: int, data: bytes) -> None:
        sizes.append(len(data))
        real(fd, data)

    monkeypatch.setattr(store_file, "write_all", write)
    return sizes


async def test_queued_appends_are_one_write_in_order_and_survive_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.log"
    nanos = itertools.count(10**15, 1000)
    store = TopicStore("demo", 0, path=path, id_clock=lambda: next(nanos))
    writes = counting_writes(monkeypatch)
    results = await asyncio.gather(*(put(store, i % 3, f"m{i:03d}".encode()) for i in range(50)))
    assert len(writes) == 1  # every append queued before the writer ran went out in one write
    assert [r.append_offset for r in results] == [i * INDEX_ENTRY_BYTES for i in range(50)]
    # Each caller got the id drawn for its own append, in call order.
    assert [r.message_id for r in results] == [id_for(10**15 + 1000 * i) for i in range(50)]
    assert store._writer is None  # the lane is idle again: the sync API works
    assert store.append(0, b"sync", 0).append_offset == 50 * INDEX_ENTRY_BYTES
    await store.aclose()
    reopened = TopicStore("demo", 0, path=path)
    read = reopened.read(1, 0, max_entries=1000, max_bytes=1 << 20)
    assert [m.data for m in read.messages] == [f"m{i:03d}".encode() for i in range(1, 50, 3)]
    assert [m.offset for m in read.messages] == [r.append_offset for r in results[1::3]]
    reopened.close()


async def test_a_failed_batch_fails_every_caller_and_leaves_the_store_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.log"
    store = TopicStore("demo", 0, path=path)
    await put(store, 0, b"kept")
    size = path.stat().st_size

    def broken(fd: int, data: bytes) -> None:
        os.write(fd, data[:5])  # a torn write, then the disk gives up
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_file, "write_all", broken)
    answers = await asyncio.gather(*(put(store, 0, b"lost") for _ in range(3)), return_exceptions=True)
    assert all(isinstance(a, OSError) for a in answers)
    assert store.max_offset == INDEX_ENTRY_BYTES and path.stat().st_size == size
    monkeypatch.undo()
    assert (await put(store, 0, b"next")).append_offset == INDEX_ENTRY_BYTES
    await store.aclose()
    reopened = TopicStore("demo", 0, path=path)
    assert [m.data for m in reopened.read(0, 0).messages] == [b"kept", b"next"]
    reopened.close()


async def test_the_sync_api_refuses_while_async_writes_are_in_flight(tmp_path: Path) -> None:
    store = TopicStore("demo", 0, path=tmp_path / "s.log", retention=Retention(max_bytes=1))
    pending = asyncio.ensure_future(put(store, 0, b"a"))
    await asyncio.sleep(0)  # the append is queued and its writer task exists
    with pytest.raises(RuntimeError, match="in flight"):
        store.append(0, b"b", 0)
    with pytest.raises(RuntimeError, match="in flight"):
        store.enforce_retention()
    assert (await pending).append_offset == 0
    await store.aclose()
    with pytest.raises(ValueError, match="closed"):
        await put(store, 0, b"c")


async def test_async_compaction_keeps_offsets_and_appends_wait_for_it(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    store = TopicStore("demo", 0, path=path, retention=Retention(max_bytes=40))
    sent = [await put(store, 0, f"{i:04d}".encode().ljust(10, b".")) for i in range(20)]
    compaction = asyncio.ensure_future(store.enforce_retention_async())
    await asyncio.sleep(0)  # the compaction holds the lane: this append is written after it
    late = await put(store, 0, b"late")
    assert await compaction == 16
    assert late.append_offset == 20 * INDEX_ENTRY_BYTES
    assert path.read_bytes().startswith(b"TUBEGWS2")
    await store.aclose()
    reopened = TopicStore("demo", 0, path=path)
    messages = reopened.read(0, 0, max_entries=100, max_bytes=1 << 20).messages
    assert [m.offset for m in messages] == [r.append_offset for r in sent[16:]] + [late.append_offset]
    assert messages[-1].data == b"late"
    reopened.close()


async def test_memory_stores_append_without_a_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    writes = counting_writes(monkeypatch)
    store = TopicStore("demo", 0)
    assert (await put(store, 0, b"x")).append_offset == 0
    assert store._writer is None and writes == []


async def test_many_concurrent_sends_to_a_file_cluster_are_all_read_back_after_a_restart(
    tmp_path: Path,
) -> None:
    topics = [TopicSpec("demo", 2, stores=2)]
    async with EmbeddedCluster(topics, data_dir=tmp_path) as cluster, ConnectionPool() as pool:
        producer = Producer(cluster.master_addresses, pool=pool, config=ProducerConfig())
        await producer.start()
        try:
            await producer.register_topic("demo")
            bodies = [f"msg-{i:04d}".encode() for i in range(400)]
            acks = await asyncio.gather(*(producer.send("demo", body) for body in bodies))
        finally:
            await producer.close()
    async with EmbeddedCluster(topics, data_dir=tmp_path) as again:
        broker = again.broker(1)
        back: dict[tuple[int, int], bytes] = {}
        for partition in topics[0].partition_ids():
            store = broker.store("demo", partition // 10000)
            messages = store.read(partition, 0, max_entries=10_000, max_bytes=1 << 30).messages
            back.update({(m.partition_id, m.offset): m.data for m in messages})
    assert len(back) == len(acks)
    for body, ack in zip(bodies, acks, strict=True):
        assert back[(ack.partition_id, ack.append_offset)] == body
    # Each store's offsets are dense: every acknowledged append took one entry.
    for store_index in range(2):
        store_acks = sorted(
            (a for a in acks if a.partition_id // 10000 == store_index), key=lambda a: a.append_offset
        )
        assert [a.append_offset for a in store_acks] == [
            i * INDEX_ENTRY_BYTES for i in range(len(store_acks))
        ]


async def test_a_slow_write_does_not_block_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    real = store_file.write_all
    armed = [True]

    def slow(fd: int, data: bytes) -> None:
        if armed[0]:
            armed[0] = False
            entered.set()
            # On the event loop this would hold everything until it gives up; in a thread it only holds
            # this store's lane until the test releases it.
            release.wait(10.0)
        real(fd, data)

    topics = [TopicSpec("slow", 1), TopicSpec("fast", 1)]
    events: list[str] = []
    async with (
        EmbeddedCluster(topics, data_dir=tmp_path) as cluster,
        ConnectionPool() as pool_a,
        ConnectionPool() as pool_b,
    ):
        config = ProducerConfig()
        slow_producer = Producer(cluster.master_addresses, pool=pool_a, config=config)
        fast_producer = Producer(cluster.master_addresses, pool=pool_b, config=config)
        await slow_producer.start()
        await fast_producer.start()
        try:
            await slow_producer.register_topic("slow")
            await fast_producer.register_topic("fast")
            monkeypatch.setattr(store_file, "write_all", slow)

            async def send_slow() -> None:
                await slow_producer.send("slow", b"slow message")
                events.append("slow acknowledged")

            pending = asyncio.ensure_future(send_slow())
            assert await asyncio.to_thread(entered.wait, 10.0)
            await fast_producer.send("fast", b"fast message")  # another connection, answered meanwhile
            events.append("fast acknowledged")
            assert not pending.done()
            release.set()
            await pending
        finally:
            release.set()
            await slow_producer.close()
            await fast_producer.close()
        assert events == ["fast acknowledged", "slow acknowledged"]
        slow_store = cluster.broker(1).store("slow", 0)
        assert [m.data for m in slow_store.read(0, 0).messages] == [b"slow message"]


async def test_the_embedded_fsync_setting_reaches_every_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    for fsync_on in (False, True):
        settings = Settings(
            embedded={"data_dir": tmp_path / str(fsync_on), "fsync": fsync_on, "topics": "demo:1"}
        )
        runtime = Runtime(settings)
        await runtime.start()
        try:
            assert runtime.producer is not None
            await runtime.producer.register_topic("demo")
            monkeypatch.setattr(os, "fsync", fsync)
            await runtime.producer.send("demo", b"to disk")
            monkeypatch.undo()
        finally:
            await runtime.stop()
        assert bool(synced) == fsync_on


def recording_reads(monkeypatch: pytest.MonkeyPatch, hold: threading.Event | None = None) -> list[str]:
    """Record the thread of every payload read of every file store; with ``hold``, the first read waits
    for it (``reads[0]`` is set once that read began)."""
    threads: list[str] = []
    real = store_file.read_at

    def read_at(fd: int, size: int, pos: int) -> bytes:
        threads.append(threading.current_thread().name)
        if hold is not None and len(threads) == 1:
            hold.wait(10.0)
        return real(fd, size, pos)

    monkeypatch.setattr(store_file, "read_at", read_at)
    return threads


async def test_a_read_runs_in_a_worker_thread_and_a_compaction_meanwhile_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TopicStore("demo", 0, path=tmp_path / "s.log", retention=Retention(max_bytes=40))
    values = [f"{i:04d}".encode().ljust(10, b".") for i in range(20)]
    for value in values:
        await put(store, 0, value)
    release = threading.Event()
    threads = recording_reads(monkeypatch, release)
    pending = store.start_read(0, 0, max_entries=100, max_bytes=1 << 20)
    reading = asyncio.ensure_future(pending.load_async())
    while not threads:  # noqa: ASYNC110 (waiting for the worker thread to begin)
        await asyncio.sleep(0.01)
    # The event loop goes on meanwhile: a compaction drops 16 messages and replaces the file, moving the
    # records the read is about to fetch and closing the descriptor it was chosen with.
    assert await store.enforce_retention_async() == 16
    assert not reading.done()
    release.set()
    result = await reading
    assert [m.data for m in result.messages] == values
    assert [m.offset for m in result.messages] == [i * INDEX_ENTRY_BYTES for i in range(20)]
    assert threading.main_thread().name not in threads
    after = store.read(0, 0, max_entries=100, max_bytes=1 << 20)
    assert [m.data for m in after.messages] == values[16:]  # read on the calling thread (the sync API)
    assert threads[-1] == threading.main_thread().name
    await store.aclose()


async def test_the_broker_reads_file_payloads_off_the_event_loop_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = recording_reads(monkeypatch)
    values = [f"message {i}".encode() for i in range(50)]
    async with (
        EmbeddedCluster([TopicSpec("demo", 1)], data_dir=tmp_path) as cluster,
        ConnectionPool() as pool,
    ):
        producer = Producer(cluster.master_addresses, pool=pool, config=ProducerConfig())
        await producer.start()
        try:
            await producer.register_topic("demo")
            for value in values:
                await producer.send("demo", value)
        finally:
            await producer.close()
        config = ConsumerConfig(start_position=StartPosition.EARLIEST, heartbeat_interval=0.5)
        consumer = Consumer(cluster.master_addresses, "g", {"demo": None}, pool=pool, config=config)
        got: list[bytes] = []
        async with consumer:
            assert await consumer.wait_for_assignment(10.0)
            async with asyncio.timeout(30):
                while len(got) < len(values):
                    batch = await consumer.poll(1.0)
                    if batch is not None:
                        got += [m.body for m in batch.messages]
                        await consumer.confirm(batch.confirm_context)
    assert got == values
    assert threads and threading.main_thread().name not in threads
