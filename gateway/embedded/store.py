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
from collections.abc import Callable
from pathlib import Path

from gateway.embedded import store_file
from gateway.embedded.msgid import MessageIdGenerator
from gateway.embedded.store_file import RECORD_HEAD, in_thread
from gateway.embedded.store_reads import IndexedStore, PendingRead
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


class TopicStore(IndexedStore):
    """The message log of one (topic, store index); in memory when ``path`` is None, else file-backed.

    Opening a file store reads the whole file once to rebuild the in-memory index (and cuts a torn tail).
    The index and the reads are :class:`~gateway.embedded.store_reads.IndexedStore`'s. Message ids come
    from the store's own generator on ``id_clock`` (nanoseconds): they follow the real broker's cycle,
    not index order (:mod:`gateway.embedded.msgid`).
    """

    def __init__(
        self,
        topic: str,
        store_index: int,
        *,
        path: Path | None = None,
        fsync: bool = False,
        clock: Callable[[], float] = time.time,
        id_clock: Callable[[], int] = time.monotonic_ns,
        retention: Retention | None = None,
    ) -> None:
        super().__init__(path)
        self.topic = topic
        self.retention = retention or Retention()
        self._dropped_file_bytes = 0
        self.store_index = store_index
        self._fsync = fsync
        self._ids = MessageIdGenerator(clock=id_clock)  # one per store, as on a real broker
        self._clock = clock
        self._file_size = 0
        self._closed = False
        self._queue: list[tuple[Entry, bytes, asyncio.Future[AppendResult]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._lane = asyncio.Lock()  # held by a batch write or a compaction in flight
        if path is not None:
            self._open_file(path)

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

    def _write_records(self, records: list[bytes]) -> list[int]:
        """Append whole records in one write; returns where each record's data starts."""
        fd = self._fd
        if fd is None:
            raise ValueError(f"{self!r} is closed")
        positions = store_file.append_records(fd, self._file_size, records, self._fsync)
        self._file_size = positions[-1] + len(records[-1]) - RECORD_HEAD
        return positions

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
