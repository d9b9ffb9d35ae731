"""The file format of an embedded message store and the raw file I/O on it (for :mod:`.store`).

File layout: an 8-byte magic, then per message ``uint32 bodyLen · uint32 crc32(body) · body`` with ``body =
int32 partitionId · int64 messageId · int32 checksum · int32 flag · int32 msgTypeHash · int64 appendTimeMs ·
int32 sentAddr · data``. A compacted file starts with ``TUBEGWS2`` and two int64 (the first entry number and
its data position) instead. The functions here do blocking I/O: the store runs them in a worker thread
(:func:`in_thread`) when it serves an event loop.
"""

from __future__ import annotations

import asyncio
import os
import struct
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

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
