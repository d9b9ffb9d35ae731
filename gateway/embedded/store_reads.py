"""The in-memory index of an embedded broker's message store, and the reads from it (§10.3, §10.4).

:class:`IndexedStore` holds a store's entries (one per message: partition, ids, flags, where its payload
is) and answers reads by offset; :class:`~gateway.embedded.store.TopicStore` builds on it with appends,
retention and the file's life. A read picks its messages now (:meth:`IndexedStore.start_read`, the offsets
final) and loads their payloads later (:class:`PendingRead`), off the event loop for a file store.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from gateway.embedded import store_file
from gateway.embedded.store_file import in_thread
from gateway.embedded.store_records import (
    DATA_HEADER_BYTES,
    DEFAULT_READ_BYTES,
    DEFAULT_READ_ENTRIES,
    INDEX_ENTRY_BYTES,
    Entry,
    ReadResult,
)

__all__ = ["IndexedStore", "PendingRead"]


class IndexedStore:
    """A store's index of entries (the first ``_first`` were dropped by retention) and its reads; a file
    store's payloads are read from ``_fd``, a memory store's are held by their entries."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._first = 0  # entry number of _entries[0]: entries before it were dropped by retention
        self._bytes = 0  # payload bytes of the entries kept
        self._entries: list[Entry] = []
        self._data_max = 0
        self._last_by_partition: dict[int, int] = {}
        self._last_by_partition_type: dict[tuple[int, int], int] = {}
        self._fd: int | None = None

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

    def _add(self, entry: Entry) -> int:
        number = self._first + len(self._entries)
        entry.data_offset = self._data_max
        self._entries.append(entry)
        self._bytes += entry.data_len
        self._data_max += DATA_HEADER_BYTES + entry.data_len
        self._last_by_partition[entry.partition_id] = number
        self._last_by_partition_type[(entry.partition_id, entry.msg_type_hash)] = number
        return number * INDEX_ENTRY_BYTES

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


class PendingRead:
    """A read of :meth:`IndexedStore.start_read`: ``result`` has the offsets and the lag, not the messages."""

    __slots__ = ("_picked", "_store", "result")

    def __init__(self, store: IndexedStore, picked: list[tuple[int, Entry]], result: ReadResult) -> None:
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
