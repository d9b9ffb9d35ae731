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
    manage_subscriptions topic + group  see, define, change, pause and delete push subscriptions of the
                                     group on the topic (a subscription needs it on each of its topics)
    admin             -              metrics, API docs and the OpenAPI document
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Protocol

from gateway.service.principal import Principal

__all__ = [
    "ACTIONS",
    "ADMIN",
    "ALLOW_ALL",
    "CONSUME",
    "DESCRIBE",
    "DESCRIBE_CLUSTER",
    "GROUP_ACTIONS",
    "MANAGE_SUBSCRIPTIONS",
    "PUBLISH",
    "READ_RANGES",
    "AccessPolicy",
    "AllowAll",
    "check_consuming",
]

PUBLISH: Final = "publish"
CONSUME: Final = "consume"
READ_RANGES: Final = "read_ranges"
DESCRIBE: Final = "describe"
DESCRIBE_CLUSTER: Final = "describe_cluster"
ADMIN: Final = "admin"
MANAGE_SUBSCRIPTIONS: Final = "manage_subscriptions"
ACTIONS: Final = frozenset(
    {PUBLISH, CONSUME, READ_RANGES, DESCRIBE, DESCRIBE_CLUSTER, ADMIN, MANAGE_SUBSCRIPTIONS}
)
#: the actions a rule grants only on a group as well as a topic
GROUP_ACTIONS: Final = frozenset({CONSUME, MANAGE_SUBSCRIPTIONS})


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


def check_consuming(
    policy: AccessPolicy,
    principal: Principal,
    group: str,
    topics: Iterable[str],
    retry_topic: str | None,
    dead_letter_topic: str | None,
) -> None:
    """What consuming ``topics`` as ``group`` takes, retried through ``retry_topic`` and dead-lettered to
    ``dead_letter_topic``: ``consume`` on each topic and on the retry topic, ``publish`` on the retry and
    dead-letter topics (the gateway writes there for the consumer). Raises PermissionDenied naming the
    first missing right."""
    for topic in topics:
        policy.check(principal, CONSUME, topic=topic, group=group)
    for target in (retry_topic, dead_letter_topic):
        if target is not None:
            policy.check(principal, PUBLISH, topic=target)
    if retry_topic is not None:
        policy.check(principal, CONSUME, topic=retry_topic, group=group)
