"""The replica's idempotency keys (:class:`~gateway.service.idempotency_store.StoredKeys`, SQLite) as a
:class:`~gateway.service.idempotency_store.KeyStore`: its blocking calls run on one thread of this process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from gateway.service.idempotency_store import Reservation, StoredKeys

__all__ = ["LocalKeys"]

_T = TypeVar("_T")


class LocalKeys:
    """``stored``'s calls on a thread of their own (one: SQLite serializes writers anyway)."""

    def __init__(self, stored: StoredKeys) -> None:
        self._stored = stored
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idempotency")

    def __repr__(self) -> str:
        return f"<LocalKeys {self._stored.path}>"

    async def _run(self, call: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    async def reserve(
        self, principal: str, topic: str, key: str, fingerprint: bytes, *, lease: float
    ) -> Reservation:
        return await self._run(lambda: self._stored.reserve(principal, topic, key, fingerprint, lease=lease))

    async def renew(self, principal: str, topic: str, key: str, token: bytes, *, lease: float) -> bool:
        return await self._run(lambda: self._stored.renew(principal, topic, key, token, lease=lease))

    async def record(
        self, principal: str, topic: str, key: str, token: bytes, status: int, body: bytes, *, window: float
    ) -> bool:
        stored = self._stored
        return await self._run(
            lambda: stored.record(principal, topic, key, token, status, body, window=window)
        )

    async def release(self, principal: str, topic: str, key: str, token: bytes) -> None:
        await self._run(lambda: self._stored.release(principal, topic, key, token))

    async def close(self) -> None:
        await self._run(self._stored.close)
        self._thread.shutdown(wait=True)
