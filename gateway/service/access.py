"""What a principal may do: the actions the services check, and the policy interface they check them with.

The services call the :class:`AccessPolicy` they were given at the point where the resource is known (the
topic of a publish, the group and topics of a new consumer instance, the topic of a range read). The
adapters authenticate the caller and put it in a :func:`~gateway.service.principal.principal_scope`; the
policy that answers (rules from a file) lives in :mod:`gateway.security`. In open mode the policy is
:data:`ALLOW_ALL`.

Actions::

    publish           topic          publish messages to the topic
    consume           topic + group  join the group on the topic (consumer instances)
    read_ranges       topic          read exact offset ranges and partition offsets of the topic
    describe          topic          read the topic's partitions
    describe_cluster  -              see broker addresses in topic and partition views
    admin             -              metrics, API docs and the OpenAPI document
"""

from __future__ import annotations

from typing import Final, Protocol

from gateway.service.principal import Principal

__all__ = [
    "ACTIONS",
    "ADMIN",
    "ALLOW_ALL",
    "CONSUME",
    "DESCRIBE",
    "DESCRIBE_CLUSTER",
    "PUBLISH",
    "READ_RANGES",
    "AccessPolicy",
    "AllowAll",
]

PUBLISH: Final = "publish"
CONSUME: Final = "consume"
READ_RANGES: Final = "read_ranges"
DESCRIBE: Final = "describe"
DESCRIBE_CLUSTER: Final = "describe_cluster"
ADMIN: Final = "admin"
ACTIONS: Final = frozenset({PUBLISH, CONSUME, READ_RANGES, DESCRIBE, DESCRIBE_CLUSTER, ADMIN})


class AccessPolicy(Protocol):
    """Answers whether ``principal`` may do ``action`` on a topic and/or a consumer group.

    ``topic`` or ``group`` None means "any": the question is then whether some rule grants the action on
    some topic (or group) at all, which is what an adapter asks before the resource is known.
    """

    @property
    def enforcing(self) -> bool:
        """False when every principal may do everything (open mode)."""
        ...

    def allows(
        self, principal: Principal, action: str, *, topic: str | None = None, group: str | None = None
    ) -> bool: ...

    def check(
        self, principal: Principal, action: str, *, topic: str | None = None, group: str | None = None
    ) -> None:
        """Return if allowed; raise :class:`~gateway.service.errors.PermissionDenied` naming the principal,
        the action and the resource otherwise."""
        ...


class AllowAll:
    """Open mode: everything is allowed."""

    enforcing = False

    def __repr__(self) -> str:
        return "<AllowAll>"

    def allows(
        self, principal: Principal, action: str, *, topic: str | None = None, group: str | None = None
    ) -> bool:
        return True

    def check(
        self, principal: Principal, action: str, *, topic: str | None = None, group: str | None = None
    ) -> None:
        return None


ALLOW_ALL: Final = AllowAll()
