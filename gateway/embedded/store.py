"""Message log of the embedded broker: one store per (topic, store index), TubeMQ offsets (§10.3, §10.4).

Offsets are positions in a virtual index of 28-byte entries shared by every partition of the store, so a
message's offset is ``28 * its sequence number in the store``; a read for one partition walks that index and
steps over the entries of sibling partitions and of filtered-out message types, and the caller's pending
advance covers those skipped entries too. Data positions (for the lag figure ``currDataDlt``) follow the
Java record layout (a 52-byte header before the payload) so they match a real broker byte for byte.

Storage is in memory, or an append-only file per store (layout: :mod:`gateway.embedded.store_file`). On open
every record is checked; the first short or corrupt record and everything after it is a torn tail from a
crash and is cut off. Durability: every append is written through to the operating system (``os.write``)
before it is acknowledged, so an acknowledged message survives a kill of the process; ``fsync=True`` also
forces it to the disk on every append (survives a power loss, much slower). The index and the message
headers stay in memory; payloads of a file store are read back with ``os.pread`` (by the broker in a worker
thread: :meth:`TopicStore.start_read`).

Inside a running broker the file I/O of a file store runs off the event loop: :meth:`TopicStore.append_async`
queues the record and one writer task per store hands every queued record to a worker thread as a single
write (and a single ``fsync``), then books them in queue order and answers each caller; a message is visible
to readers and acknowledged only once its write returned. Compaction takes the same lane, so it never runs
beside a write. A memory store appends at once, without a thread hop. The synchronous
:meth:`TopicStore.append` and :meth:`TopicStore.enforce_retention` (tests, tools) write on the calling thread
and refuse to run while the lane is busy.

Retention (:class:`Retention`: total payload bytes and/or age) drops the oldest messages when
:meth:`TopicStore.enforce_retention` runs (the broker calls it periodically): ``min_offset`` moves up, the
offsets of the rest do not change. A file store is compacted once what was dropped is at least as large as
what is kept: the kept records go to a new file (header ``TUBEGWS2`` with the first entry number and data
position, so offsets survive restarts) that replaces the old one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import zlib
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path

from gateway.embedded import store_file
from gateway.embedded.msgid import MessageIdGenerator
from gateway.embedded.store_file import RECORD_HEAD, in_thread
from gateway.embedded.store_records import (
    DATA_HEADER_BYTES,
    DEFAULT_READ_BYTES,
    DEFAULT_READ_ENTRIES,
    INDEX_ENTRY_BYTES,
    NO_MSG_TYPE,
    AppendResult,
    Entry,
    ReadResult,
    Retention,
    StoredMessage,
    store_path,
)

__all__ = [
    "DATA_HEADER_BYTES",
    "DEFAULT_READ_BYTES",
    "DEFAULT_READ_ENTRIES",
    "INDEX_ENTRY_BYTES",
    "NO_MSG_TYPE",
    "AppendResult",
    "PendingRead",
    "ReadResult",
    "Retention",
    "StoredMessage",
    "TopicStore",
    "store_path",
]

log = logging.getLogger(__name__)


class TopicStore:
    """The message log of one (topic, store index); in memory when ``path`` is None, else file-backed.

    Opening a file store reads the whole file once to rebuild the in-memory index (and cuts a torn tail).
    """

    def __init__(
        self,
        topic: str,
        store_index: int,
        *,
        path: Path | None = None,
        fsync: bool = False,
        ids: MessageIdGenerator | None = None,
        clock: Callable[[], float] = time.time,
        retention: Retention | None = None,
    ) -> None:
        self.topic = topic
        self.retention = retention or Retention()
        self._first = 0  # entry number of _entries[0]: entries before it were dropped by retention
        self._bytes = 0  # payload bytes of the entries kept
        self._dropped_file_bytes = 0
        self.store_index = store_index
        self.path = path
        self._fsync = fsync
        self._ids = ids if ids is not None else MessageIdGenerator(clock=clock)
        self._clock = clock
        self._entries: list[Entry] = []
        self._data_max = 0
        self._last_by_partition: dict[int, int] = {}
        self._last_by_partition_type: dict[tuple[int, int], int] = {}
        self._fd: int | None = None
        self._file_size = 0
        self._closed = False
        self._queue: list[tuple[Entry, bytes, asyncio.Future[AppendResult]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._lane = asyncio.Lock()  # held by a batch write or a compaction in flight
        if path is not None:
            self._open_file(path)

    # -- positions ---------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """Smallest readable index offset: 0 until retention dropped messages."""
        return self._first * INDEX_ENTRY_BYTES

    @property
    def max_offset(self) -> int:
        """End of the index: the offset the next appended message will get."""
        return (self._first + len(self._entries)) * INDEX_ENTRY_BYTES

    @property
    def data_max_offset(self) -> int:
        """End of the data log in Java record bytes (52-byte header + payload per message)."""
        return self._data_max

    def __len__(self) -> int:
        return len(self._entries)

    # -- writing -------------------------------------------------------------------------------------

    def append(
        self,
        partition_id: int,
        data: bytes,
        flag: int,
        msg_type_hash: int = NO_MSG_TYPE,
        sent_addr: int = 0,
        *,
        checksum: int | None = None,
    ) -> AppendResult:
        """Store one message, writing on the calling thread; ``checksum`` (CRC-32 & 0x7FFFFFFF of ``data``)
        is computed when not given.

        Raises ``OSError`` when the file write fails; the store is then unchanged.
        """
        self._check_idle()
        entry, record = self._prepare(partition_id, data, flag, msg_type_hash, sent_addr, checksum)
        if self._fd is not None:
            (entry.file_pos,) = self._write_records([record])
            entry.data = None
        return AppendResult(entry.message_id, entry.append_time_ms, self._add(entry))

    async def append_async(
        self,
        partition_id: int,
        data: bytes,
        flag: int,
        msg_type_hash: int,
        sent_addr: int,
        checksum: int | None,
    ) -> AppendResult:
        """:meth:`append` for the event loop: a file store writes in a worker thread (batched with the
        appends queued meanwhile, in order); a memory store appends at once. Returns once the message is
        written through to the operating system (and fsync'd when on); raises ``OSError`` if not."""
        if self.path is None:
            return self.append(partition_id, data, flag, msg_type_hash, sent_addr, checksum=checksum)
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        entry, record = self._prepare(partition_id, data, flag, msg_type_hash, sent_addr, checksum)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppendResult] = loop.create_future()
        self._queue.append((entry, record, future))
        if self._writer is None:
            self._writer = loop.create_task(self._drain(), name=f"{self!r} writer")
        return await future

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                async with self._lane:
                    try:
                        records = [record for _, record, _ in batch]
                        positions = await in_thread(functools.partial(self._write_records, records))
                    except OSError as exc:
                        for _, _, future in batch:
                            if not future.done():
                                future.set_exception(OSError(exc.errno, exc.strerror, exc.filename))
                        continue
                    for (entry, _, future), file_pos in zip(batch, positions, strict=True):
                        entry.file_pos, entry.data = file_pos, None
                        result = AppendResult(entry.message_id, entry.append_time_ms, self._add(entry))
                        if not future.done():  # the caller may have given up; the message is stored
                            future.set_result(result)
        finally:
            self._writer = None
            self._release()

    def _check_idle(self) -> None:
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        if self._writer is not None or self._lane.locked():
            raise RuntimeError(f"{self!r} has asynchronous writes in flight: use the async methods")

    def _prepare(
        self, pid: int, data: bytes, flag: int, type_hash: int, addr: int, checksum: int | None
    ) -> tuple[Entry, bytes]:
        crc = zlib.crc32(data) & 0x7FFFFFFF if checksum is None else checksum
        message_id = self._ids.next_id()
        append_ms = int(self._clock() * 1000)
        entry = Entry(pid, message_id, crc, flag, type_hash, append_ms, addr, 0, len(data), -1, data)
        if self.path is None:
            return entry, b""
        return entry, store_file.encode_record(pid, message_id, crc, flag, type_hash, append_ms, addr, data)

    def _add(self, entry: Entry) -> int:
        number = self._first + len(self._entries)
        entry.data_offset = self._data_max
        self._entries.append(entry)
        self._bytes += entry.data_len
        self._data_max += DATA_HEADER_BYTES + entry.data_len
        self._last_by_partition[entry.partition_id] = number
        self._last_by_partition_type[(entry.partition_id, entry.msg_type_hash)] = number
        return number * INDEX_ENTRY_BYTES

    def _write_records(self, records: list[bytes]) -> list[int]:
        """Append whole records in one write; returns where each record's data starts."""
        fd = self._fd
        if fd is None:
            raise ValueError(f"{self!r} is closed")
        positions = store_file.append_records(fd, self._file_size, records, self._fsync)
        self._file_size = positions[-1] + len(records[-1]) - RECORD_HEAD
        return positions

    # -- reading -------------------------------------------------------------------------------------

    def read(
        self,
        partition_id: int,
        from_offset: int,
        max_bytes: int = DEFAULT_READ_BYTES,
        max_entries: int = DEFAULT_READ_ENTRIES,
        filter_hashes: Collection[int] | None = None,
    ) -> ReadResult:
        """Read messages of one partition starting at index offset ``from_offset`` (rounded down to 28),
        payloads included (a file store reads them on the calling thread; see :meth:`start_read`).

        At most ``max_entries`` index entries are examined; reading stops after the message that brings the
        batch to ``max_bytes`` or more (counted in Java record bytes). With ``filter_hashes`` (non-empty) only
        messages whose msgType hash is in it are returned. When no entry of the partition (and filter) lies
        ahead, nothing is examined one by one and the whole rest of the index is the advance, as the Java
        broker's cache read does.
        """
        return self.start_read(partition_id, from_offset, max_bytes, max_entries, filter_hashes).load()

    def start_read(
        self,
        partition_id: int,
        from_offset: int,
        max_bytes: int = DEFAULT_READ_BYTES,
        max_entries: int = DEFAULT_READ_ENTRIES,
        filter_hashes: Collection[int] | None = None,
    ) -> PendingRead:
        """:meth:`read` in two steps: the messages are chosen now (the offsets of the result are final),
        their payloads read by ``load()`` or, off the event loop, ``await load_async()``."""
        start = max(from_offset - from_offset % INDEX_ENTRY_BYTES, self.min_offset)
        base = self._first
        first, end = start // INDEX_ENTRY_BYTES, base + len(self._entries)
        max_offset = self.max_offset
        if first >= end:
            return PendingRead(self, [], ReadResult((), start, start, max_offset, 0))
        hashes = frozenset(filter_hashes) if filter_hashes else None
        if not self._has_match(partition_id, first, hashes):
            return PendingRead(self, [], ReadResult((), start, max_offset, max_offset, 0))
        picked: list[tuple[int, Entry]] = []
        total = 0
        last_data_end = self._data_max
        number = first
        stop = min(end, first + max(1, max_entries))
        entries = self._entries
        while number < stop:
            entry = entries[number - base]
            number += 1
            if entry.partition_id != partition_id or (
                hashes is not None and entry.msg_type_hash not in hashes
            ):
                continue
            picked.append((number - 1, entry))
            size = DATA_HEADER_BYTES + entry.data_len
            last_data_end = entry.data_offset + size
            total += size
            if total >= max_bytes:
                break
        lag = self._data_max - last_data_end
        return PendingRead(self, picked, ReadResult((), start, number * INDEX_ENTRY_BYTES, max_offset, lag))

    def _has_match(self, partition_id: int, first: int, hashes: frozenset[int] | None) -> bool:
        if hashes is None:
            return self._last_by_partition.get(partition_id, -1) >= first
        return any(self._last_by_partition_type.get((partition_id, h), -1) >= first for h in hashes)

    def _payloads(self, picked: list[tuple[int, Entry]]) -> list[bytes]:
        """The payloads of ``picked``, a file store's read with ``os.pread`` on the calling thread."""
        return [
            entry.data if entry.data is not None else self._pread(self._fd, entry.file_pos, entry.data_len)
            for _, entry in picked
        ]

    async def _payloads_async(self, picked: list[tuple[int, Entry]]) -> list[bytes]:
        """:meth:`_payloads` with the file reads in a worker thread, all in one job. The positions and a
        duplicate of the file descriptor are taken now, on the event loop, so a compaction swapping the file
        meanwhile (it closes the old descriptor and moves the records) cannot change what is read."""
        spans = [(entry.file_pos, entry.data_len) for _, entry in picked if entry.data is None]
        if not spans:
            return self._payloads(picked)
        assert self._fd is not None
        fd = os.dup(self._fd)

        def read_all() -> list[bytes]:
            try:
                return [self._pread(fd, pos, size) for pos, size in spans]
            finally:
                os.close(fd)

        from_file = iter(await in_thread(read_all))
        return [entry.data if entry.data is not None else next(from_file) for _, entry in picked]

    def _pread(self, fd: int | None, pos: int, size: int) -> bytes:
        assert fd is not None
        data = store_file.read_at(fd, size, pos)
        if len(data) != size:
            raise OSError(f"{self.path}: short read at {pos}")
        return data

    # -- retention -----------------------------------------------------------------------------------

    def enforce_retention(self, now: float | None = None) -> int:
        """Drop the oldest messages beyond the retention (``now``: the store clock's seconds); returns how
        many were dropped. A file store is compacted (on the calling thread) when what was dropped
        outweighs what is kept."""
        self._check_idle()
        drop = self._drop_expired(now)
        if drop and self._compaction_due():
            kept = list(self._entries)
            self._swap_file(kept, *self._write_compacted(kept))
        return drop

    async def enforce_retention_async(self, now: float | None = None) -> int:
        """:meth:`enforce_retention` for the event loop: a compaction runs in a worker thread, in the
        store's write lane (appends wait for it; reads go on from the old file meanwhile)."""
        if self._closed:
            raise ValueError(f"{self!r} is closed")
        if self.path is None:
            return self._drop_expired(now)
        try:
            async with self._lane:
                drop = self._drop_expired(now)
                if drop and self._compaction_due():
                    kept = list(self._entries)
                    self._swap_file(kept, *await in_thread(functools.partial(self._write_compacted, kept)))
        finally:
            self._release()
        return drop

    def _drop_expired(self, now: float | None) -> int:
        retention = self.retention
        entries = self._entries
        if retention.unlimited or len(entries) <= 1:
            return 0
        now_ms = int((self._clock() if now is None else now) * 1000)
        drop = retention.expired(entries, self._bytes, now_ms)
        if drop:
            for entry in entries[:drop]:
                self._bytes -= entry.data_len
                if entry.file_pos >= 0:
                    self._dropped_file_bytes += RECORD_HEAD + entry.data_len
            del entries[:drop]
            self._first += drop
            log.info(
                "retention dropped messages",
                extra={"topic": self.topic, "store": self.store_index, "dropped": drop, "kept": len(entries)},
            )
        return drop

    def _compaction_due(self) -> bool:
        dropped = self._dropped_file_bytes
        return self._fd is not None and dropped >= self._file_size - dropped

    def _write_compacted(self, kept: list[Entry]) -> tuple[int, list[int], int]:
        """Write the records of ``kept`` to a new file that replaces the store's file (see
        :func:`~gateway.embedded.store_file.write_compacted`)."""
        assert self._fd is not None and self.path is not None
        first_data = kept[0].data_offset if kept else self._data_max
        spans = [(entry.file_pos, entry.data_len) for entry in kept]
        return store_file.write_compacted(self.path, self._fd, self._first, first_data, spans, self._fsync)

    def _swap_file(self, kept: list[Entry], fd: int, moved: list[int], size: int) -> None:
        old_fd, self._fd = self._fd, fd
        if old_fd is not None:
            os.close(old_fd)
        for entry, file_pos in zip(kept, moved, strict=True):
            entry.file_pos = file_pos
        self._file_size = size
        self._dropped_file_bytes = 0

    # -- file handling -------------------------------------------------------------------------------

    def _open_file(self, path: Path) -> None:
        loaded = store_file.open_log(path, self._fsync)
        self._fd, self._file_size = loaded.fd, loaded.size
        self._first, self._data_max = loaded.first, loaded.data_start
        for entry in loaded.entries:
            self._ids.observe(entry.message_id)
            self._add(entry)

    def close(self) -> None:
        """Close the file (if any); the store cannot be appended to afterwards. A write or compaction in
        flight finishes first (its thread still uses the file): :meth:`aclose` waits for that."""
        self._closed = True
        self._release()

    async def aclose(self) -> None:
        """Close, after the queued appends were written (their callers get their answers)."""
        self._closed = True
        if self._writer is not None:
            await asyncio.wait([self._writer])
        async with self._lane:
            pass
        self._release()

    def _release(self) -> None:
        # Closes the file once closed and no write or compaction can still be using it.
        if self._closed and self._fd is not None and self._writer is None and not self._lane.locked():
            os.close(self._fd)
            self._fd = None

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        return (
            f"TopicStore({self.topic!r}, store={self.store_index}, messages={len(self._entries)}, "
            f"max_offset={self.max_offset}, {where}{', closed' if self._closed else ''})"
        )


class PendingRead:
    """A read of :meth:`TopicStore.start_read`: ``result`` has the offsets and the lag, not the messages."""

    __slots__ = ("_picked", "_store", "result")

    def __init__(self, store: TopicStore, picked: list[tuple[int, Entry]], result: ReadResult) -> None:
        self._store = store
        self._picked = picked
        self.result = result

    @property
    def empty(self) -> bool:
        """No message was chosen."""
        return not self._picked

    def load(self) -> ReadResult:
        """The read with its messages, a file store's payloads read on the calling thread."""
        return self._with(self._store._payloads(self._picked))

    async def load_async(self) -> ReadResult:
        """The read with its messages; a file store's payloads are read in a worker thread (a memory
        store's are at hand: no thread hop)."""
        if not self._picked:
            return self.result
        return self._with(await self._store._payloads_async(self._picked))

    def _with(self, payloads: list[bytes]) -> ReadResult:
        messages = tuple(
            entry.message(number, data) for (number, entry), data in zip(self._picked, payloads, strict=True)
        )
        return replace(self.result, messages=messages)
