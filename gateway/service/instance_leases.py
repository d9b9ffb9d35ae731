"""The ends of consumer instances: closing one (deleted, expired or the gateway stopping), the lease reaper
that closes idle ones and rolls back batches past the commit timeout, and the partitions core consumers give
up. A collaborator of :class:`gateway.service.consumers.ConsumerService`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.service.consumer_types import Registry
from gateway.service.instance import ConsumerInstance
from gateway.service.instance_id import redact
from gateway.service.quotas import Quotas
from gateway.tubemq.consumer import PartitionReleased

__all__ = ["Leases"]

log = logging.getLogger("gateway.service.consumers")

#: how many closed ids are remembered to say why they are gone
_REMEMBER_CLOSED = 4096


class Leases:
    """Closing the instances in ``registry``, and the reaper of idle instances and overdue batches: an
    instance not used for ``lease`` seconds (``clock``'s) is closed, checked every ``reap_interval``
    seconds; a closed instance gives its place back to ``quotas``."""

    __slots__ = ("_clock", "_quotas", "_reap_interval", "_registry", "_released", "lease")

    def __init__(
        self,
        registry: Registry,
        *,
        lease: float,
        reap_interval: float,
        clock: Callable[[], float],
        quotas: Quotas | None,
    ) -> None:
        self._registry = registry
        self.lease = lease
        self._reap_interval = reap_interval
        self._clock = clock
        self._quotas = quotas
        self._released: set[str] = set()  # client ids of core consumers that gave a partition up

    def gave_up_partitions(self, instance: ConsumerInstance) -> bool:
        """Whether the instance's core consumer gave a partition up since it joined."""
        return instance.consumer.client_id in self._released

    async def close(self, instance: ConsumerInstance, reason: str, *, commit: bool = False) -> None:
        """Close an instance (``commit``: what it delivered is committed first) and take it out of the
        registry, remembering why for a later request naming it."""
        registry = self._registry
        key = instance.instance_id
        if registry.instances.pop(key, None) is not None:
            registry.closed[key] = (reason, instance.owner)
            while len(registry.closed) > _REMEMBER_CLOSED:
                registry.closed.popitem(last=False)
            registry.closing[key] = instance
            if self._quotas is not None:
                self._quotas.release_instance(registry.quota_keys.pop(key, None))
        elif key not in registry.closing:
            return
        try:
            await instance.close(reason, commit_delivered=commit)
        except Exception:
            log.exception("closing consumer instance %s failed", redact(key))
        finally:
            # A cancelled caller leaves the close running (shielded): it stays listed until it is done.
            if instance.close_done:
                registry.closing.pop(key, None)
                registry.by_client.pop(instance.consumer.client_id, None)
                self._released.discard(instance.consumer.client_id)
        log.info("consumer instance closed", extra={"instance": redact(key), "reason": reason})

    def on_released(self, event: PartitionReleased) -> None:
        """A core consumer gave a partition up: its instance forgets what it holds of it."""
        instance = self._registry.by_client.get(event.client_id)
        if instance is not None:
            self._released.add(event.client_id)
            instance.partition_released(event.partition_key)

    async def reap_loop(self) -> None:
        """Reap every ``reap_interval`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(self._reap_interval)
            await self.reap()

    async def reap(self) -> None:
        """Close instances idle past their lease and roll back batches past the commit timeout."""
        now = self._clock()
        registry = self._registry
        for key, closing in list(registry.closing.items()):
            if closing.close_done:  # a close whose caller was cancelled has finished since
                del registry.closing[key]
                registry.by_client.pop(closing.consumer.client_id, None)
                self._released.discard(closing.consumer.client_id)
        instances = list(registry.instances.values())
        expired = [i for i in instances if i.active == 0 and now - i.last_used > self.lease]
        outcomes = await asyncio.gather(
            *(self.close(i, f"expired after {self.lease:g}s without requests") for i in expired),
            *(i.expire_uncommitted(now) for i in instances if i not in expired),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                log.warning("consumer instance upkeep failed: %r", outcome)
