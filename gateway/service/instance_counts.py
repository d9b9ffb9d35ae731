"""How many consumer instances each caller holds: in this process, or across the workers of a replica.

``rate_limits.max_instances_per_principal`` bounds a caller's instances per replica. A replica of one
process counts in memory (:class:`LocalInstanceCounts`). With ``serve --workers N`` each worker holds its own
instances, so a count per process would let a caller hold N times the bound; :class:`SharedInstanceCounts`
keeps the count in the replica's private directory (mode 0700, made by the supervisor) instead: one small
file per caller and worker holding that worker's count, read and written under an exclusive ``flock`` of
one lock file, so that two workers cannot both take the last place. A claim reads the caller's files (one
per worker at most) and writes one; it runs on the event loop, the lock held for a few file operations.

A worker that starts (or is started again after it died, with its instances gone) first removes its own
files: what it counted died with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

__all__ = ["InstanceCounts", "LocalInstanceCounts", "SharedInstanceCounts"]


class InstanceCounts(Protocol):
    def claim(self, key: str, cap: int) -> bool:
        """Count one more instance for ``key`` unless it holds ``cap`` already (then False)."""
        ...

    def release(self, key: str) -> None:
        """Forget one instance of ``key``."""
        ...

    def held(self, key: str) -> int:
        """Instances ``key`` holds (in the replica)."""
        ...


class LocalInstanceCounts:
    """The counts of one process."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<LocalInstanceCounts callers={len(self._held)} instances={sum(self._held.values())}>"

    def claim(self, key: str, cap: int) -> bool:
        held = self._held.get(key, 0)
        if held >= cap:
            return False
        self._held[key] = held + 1
        return True

    def release(self, key: str) -> None:
        held = self._held.get(key, 0) - 1
        if held > 0:
            self._held[key] = held
        else:
            self._held.pop(key, None)

    def held(self, key: str) -> int:
        return self._held.get(key, 0)


class SharedInstanceCounts:
    """The counts of every worker of a replica, in ``directory`` (see the module docstring); this process is
    worker ``worker``."""

    def __init__(self, directory: Path, worker: int) -> None:
        self._dir = directory
        self._worker = worker
        self._own: dict[str, int] = {}
        directory.mkdir(mode=0o700, exist_ok=True)
        self._lock_path = directory / "counts.lock"
        with self._locked():
            for stale in directory.glob(f"*.w{worker}"):
                stale.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"<SharedInstanceCounts {self._dir} worker={self._worker} own={sum(self._own.values())}>"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @staticmethod
    def _name(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:40]

    def _total(self, name: str) -> int:
        total = 0
        for path in self._dir.glob(f"{name}.w*"):
            with contextlib.suppress(OSError, ValueError):
                total += int(path.read_text(encoding="ascii") or 0)
        return total

    def _write(self, name: str, count: int) -> None:
        path = self._dir / f"{name}.w{self._worker}"
        if count <= 0:
            path.unlink(missing_ok=True)
            return
        temporary = self._dir / f"tmp-{path.name}"
        temporary.write_text(str(count), encoding="ascii")
        temporary.replace(path)

    def claim(self, key: str, cap: int) -> bool:
        name = self._name(key)
        with self._locked():
            if self._total(name) >= cap:
                return False
            own = self._own.get(key, 0) + 1
            self._write(name, own)
        self._own[key] = own
        return True

    def release(self, key: str) -> None:
        own = self._own.get(key, 0) - 1
        if own > 0:
            self._own[key] = own
        else:
            self._own.pop(key, None)
        with self._locked():
            self._write(self._name(key), own)

    def held(self, key: str) -> int:
        with self._locked():
            return self._total(self._name(key))
