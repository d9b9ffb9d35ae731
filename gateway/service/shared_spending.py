"""What each caller spent of its publish rate, shared by the workers of a replica (``serve --workers N``).

``rate_limits.publish_messages_per_second`` / ``publish_bytes_per_second`` bound each caller per replica.
Enforcing 1/N of each rate in each worker is not enough: the kernel hands a replica's workers connections,
not calls (``SO_REUSEPORT``), so a client whose connections all reach one worker (one gRPC channel is one
connection; a few fresh connections all land on one worker now and then, the more so while its siblings
still start) would be refused at 1/N of its rate: a bench client publishing 61k msg/s over 8 connections
that all reached one of two workers would be answered RESOURCE_EXHAUSTED (RATE_LIMITED, "limit of 50000
messages per second") by a replica whose limit is 100k.

So every worker holds each caller's whole buckets and takes from them what its siblings spent too: every
``interval`` seconds (:meth:`SharedSpending.exchange`) a worker writes what it spent per caller since it
started (or since it last saw the caller, ``keep`` seconds ago) to its own file in the replica's private
directory (mode 0700, made by the supervisor; written whole by rename), and reads its siblings' files,
handing back what each sibling spent since its last read. A caller on any mix of workers is held to the
replica's rate: what a worker does not know yet is what its siblings spent since their last exchange, and a
worker exchanges at once, between intervals, when a caller spent there more than ``1 / (2 N)`` of a bucket
since the last one (:meth:`~gateway.service.quotas.Quotas.charge_publish`): a fast burst on every worker at
once passes the bucket by at most about half of it, and the debt is paid back from the rate. A file names
the process that wrote it: a restarted worker's spending starts again from nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["EXCHANGE_INTERVAL", "SharedSpending"]

_PREFIX = "spent.w"

#: seconds between two exchanges of a worker with its siblings (a write is a file's create and rename, 0.5-1
#: ms on a loaded disk: ten a second cost a worker 1% of a core). Between two, what the siblings spent is
#: taken late, as debt; a burst does not wait for it (exchanges at once past a quarter of a bucket).
EXCHANGE_INTERVAL = 0.5


class SharedSpending:
    """This worker's (``worker``) spending, and its siblings' read from ``directory``; see the module
    docstring."""

    def __init__(
        self,
        directory: Path,
        worker: int,
        workers: int = 2,
        *,
        keep: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dir = directory
        self._path = directory / f"{_PREFIX}{worker}"
        self._keep = keep
        self._clock = clock
        self._pid = os.getpid()
        #: the replica's worker processes
        self.workers = workers
        #: caller -> [messages, bytes] spent here since the last exchange (the siblings do not know it yet)
        self._unshared: dict[str, list[float]] = {}
        #: caller -> [messages, bytes, when last exchanged with some spent] spent here since first seen
        self._own: dict[str, list[float]] = {}
        #: sibling file -> (its stat when read, the process that wrote it, caller -> (messages, bytes))
        self._seen: dict[str, tuple[tuple[int, int, int], int, dict[str, tuple[float, float]]]] = {}
        self._written = False

    def __repr__(self) -> str:
        return f"<SharedSpending {self._path.name} callers={len(self._own)} siblings={len(self._seen)}>"

    def spent(self, key: str, messages: int, payload_bytes: int) -> list[float]:
        """``key`` spent ``messages`` and ``payload_bytes`` here; what it spent here since the last exchange
        ([messages, bytes]: the siblings do not know of it yet)."""
        unshared = self._unshared.get(key)
        if unshared is None:
            unshared = self._unshared[key] = [messages, payload_bytes]
        else:
            unshared[0] += messages
            unshared[1] += payload_bytes
        return unshared

    def exchange(self) -> list[tuple[str, float, float]]:
        """Write this worker's spending (when it changed); (caller, messages, bytes) the siblings spent
        since the last call (files that did not change are not read again)."""
        self._write()
        return self._read()

    def _write(self) -> None:
        now = self._clock()
        own = self._own
        for key, (messages, payload_bytes) in self._unshared.items():
            mine = own.get(key)
            if mine is None:
                own[key] = [messages, payload_bytes, now]
            else:
                mine[0] += messages
                mine[1] += payload_bytes
                mine[2] = now
        changed = bool(self._unshared) or not self._written
        self._unshared.clear()
        stale = now - self._keep
        for key in [k for k, mine in own.items() if mine[2] < stale]:
            del own[key]  # forgotten here; the siblings forget it when it leaves the file
            changed = True
        if not changed:
            return
        record = {"pid": self._pid, "spent": {k: mine[:2] for k, mine in own.items()}}
        temporary = self._path.parent / f"{self._path.name}.tmp"  # this worker's own
        temporary.write_text(json.dumps(record, separators=(",", ":")), encoding="utf-8")
        os.replace(temporary, self._path)
        self._written = True

    def _read(self) -> list[tuple[str, float, float]]:
        debits: list[tuple[str, float, float]] = []
        present = set()
        with os.scandir(self._dir) as entries:
            siblings = [
                e
                for e in entries
                if e.name.startswith(_PREFIX) and not e.name.endswith(".tmp") and e.name != self._path.name
            ]
        for entry in siblings:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # gone, or half of a file
                stat = entry.stat()
                mark = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
                present.add(entry.name)
                seen = self._seen.get(entry.name)
                if seen is not None and seen[0] == mark:
                    continue  # not written again since the last read
                with open(entry.path, encoding="utf-8") as f:
                    record = json.load(f)
                pid, spent = int(record["pid"]), record["spent"]
                before = seen[2] if seen is not None and seen[1] == pid else {}  # another process: anew
                now: dict[str, tuple[float, float]] = {}
                for key, (messages, payload_bytes) in spent.items():
                    last = before.get(key, (0.0, 0.0))
                    now[key] = (messages, payload_bytes)
                    took_messages = messages - last[0] if messages >= last[0] else messages
                    took_bytes = payload_bytes - last[1] if payload_bytes >= last[1] else payload_bytes
                    if took_messages or took_bytes:
                        debits.append((key, took_messages, took_bytes))
                self._seen[entry.name] = (mark, pid, now)
        for name in [n for n in self._seen if n not in present]:
            del self._seen[name]
        return debits
