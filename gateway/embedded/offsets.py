"""Consumer-group offsets of the embedded broker: a committed offset and a pending advance (§6.7, §6.8).

Per (group, topic, partition) the broker keeps the committed index offset and the advance of the last batch
handed out, which becomes permanent only when the consumer says the batch was consumed (``lastPackConsumed``
on the next GetMessage, CommitOffset, or an unregister with ``readStatus`` 0) and is dropped otherwise
(``lastPackConsumed = false`` on CommitOffset, unregister with ``readStatus`` 1, registration timeout).
Offsets are multiples of 28; values are rounded toward zero to a whole index entry as the Java broker does.

With a ``path`` the committed offsets are kept in a small JSON file, rewritten atomically (temporary file +
``os.replace``) after a committed value changes, so a restarted broker resumes every group where it stood.
The rewrite runs in a writer thread, off the event loop, and coalesces: however many commits arrive while
one rewrite runs, the next rewrite writes them all. ``close()`` writes what is left. Pending advances are
never persisted: after a restart the last unconfirmed batch is delivered again (and a crash between a
commit and its rewrite delivers that batch again too: at-least-once either way).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from gateway.embedded.store import INDEX_ENTRY_BYTES

__all__ = ["READ_FROM_MAX", "READ_FROM_MAX_ALWAYS", "READ_NORMAL", "OffsetManager"]

READ_NORMAL = 0
READ_FROM_MAX = 1
READ_FROM_MAX_ALWAYS = 2

log = logging.getLogger(__name__)

_Key = tuple[str, str, int]
_FILE_VERSION = 1


def _whole_entries(value: int) -> int:
    """Round toward zero to a multiple of 28 (Java's ``v - v % 28``)."""
    rest = abs(value) % INDEX_ENTRY_BYTES
    return value - rest if value >= 0 else value + rest


class OffsetManager:
    """Committed offsets and pending advances of every consumer group on one broker."""

    def __init__(self, path: Path | None = None, *, fsync: bool = False) -> None:
        self.path = path
        self._fsync = fsync
        self._committed: dict[_Key, int] = {}
        self._pending: dict[_Key, int] = {}
        if path is not None and path.exists():
            self._committed = _read_file(path)
        self._lock = threading.Lock()  # guards _committed against the writer thread's snapshot
        self._wake = threading.Condition(self._lock)
        self._dirty = False
        self._closing = False
        self._writer: threading.Thread | None = None
        self.writes = 0
        """Rewrites of the offsets file so far."""

    # -- queries -------------------------------------------------------------------------------------

    def committed(self, group: str, topic: str, partition_id: int) -> int | None:
        """The committed offset, or None when the group never consumed this partition here."""
        return self._committed.get((group, topic, partition_id))

    def booked(self) -> dict[tuple[str, str, int], int]:
        """Every (group, topic, partition id) holding an offset here, with its committed offset."""
        with self._lock:
            return dict(self._committed)

    def pending(self, group: str, topic: str, partition_id: int) -> int:
        """The booked advance of the last batch (bytes of index), 0 when none."""
        return self._pending.get((group, topic, partition_id), 0)

    # -- the broker's operations ---------------------------------------------------------------------

    def load(
        self,
        group: str,
        topic: str,
        partition_id: int,
        read_status: int,
        requested: int,
        min_offset: int,
        max_offset: int,
    ) -> int:
        """Registration: settle where the group starts reading; returns that offset (§6.8).

        A group new to the partition starts at ``min_offset`` when ``read_status`` is 0, else at
        ``max_offset``. ``read_status`` 2 always jumps to ``max_offset``; otherwise a ``requested`` offset
        >= 0 replaces the stored one, clamped to ``[min_offset, max_offset]``. Any pending advance is dropped.
        """
        key = (group, topic, partition_id)
        if key not in self._committed:
            start = min_offset if read_status == READ_NORMAL else max_offset
            self._set(key, _whole_entries(start))
        self._pending.pop(key, None)
        if read_status == READ_FROM_MAX_ALWAYS:
            self._set(key, _whole_entries(max_offset))
        elif requested >= 0:
            self._set(key, _whole_entries(min(max(requested, min_offset), max_offset)))
        return self._committed[key]

    def fetch_offset(
        self,
        group: str,
        topic: str,
        partition_id: int,
        last_consumed: bool,
        min_offset: int,
        max_offset: int,
        *,
        manual: bool = False,
    ) -> int:
        """GetMessage: the offset to read from.

        With ``last_consumed`` the pending advance is committed first, else it is left for the new read to
        replace. An offset beyond ``max_offset`` (the store lost its tail) or below ``min_offset`` is reset
        to that bound and committed. The caller answers "no data" when the result is >= ``max_offset``.
        ``manual`` (``manualCommitOffset``) reads on from the committed offset plus the pending advance and
        commits nothing (except a reset to ``min_offset``); pending advances then add up until a commit.
        """
        key = (group, topic, partition_id)
        committed = self._committed.setdefault(key, 0)
        if manual:
            offset = committed + _whole_entries(self._pending.get(key, 0))
            if offset > max_offset:
                self._pending[key] = max_offset - committed
                return max_offset
        else:
            offset = self.commit(group, topic, partition_id, consumed=True) if last_consumed else committed
            if offset > max_offset:
                self._pending[key] = max_offset - offset
                return self.commit(group, topic, partition_id, consumed=True)
        if offset < min_offset:
            self._pending[key] = min_offset - offset
            offset = self.commit(group, topic, partition_id, consumed=True)
        return offset

    def book(
        self,
        group: str,
        topic: str,
        partition_id: int,
        advance: int,
        batch_empty: bool,
        *,
        manual: bool = False,
    ) -> None:
        """Record the advance of a read as pending; a read that returned nothing commits it at once.

        With ``manual`` the advance adds to the pending one and nothing is committed.
        """
        if advance == 0:
            return
        key = (group, topic, partition_id)
        if manual:
            self._pending[key] = _whole_entries(self._pending.get(key, 0)) + advance
            return
        self._pending[key] = advance
        if batch_empty:
            self.commit(group, topic, partition_id, consumed=True)

    def commit(self, group: str, topic: str, partition_id: int, consumed: bool) -> int:
        """Make the pending advance permanent (``consumed``) or drop it; returns the committed offset."""
        key = (group, topic, partition_id)
        advance = self._pending.pop(key, 0) if consumed else 0
        if not consumed:
            self._pending.pop(key, None)
        offset = self._committed.get(key, 0) + _whole_entries(advance)
        self._set(key, offset)
        return offset

    def discard(self, group: str, topic: str, partition_id: int) -> None:
        """Drop the pending advance (the consumer's registration ended without a verdict)."""
        self._pending.pop((group, topic, partition_id), None)

    def reset(
        self, group: str, topic: str, partition_id: int, offset: int, min_offset: int, max_offset: int
    ) -> int:
        """Administrative reset: drop the pending advance and set the offset, clamped; returns it."""
        key = (group, topic, partition_id)
        self._pending.pop(key, None)
        self._set(key, _whole_entries(min(max(offset, min_offset), max_offset)))
        return self._committed[key]

    # -- persistence ---------------------------------------------------------------------------------

    def _set(self, key: _Key, offset: int) -> None:
        if self._committed.get(key) == offset:
            return
        with self._lock:
            self._committed[key] = offset
            if self.path is None or self._closing:
                return
            self._dirty = True
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="offsets-writer", daemon=True)
                self._writer.start()
            self._wake.notify()

    def flush(self) -> None:
        """Write what is committed now and wait for it (also stops the writer thread; a later commit
        starts it again)."""
        with self._lock:
            writer, self._writer = self._writer, None
            self._closing = True
            self._wake.notify()
        if writer is not None:
            writer.join()
        with self._lock:
            self._closing = False
            dirty, self._dirty = self._dirty, False
            snapshot = dict(self._committed)
        if dirty:
            self._write(snapshot)

    close = flush

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._dirty and not self._closing:
                    self._wake.wait()
                if not self._dirty:
                    return
                self._dirty = False
                snapshot = dict(self._committed)
            try:
                self._write(snapshot)
            except OSError:
                log.exception("writing the offsets file failed; the next commit tries again")

    def _write(self, committed: dict[_Key, int]) -> None:
        assert self.path is not None
        self.writes += 1
        records = [
            {"group": g, "topic": t, "partition": p, "offset": o}
            for (g, t, p), o in sorted(committed.items())
        ]
        text = json.dumps({"version": _FILE_VERSION, "offsets": records}, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(self.path.name + ".tmp")
        with temp.open("w", encoding="utf-8") as file:
            file.write(text)
            if self._fsync:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temp, self.path)

    def __repr__(self) -> str:
        where = str(self.path) if self.path is not None else "memory"
        return f"OffsetManager(committed={len(self._committed)}, pending={len(self._pending)}, {where})"


def _read_file(path: Path) -> dict[_Key, int]:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != _FILE_VERSION:
            raise ValueError(f"unknown version {data.get('version')!r}")
        result: dict[_Key, int] = {}
        for record in data["offsets"]:
            key = (str(record["group"]), str(record["topic"]), int(record["partition"]))
            result[key] = int(record["offset"])
        return result
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        # Refuse rather than silently rewinding or skipping every group's consumption.
        raise ValueError(f"{path}: unreadable offsets file: {exc}") from exc
