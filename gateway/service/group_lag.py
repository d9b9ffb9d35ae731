"""Lag that stays true when consumers leave: the groups this gateway has served, watched in TubeMQ's offsets.

:class:`LagMonitor` learns a group when one of this process's consumers registers in it (a
``ConsumerRegistered`` event) and from then on reads the group's offsets from the brokers every
``interval`` seconds (:class:`~gateway.service.group_offsets.GroupOffsetsReader`), whether or not anyone
still consumes, and the master's count of the group's consumers. Each reading is published as a
:class:`~gateway.observability.lag_events.GroupLagRead` event (the metrics turn it into gauges); a group that
holds no offset on any broker any more is forgotten with a ``GroupLagGone``. At most ``max_groups`` groups
are watched (the least recently registered is dropped first).

A failed reading (a master or broker that does not answer) publishes nothing: the last figures stay, and
the next interval tries again; it is logged once until a reading succeeds. The groups are asked about in
parts of bounded size (:func:`~gateway.service.group_offsets.group_lists`), and a group a server refuses to
be asked about keeps its last figures alone (logged once until it reads again): the others still update.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict

from gateway.observability.lag_events import GroupLagGone, GroupLagRead, PartitionLag
from gateway.service.group_offsets import GroupOffsetsReader, OffsetsUnavailable
from gateway.tubemq.consumer import ConsumerRegistered
from gateway.tubemq.events import EventBus, Subscription

__all__ = ["LagMonitor"]

log = logging.getLogger("gateway.service.group_lag")

#: seconds ``stop`` waits for a reading in progress to end
STOP_WAIT = 5.0


class LagMonitor:
    """Watches the served groups' offsets (see the module docstring)."""

    def __init__(
        self, reader: GroupOffsetsReader, events: EventBus, *, interval: float = 15.0, max_groups: int = 1000
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self.reader = reader
        self.events = events
        self.interval = interval
        self.max_groups = max_groups
        self._groups: OrderedDict[str, None] = OrderedDict()
        self._reported: set[str] = set()
        #: watched groups whose last reading a server refused (logged once until they read again)
        self._refused: set[str] = set()
        #: the last reading of each watched group, with its wall-clock time (for overviews: GET /v1/consumers)
        self.readings: dict[str, tuple[float, GroupLagRead]] = {}
        self._subscription: Subscription | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._wake = asyncio.Event()

    def __repr__(self) -> str:
        return f"<LagMonitor groups={len(self._groups)} every {self.interval:g}s>"

    @property
    def groups(self) -> list[str]:
        return list(self._groups)

    def start(self) -> None:
        self._subscription = self.events.subscribe(self._registered, ConsumerRegistered)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="group lag monitor")

    async def stop(self) -> None:
        if self._subscription is not None:
            self._subscription.cancel()
            self._subscription = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task}, timeout=STOP_WAIT)
        await self.reader.close()

    def watch(self, group: str) -> None:
        """Watch ``group`` from now on (the first reading comes at once)."""
        new = group not in self._groups
        self._groups[group] = None
        self._groups.move_to_end(group)
        while len(self._groups) > self.max_groups:
            dropped, _ = self._groups.popitem(last=False)
            self._forget(dropped)
        if new:
            self._wake.set()

    def _registered(self, event: ConsumerRegistered) -> None:
        self.watch(event.group)

    def _forget(self, group: str) -> None:
        self.readings.pop(group, None)
        self._refused.discard(group)
        if group in self._reported:
            self._reported.discard(group)
            self.events.emit(GroupLagGone(group))

    async def _loop(self) -> None:
        while True:
            # asyncio.wait, not wait_for: on Python 3.11 a cancel arriving as wait_for's timeout fires can be
            # lost (turned into the timeout), and the loop would never end
            waking = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({waking}, timeout=self.interval)
            finally:
                waking.cancel()
            self._wake.clear()
            try:
                await self.read_once()
            except Exception:  # a reading that breaks must not end the watch of every group
                log.exception("reading the consumer groups' offsets failed; the next interval tries again")

    async def read_once(self) -> None:
        """Read every watched group's offsets now and publish the results."""
        groups = list(self._groups)
        if not groups:
            return
        try:
            offsets = await self.reader.read(groups)
            consumers = await self._consumers(groups)
        except OffsetsUnavailable as exc:
            if not self._failing:
                log.warning(
                    "cannot read the consumer groups' offsets from TubeMQ's web API; the group lag metrics "
                    "keep their last values: check tubemq.master_web_port and that the brokers' web ports "
                    "are reachable",
                    extra={"error": str(exc)},
                )
            self._failing = True
            return
        self._failing = False
        self._note_refused(offsets.failed)
        for group in groups:
            if group in offsets.failed:
                continue  # its last figures stay
            rows = offsets.found.get(group)
            if rows is None:
                if consumers[group] == 0:  # no offset anywhere and nobody consuming: gone
                    self._groups.pop(group, None)
                    self._forget(group)
                continue
            partitions = tuple(
                PartitionLag(r.topic, r.broker_id, r.partition_id, r.lag_messages, r.committed, r.max_offset)
                for r in rows
            )
            self._reported.add(group)
            reading = GroupLagRead(group, partitions, consumers[group])
            self.readings[group] = (time.time(), reading)
            self.events.emit(reading)

    def _note_refused(self, failed: dict[str, str]) -> None:
        for group, error in failed.items():
            if group in self._groups and group not in self._refused:
                log.warning(
                    "TubeMQ's web API refused to read one consumer group's offsets; its lag metrics keep "
                    "their last values while the other groups update: check the broker's log for the request",
                    extra={"group": group[:80], "error": error[:300]},
                )
        self._refused = {group for group in failed if group in self._groups}

    async def _consumers(self, groups: list[str]) -> dict[str, int]:
        """Each group's consumers from the master; -1 each when it cannot tell."""
        try:
            return await self.reader.consumer_counts(groups)
        except OffsetsUnavailable:
            return dict.fromkeys(groups, -1)
