"""A worker's ledger of the TubeMQ consumer registrations it holds, so that its successor can release them.

A worker process that dies (SIGKILL, an OOM kill) cannot close its consumers: their partitions stay
registered at the brokers until they time out (35 s on a real broker), and a consumer instance created
again in the meantime is refused them. So each worker keeps, in a file of the replica's private directory
(``w<index>.consumers.json``, mode 0600, written whole and renamed into place on every change), the client
id, group and held partition keys of each of its core consumers, from the core's events. The worker started
again under the same index reads the file of its predecessor before it serves and closes those consumers
at their brokers and the master (:func:`gateway.tubemq.consumer.leftovers.release_leftovers`), so their
partitions are free again in seconds. A clean shutdown leaves an empty ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer import (
    ConsumerClosed,
    ConsumerRegistered,
    LeftoverConsumer,
    PartitionRegistered,
    PartitionReleased,
    release_leftovers,
)
from gateway.tubemq.events import EventBus, Subscription
from gateway.tubemq.net import ConnectionPool

__all__ = ["RegistrationLedger", "read_ledger", "release_predecessor"]

log = logging.getLogger("gateway.consumers")


class RegistrationLedger:
    """Follows ``events`` and keeps ``path`` up to date (module docstring)."""

    def __init__(self, path: Path, events: EventBus) -> None:
        self.path = path
        self._groups: dict[str, str] = {}
        self._partitions: dict[str, set[str]] = {}
        self._subscriptions: list[Subscription] = [
            events.subscribe(self._registered, ConsumerRegistered),
            events.subscribe(self._partition, PartitionRegistered),
            events.subscribe(self._released, PartitionReleased),
            events.subscribe(self._closed, ConsumerClosed),
        ]
        self._write()

    def close(self) -> None:
        for subscription in self._subscriptions:
            subscription.cancel()
        self._subscriptions.clear()

    def _registered(self, event: ConsumerRegistered) -> None:
        if self._groups.get(event.client_id) != event.group:
            self._groups[event.client_id] = event.group
            self._partitions.setdefault(event.client_id, set())
            self._write()

    def _partition(self, event: PartitionRegistered) -> None:
        self._groups.setdefault(event.client_id, event.group)
        held = self._partitions.setdefault(event.client_id, set())
        if event.partition_key not in held:
            held.add(event.partition_key)
            self._write()

    def _released(self, event: PartitionReleased) -> None:
        held = self._partitions.get(event.client_id)
        if held is not None and event.partition_key in held:
            held.discard(event.partition_key)
            self._write()

    def _closed(self, event: ConsumerClosed) -> None:
        if self._groups.pop(event.client_id, None) is not None:
            self._partitions.pop(event.client_id, None)
            self._write()

    def _write(self) -> None:
        entries = [
            {"clientId": cid, "group": group, "partitions": sorted(self._partitions.get(cid, ()))}
            for cid, group in sorted(self._groups.items())
        ]
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                json.dump({"consumers": entries}, out)
            os.replace(temporary, self.path)
        except OSError as exc:
            # Only the release after a crash depends on it: the registrations then expire by themselves.
            log.warning(
                "cannot write the consumer registration ledger",
                extra={"path": str(self.path), "error": str(exc)},
            )


def read_ledger(path: Path) -> list[LeftoverConsumer]:
    """The consumers a predecessor's ledger lists (none when there is no file or it cannot be read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning(
            "cannot read the consumer registration ledger", extra={"path": str(path), "error": str(exc)}
        )
        return []
    leftovers = []
    with contextlib.suppress(KeyError, TypeError, AttributeError):
        for entry in data["consumers"]:
            leftovers.append(
                LeftoverConsumer(
                    str(entry["clientId"]), str(entry["group"]), tuple(str(k) for k in entry["partitions"])
                )
            )
    return leftovers


async def release_predecessor(
    path: Path,
    pool: ConnectionPool,
    masters: Sequence[NodeAddress],
    brokers: Mapping[int, NodeAddress],
    *,
    visit_token: int,
    timeout: float = 5.0,  # noqa: ASYNC109 - bounds the whole release
) -> int:
    """Close the consumers the ledger at ``path`` lists (a dead predecessor's); the number closed. Bounded
    by ``timeout``: what is not released by then expires at the brokers by itself."""
    leftovers = read_ledger(path)
    if not leftovers:
        return 0
    started = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            outcome = await release_leftovers(
                pool, masters, brokers, leftovers, timeout=min(timeout, 3.0), visit_token=visit_token
            )
    except TimeoutError:
        log.warning(
            "releasing a dead worker's consumer registrations timed out: they expire by themselves",
            extra={"consumers": len(leftovers), "seconds": timeout},
        )
        return 0
    log.info(
        "released a dead worker's consumer registrations",
        extra={
            "consumers": len(leftovers),
            "closed": outcome.closed,
            "partitions": outcome.unregistered,
            "failed": outcome.failed,
            "seconds": round(time.monotonic() - started, 3),
        },
    )
    return outcome.closed
