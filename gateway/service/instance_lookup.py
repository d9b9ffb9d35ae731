"""Finding a consumer instance by id: which replica or sibling worker owns it, its URL, and the local
instance for the principal calling (another principal's instance does not exist for it). A collaborator
of :class:`gateway.service.consumers.ConsumerService`."""

from __future__ import annotations

import logging

from gateway.service.consumer_types import Owner, Registry
from gateway.service.errors import Gone, NotFound
from gateway.service.instance import ConsumerInstance
from gateway.service.instance_id import MalformedInstanceId, decode_instance_id, redact
from gateway.service.peers import PeerPolicy
from gateway.service.principal import current_principal

__all__ = ["InstanceLookup"]

log = logging.getLogger("gateway.service.consumers")


class InstanceLookup:
    """Locating instances by id for the service at ``advertised_url``: ids are checked with ``secret``,
    name this replica's worker ``worker`` of ``workers`` (None: one process), and another replica only
    where ``peers`` allows forwarding to it; this process's instances are in ``registry``."""

    __slots__ = ("_registry", "_secret", "advertised_url", "peers", "worker", "workers")

    def __init__(
        self,
        registry: Registry,
        *,
        advertised_url: str,
        secret: bytes,
        peers: PeerPolicy,
        worker: int | None,
        workers: int,
    ) -> None:
        self._registry = registry
        self._secret = secret
        self.advertised_url = advertised_url
        self.peers = peers
        self.worker = worker
        self.workers = workers

    def locate(self, group: str, instance_id: str) -> Owner | None:
        """Who owns the instance when this service does not: another replica, or a sibling worker of this
        replica; None when this one does. Raises NotFound for an id that is malformed or belongs to another
        group, Gone for one naming a replica forwarding may not reach or a worker this replica does not
        have."""
        try:
            ref = decode_instance_id(group, instance_id, self._secret)
        except MalformedInstanceId as exc:
            raise _not_found(group, instance_id, str(exc)) from None
        if ref.owner_url == self.advertised_url:
            if ref.worker == self.worker:
                return None
            if ref.worker is not None and self.worker is not None and ref.worker < self.workers:
                return Owner(ref.owner_url, ref.worker)
            raise Gone(
                f"consumer instance {instance_id} was created by a worker process this gateway does not "
                f"run (it restarted with another worker count); create a new instance with "
                f"POST /v1/consumers/{group}"
            )
        if not self.peers.allows(ref.owner_url):
            log.warning(
                "a consumer instance id names a replica forwarding may not reach",
                extra={"group": group, "instance": redact(instance_id), "owner": ref.owner_url},
            )
            raise Gone(
                f"consumer instance {instance_id} is owned by the gateway at {ref.owner_url}, which "
                "this gateway may not forward to (consumers.forward_allow, consumers.forward_ports); create "
                f"a new instance with POST /v1/consumers/{group}",
                resource_name=instance_id,
            )
        return Owner(ref.owner_url, grpc_port=ref.grpc_port)

    def base_url(self, group: str, instance_id: str, public_base: str | None = None) -> str:
        """The instance's URL: under ``public_base`` (the URL clients reach the gateway at, through a
        proxy) when given, else under the owner's advertised URL."""
        if public_base is None:
            owner = self.locate(group, instance_id)
            public_base = self.advertised_url if owner is None else owner.url
        return f"{public_base}/v1/consumers/{group}/instances/{instance_id}"

    def instance(self, group: str, instance_id: str) -> ConsumerInstance:
        """The local instance; NotFound for a malformed id, Gone for one this replica does not hold."""
        elsewhere = self.locate(group, instance_id)
        if elsewhere is not None:
            where = (
                f"worker {elsewhere.worker} of this gateway"
                if elsewhere.sibling
                else f"the gateway at {elsewhere.url}"
            )
            raise Gone(
                f"consumer instance {instance_id} is owned by {where}, which cannot be "
                f"reached through this one; create a new instance with POST /v1/consumers/{group}",
                resource_name=instance_id,
            )
        caller = current_principal().identity
        found = self._registry.instances.get(instance_id)
        if found is not None and found.owner != caller:
            raise _not_found(group, instance_id, _FOREIGN)
        if found is None or found.closed:
            reason, owner = self._registry.closed.get(
                instance_id, ("deleted, expired, or its gateway restarted", caller)
            )
            if owner != caller:
                raise _not_found(group, instance_id, _FOREIGN)
            raise Gone(
                f"consumer instance {instance_id} is gone ({reason}); create a new instance with "
                f"POST /v1/consumers/{group}",
                resource_name=instance_id,
            )
        return found


#: the reason given for another principal's instance: the same kind of text as for a forged id
_FOREIGN = "the instance id is not known here"


def _not_found(group: str, instance_id: str, reason: str) -> NotFound:
    return NotFound(
        f"no consumer instance {instance_id!r} in group {group!r}: {reason}",
        field="instanceId",
        resource_name=instance_id,
    )
