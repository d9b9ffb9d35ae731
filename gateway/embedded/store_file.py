"""The file format of an embedded message store and the raw file I/O on it (for :mod:`.store`).

File layout: an 8-byte magic, then per message ``uint32 bodyLen · uint32 crc32(body) · body`` with ``body =
int32 partitionId · int64 messageId · int32 checksum · int32 flag · int32 msgTypeHash · int64 appendTimeMs ·
int32 sentAddr · data``. A compacted file starts with ``TUBEGWS2`` and two int64 (the first entry number and
its data position) instead. The functions here do blocking I/O: the store runs them in a worker thread
(:func:`in_thread`) when it serves an event loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from gateway.embedded.store_records import Entry

# the store's logger: a torn tail cut on open is the store's news
log = logging.getLogger("gateway.embedded.store")

__all__ = [
    "BASE",
    "FRAME",
    "HEAD",
    "MAGIC",
    "MAGIC_V2",
    "MAX_BODY",
    "RECORD_HEAD",
    "append_records",
    "encode_record",
    "fsync_dir",
    "in_thread",
    "read_at",
    "write_all",
    "write_compacted",
]

MAGIC = b"TUBEGWS1"
MAGIC_V2 = b"TUBEGWS2"  # followed by the first entry number and its data position (two int64)
BASE = struct.Struct(">qq")
FRAME = struct.Struct(">II")
HEAD = struct.Struct(">iqiiiqi")
MAX_BODY = HEAD.size + 64 * 1024 * 1024
RECORD_HEAD = FRAME.size + HEAD.size  # bytes of a record before its data

_T = TypeVar("_T")


async def in_thread(func: Callable[[], _T]) -> _T:
    """Run ``func`` in a worker thread; a cancelled caller still waits for it, since the thread cannot be
    stopped and nothing may close the file under it."""
    job = asyncio.ensure_future(asyncio.to_thread(func))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        await asyncio.wait([job])
        raise


def read_at(fd: int, size: int, pos: int) -> bytes:
    """``os.pread`` (tests replace this to make a read slow or see which thread reads)."""
    return os.pread(fd, size, pos)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (tests replace this to make a write slow or fail)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """Force a directory's entries to disk: a new file's entry must get there too, or the whole file can
    vanish on power loss."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def encode_record(
    partition_id: int,
    message_id: int,
    checksum: int,
    flag: int,
    msg_type_hash: int,
    append_time_ms: int,
    sent_addr: int,
    data: bytes,
) -> bytes:
    body = (
        HEAD.pack(partition_id, message_id, checksum, flag, msg_type_hash, append_time_ms, sent_addr) + data
    )
    return FRAME.pack(len(body), zlib.crc32(body)) + body


def append_records(fd: int, start: int, records: Sequence[bytes], fsync: bool) -> list[int]:
    """Append whole records at file size ``start`` in one write (and one fsync when ``fsync``); returns
    where each record's data starts. On failure the file is cut back to ``start``, so the next write
    starts on a record boundary."""
    positions = []
    pos = start
    for record in records:
        positions.append(pos + RECORD_HEAD)
        pos += len(record)
    try:
        write_all(fd, records[0] if len(records) == 1 else b"".join(records))
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.ftruncate(fd, start)
        raise
    return positions


def write_compacted(
    path: Path,
    old_fd: int,
    first: int,
    first_data: int,
    records: Sequence[tuple[int, int]],
    fsync: bool,
) -> tuple[int, list[int], int]:
    """Copy the records at ``records`` (data position and data length in ``old_fd``) to a new v2 file
    (``first``/``first_data``: the first entry number and data position) that replaces ``path``; returns
    the new file's descriptor, where each record's data now starts, and the new file size."""
    temp = path.with_name(path.name + ".compact")
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pos = len(MAGIC_V2) + BASE.size
        write_all(fd, MAGIC_V2 + BASE.pack(first, first_data))
        moved: list[int] = []
        for file_pos, data_len in records:
            size = RECORD_HEAD + data_len
            start = file_pos - RECORD_HEAD
            record = os.pread(old_fd, size, start)
            if len(record) != size:
                raise OSError(f"{path}: short read at {start} while compacting")
            write_all(fd, record)
            moved.append(pos + RECORD_HEAD)
            pos += size
        if fsync:
            os.fsync(fd)
        os.replace(temp, path)
        if fsync:
            fsync_dir(path.parent)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return os.open(path, os.O_RDWR | os.O_APPEND), moved, pos


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """A store file opened by :func:`open_log`: its descriptor (appending), its size after any torn tail
    was cut, the entry number and Java data position its first record has, and its records in order."""

    fd: int
    size: int
    first: int
    data_start: int
    entries: list[Entry]


def open_log(path: Path, fsync: bool) -> LoadedLog:
    """Open (or create) the store file at ``path`` and read every record; the first short or corrupt
    record and everything after it is a torn tail from a crash and is cut off."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        return _load(fd, path, fsync)
    except BaseException:
        os.close(fd)
        raise


def _load(fd: int, path: Path, fsync: bool) -> LoadedLog:
    size = os.fstat(fd).st_size
    head = os.pread(fd, len(MAGIC), 0)
    first = data_start = 0
    if len(head) < len(MAGIC) and MAGIC.startswith(head):
        os.ftruncate(fd, 0)  # created but never completed: start afresh
        os.write(fd, MAGIC)
        if fsync:
            os.fsync(fd)
            fsync_dir(path.parent)
        return LoadedLog(fd, len(MAGIC), first, data_start, [])
    if head == MAGIC_V2:
        base = os.pread(fd, BASE.size, len(MAGIC_V2))
        if len(base) < BASE.size:
            raise ValueError(f"{path}: truncated header")
        first, data_start = BASE.unpack(base)
        pos = len(MAGIC_V2) + BASE.size
    elif head == MAGIC:
        pos = len(MAGIC)
    else:
        raise ValueError(f"{path} is not a message store file of this gateway")
    entries: list[Entry] = []
    with open(fd, "rb", closefd=False) as file:
        file.seek(pos)
        while pos < size:
            entry = read_record(file, pos)
            if entry is None:
                log.warning(
                    "cutting a torn tail off a store file",
                    extra={"path": str(path), "torn_bytes": size - pos, "offset": pos},
                )
                os.ftruncate(fd, pos)
                break
            entries.append(entry)
            pos = entry.file_pos + entry.data_len
    return LoadedLog(fd, pos, first, data_start, entries)


def read_record(file: BinaryIO, pos: int) -> Entry | None:
    """The record at ``pos`` (``file`` is positioned there) as an index entry (its Java data position is
    set when the store books it); None for a short or corrupt record (a torn tail)."""
    frame = file.read(FRAME.size)
    if len(frame) < FRAME.size:
        return None
    body_len, crc = FRAME.unpack(frame)
    if not HEAD.size <= body_len <= MAX_BODY:
        return None
    body = file.read(body_len)
    if len(body) < body_len or zlib.crc32(body) != crc:
        return None
    pid, mid, checksum, flag, type_hash, append_ms, sent_addr = HEAD.unpack_from(body)
    data_len = body_len - HEAD.size
    return Entry(
        pid,
        mid,
        checksum,
        flag,
        type_hash,
        append_ms,
        sent_addr,
        0,
        data_len,
        pos + RECORD_HEAD,
        None,
    )
