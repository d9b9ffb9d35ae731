"""What a topic store of the embedded broker holds and answers: index and record sizes, the stored message,
append and read results, the in-memory index entry, and the retention rule (§10.3, §10.4).

The store itself (appends, reads, the write lane, compaction) is :mod:`gateway.embedded.store`; the file
layout is :mod:`gateway.embedded.store_file`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

INDEX_ENTRY_BYTES = 28
DATA_HEADER_BYTES = 52
DEFAULT_READ_BYTES = 512 * 1024
DEFAULT_READ_ENTRIES = 1000
NO_MSG_TYPE = -1


def store_path(data_dir: Path, topic: str, store_index: int) -> Path:
    """Where the file of one topic store lives: ``data_dir/<topic>/store-<n>.log``."""
    return data_dir / topic / f"store-{store_index}.log"


@dataclass(frozen=True, slots=True)
class Retention:
    """How much a store keeps: at most ``max_bytes`` of payload and messages at most ``max_age`` seconds
    old (None: no limit). The newest message is always kept."""

    max_bytes: int | None = None
    max_age: float | None = None

    def __post_init__(self) -> None:
        if self.max_bytes is not None and self.max_bytes < 0:
            raise ValueError(f"retention max_bytes must be >= 0, got {self.max_bytes}")
        if self.max_age is not None and self.max_age <= 0:
            raise ValueError(f"retention max_age must be > 0 seconds, got {self.max_age}")

    @property
    def unlimited(self) -> bool:
        return self.max_bytes is None and self.max_age is None

    def expired(self, entries: Sequence[Entry], kept_bytes: int, now_ms: int) -> int:
        """How many of the oldest ``entries`` (``kept_bytes`` of payload in all) this retention drops at
        ``now_ms``; never the newest."""
        max_bytes, max_age = self.max_bytes, self.max_age
        oldest_ms = now_ms - int(max_age * 1000) if max_age is not None else None
        drop = 0
        while drop < len(entries) - 1:
            entry = entries[drop]
            too_big = max_bytes is not None and kept_bytes > max_bytes
            too_old = oldest_ms is not None and entry.append_time_ms < oldest_ms
            if not (too_big or too_old):
                break
            kept_bytes -= entry.data_len
            drop += 1
        return drop


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message as the broker stored it; ``offset`` is its index offset (a multiple of 28)."""

    offset: int
    message_id: int
    partition_id: int
    checksum: int
    flag: int
    data: bytes
    msg_type_hash: int
    append_time_ms: int
    sent_addr: int


class AppendResult(NamedTuple):
    message_id: int
    append_time_ms: int
    append_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Outcome of one read.

    ``next_offset`` is the index position after the last entry examined (entries of other partitions and
    filtered-out entries included); ``next_offset - start_offset`` is the pending advance the broker books.
    ``lag_bytes`` is the data still behind the last returned message (0 when none was returned), i.e.
    ``currDataDlt``.
    """

    messages: tuple[StoredMessage, ...]
    start_offset: int
    next_offset: int
    max_offset: int
    lag_bytes: int

    @property
    def advance(self) -> int:
        return self.next_offset - self.start_offset


@dataclass(slots=True)
class Entry:
    """One message in a store's in-memory index; ``data`` is None when the payload is in the file at
    ``file_pos`` (-1: not in a file)."""

    partition_id: int
    message_id: int
    checksum: int
    flag: int
    msg_type_hash: int
    append_time_ms: int
    sent_addr: int
    data_offset: int
    data_len: int
    file_pos: int
    data: bytes | None

    def message(self, number: int, data: bytes) -> StoredMessage:
        """This entry as the ``number``-th message of its store, with its payload ``data``."""
        return StoredMessage(
            number * INDEX_ENTRY_BYTES,
            self.message_id,
            self.partition_id,
            self.checksum,
            self.flag,
            data,
            self.msg_type_hash,
            self.append_time_ms,
            self.sent_addr,
        )
