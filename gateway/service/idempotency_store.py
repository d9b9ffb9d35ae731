"""The idempotency keys of one replica, in a SQLite database (WAL) its worker processes share.

Each row is one key of one principal on one topic: the fingerprint of the request that reserved it, and
either a reservation (``status`` NULL: the publish is in flight; the row expires ``lease`` seconds after it
was taken or last renewed by its holder) or the recorded answer (status and body, kept ``window`` seconds).
Every step is one ``BEGIN IMMEDIATE`` transaction, which takes the database's write lock: two processes
reserving the same key see each other, one reserves and the other finds the reservation. A reservation
names its holder by a random token; only the holder renews, records or releases it, so a holder that lost
its reservation (taken over by the next retry) cannot overwrite the answer of the one that took it.

The store is bounded: ``max_keys`` rows and ``max_principal_bytes`` per principal, ``max_bytes`` for all
rows together (the sizes of keys, fingerprints and answers; an answer is counted once recorded, so a
principal passes its bytes by at most the answers of its publishes in flight). Triggers keep the
per-principal and total usage in ``usage`` (the total under the empty principal), so a check costs one
lookup. Expired rows are removed a few at a time on every
reservation and all at once when a bound is reached.

The methods block (SQLite waits up to ``timeout`` for the write lock):
:class:`gateway.service.idempotency_local.LocalKeys` runs them on one thread of its own. This module also
holds what every store answers (:data:`Reservation`) and what a store is (:class:`KeyStore`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = [
    "Full",
    "InFlight",
    "KeyStore",
    "Mismatch",
    "Replay",
    "Reservation",
    "Reserved",
    "StoreFailed",
    "StoredKeys",
]

#: bytes a row costs besides its key, topic, principal, fingerprint and answer (an estimate of SQLite's
#: row and index overhead; what the total bound counts)
ROW_OVERHEAD = 96
#: expired rows removed on each reservation (all of them when a bound is reached)
_PURGE_STEP = 8

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries(
    principal TEXT NOT NULL, topic TEXT NOT NULL, key TEXT NOT NULL,
    fingerprint BLOB NOT NULL, token BLOB NOT NULL, status INTEGER, body BLOB,
    expires REAL NOT NULL, size INTEGER NOT NULL,
    PRIMARY KEY (principal, topic, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_expires ON entries(expires);
CREATE TABLE IF NOT EXISTS usage(
    principal TEXT PRIMARY KEY, entries INTEGER NOT NULL, bytes INTEGER NOT NULL);
INSERT OR IGNORE INTO usage VALUES ('', 0, 0);
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    INSERT OR IGNORE INTO usage VALUES (NEW.principal, 0, 0);
    UPDATE usage SET entries = entries + 1, bytes = bytes + NEW.size WHERE principal IN (NEW.principal, '');
END;
CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN
    UPDATE usage SET entries = entries - 1, bytes = bytes - OLD.size WHERE principal IN (OLD.principal, '');
    DELETE FROM usage WHERE principal = OLD.principal AND entries = 0;
END;
CREATE TRIGGER IF NOT EXISTS entries_resized AFTER UPDATE OF size ON entries BEGIN
    UPDATE usage SET bytes = bytes + NEW.size - OLD.size WHERE principal IN (NEW.principal, '');
END;
"""


class StoreFailed(Exception):
    """The store could not be read or written (the database is locked past the timeout, the disk is full
    or gone); the message says which."""


@dataclass(frozen=True, slots=True)
class Reserved:
    """The key is this request's until ``expires``: publish, then record or release with ``token``."""

    token: bytes


@dataclass(frozen=True, slots=True)
class Replay:
    """The key's first request was answered: ``status`` and ``body``, to send again."""

    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class InFlight:
    """The key's first request is still being published; its reservation ends in ``retry_after`` s."""

    retry_after: float


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The key was used for a request with another fingerprint."""


@dataclass(frozen=True, slots=True)
class Full:
    """A bound is reached: one of the principal's (``principal`` true: its ``keys`` or ``bytes``) or the
    store's bytes; ``limit`` is the bound, and a row expires in ``retry_after`` s."""

    principal: bool
    unit: str
    limit: int
    retry_after: float


Reservation = Reserved | Replay | InFlight | Mismatch | Full


class KeyStore(Protocol):
    """Where idempotency keys are kept, as :class:`gateway.service.idempotency.Idempotency` uses it: the
    replica's SQLite database (:class:`gateway.service.idempotency_local.LocalKeys`) or a Redis every replica
    shares (:class:`gateway.service.idempotency_redis.RedisKeys`). Each method raises :class:`StoreFailed`
    when the store cannot answer."""

    async def reserve(
        self, principal: str, topic: str, key: str, fingerprint: bytes, *, lease: float
    ) -> Reservation: ...

    async def renew(self, principal: str, topic: str, key: str, token: bytes, *, lease: float) -> bool: ...

    async def record(
        self, principal: str, topic: str, key: str, token: bytes, status: int, body: bytes, *, window: float
    ) -> bool: ...

    async def release(self, principal: str, topic: str, key: str, token: bytes) -> None: ...

    async def close(self) -> None: ...


class StoredKeys:
    """The database at ``path`` (created if absent); see the module docstring. Use from one thread."""

    def __init__(
        self,
        path: Path,
        *,
        max_keys: int,
        max_principal_bytes: int,
        max_bytes: int,
        timeout: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.max_keys = max_keys
        self.max_principal_bytes = max_principal_bytes
        self.max_bytes = max_bytes
        self._timeout = timeout
        self._clock = clock
        self._db: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"<StoredKeys {self.path}>"

    def _connection(self) -> sqlite3.Connection:
        db = self._db
        if db is None:
            db = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
            except BaseException:
                db.close()
                raise
            os.chmod(self.path, 0o600)
            self._db = db
        return db

    def reserve(
        self, principal: str, topic: str, key: str, fingerprint: bytes, *, lease: float
    ) -> Reservation:
        """Reserve ``key`` of ``principal`` on ``topic`` for ``lease`` seconds, or say why not."""
        try:
            return self._reserve(principal, topic, key, fingerprint, lease)
        except sqlite3.Error as exc:
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc

    def _reserve(self, principal: str, topic: str, key: str, fingerprint: bytes, lease: float) -> Reservation:
        db = self._connection()
        now = self._clock()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute(
                "SELECT fingerprint, status, body, expires FROM entries "
                "WHERE principal = ? AND topic = ? AND key = ?",
                (principal, topic, key),
            ).fetchone()
            if row is not None and row[3] > now:
                answer = _found(row, fingerprint, now)
                db.execute("COMMIT")
                return answer
            if row is not None:  # expired: the key is free again
                db.execute(
                    "DELETE FROM entries WHERE principal = ? AND topic = ? AND key = ?",
                    (principal, topic, key),
                )
            self._purge(db, now, _PURGE_STEP)
            size = ROW_OVERHEAD + len(principal.encode()) + len(topic.encode()) + len(key) + len(fingerprint)
            full = self._full(db, principal, size, now)
            if full is not None:
                self._purge(db, now, None)
                full = self._full(db, principal, size, now)
            if full is not None:
                db.execute("COMMIT")
                return full
            token = os.urandom(16)
            db.execute(
                "INSERT INTO entries VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, ?)",
                (principal, topic, key, fingerprint, token, now + lease, size),
            )
            db.execute("COMMIT")
            return Reserved(token)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _full(self, db: sqlite3.Connection, principal: str, size: int, now: float) -> Full | None:
        """The bound a new row of ``size`` bytes of ``principal`` would pass, if any."""
        usage = {
            p: (entries, used)
            for p, entries, used in db.execute(
                "SELECT principal, entries, bytes FROM usage WHERE principal IN (?, '')", (principal,)
            )
        }
        entries, used = usage.get(principal, (0, 0))
        if entries >= self.max_keys or used + size > self.max_principal_bytes:
            first = db.execute(
                "SELECT MIN(expires) FROM entries WHERE principal = ?", (principal,)
            ).fetchone()
            unit, limit = (
                ("keys", self.max_keys) if entries >= self.max_keys else ("bytes", self.max_principal_bytes)
            )
            return Full(principal=True, unit=unit, limit=limit, retry_after=_until(first[0], now))
        if usage.get("", (0, 0))[1] + size > self.max_bytes:
            first = db.execute("SELECT MIN(expires) FROM entries").fetchone()
            return Full(
                principal=False, unit="bytes", limit=self.max_bytes, retry_after=_until(first[0], now)
            )
        return None

    def record(
        self, principal: str, topic: str, key: str, token: bytes, status: int, body: bytes, *, window: float
    ) -> bool:
        """Keep the answer of the reservation ``token`` for ``window`` seconds; False if the reservation is
        no longer this holder's (it expired and the next retry took the key over)."""
        try:
            db = self._connection()
            size_row = db.execute(
                "UPDATE entries SET status = ?, body = ?, expires = ?, size = size + ? "
                "WHERE principal = ? AND topic = ? AND key = ? AND token = ? AND status IS NULL",
                (status, body, self._clock() + window, len(body), principal, topic, key, token),
            )
            return size_row.rowcount == 1
        except sqlite3.Error as exc:
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc

    def renew(self, principal: str, topic: str, key: str, token: bytes, *, lease: float) -> bool:
        """Extend the reservation ``token`` to ``lease`` seconds from now; False if it is no longer held."""
        try:
            renewed = self._connection().execute(
                "UPDATE entries SET expires = ? "
                "WHERE principal = ? AND topic = ? AND key = ? AND token = ? AND status IS NULL",
                (self._clock() + lease, principal, topic, key, token),
            )
            return renewed.rowcount == 1
        except sqlite3.Error as exc:
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc

    def release(self, principal: str, topic: str, key: str, token: bytes) -> None:
        """Give the reservation ``token`` up: the next request with the key publishes."""
        try:
            self._connection().execute(
                "DELETE FROM entries WHERE principal = ? AND topic = ? AND key = ? AND token = ? "
                "AND status IS NULL",
                (principal, topic, key, token),
            )
        except sqlite3.Error as exc:
            raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @staticmethod
    def _purge(db: sqlite3.Connection, now: float, limit: int | None) -> None:
        if limit is None:
            db.execute("DELETE FROM entries WHERE expires <= ?", (now,))
            return
        db.execute(
            "DELETE FROM entries WHERE (principal, topic, key) IN "
            "(SELECT principal, topic, key FROM entries WHERE expires <= ? LIMIT ?)",
            (now, limit),
        )


def _until(expires: float | None, now: float) -> float:
    return 1.0 if expires is None else max(1.0, expires - now)


def _found(row: tuple[bytes, int | None, bytes | None, float], fingerprint: bytes, now: float) -> Reservation:
    stored, status, body, expires = row
    if stored != fingerprint:
        return Mismatch()
    if status is None:
        return InFlight(retry_after=expires - now)
    return Replay(status, body or b"")
