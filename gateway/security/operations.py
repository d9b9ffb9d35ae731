"""The one table of what every REST operation and gRPC method needs.

The adapters look an operation up here before it runs: an open operation (the health probes) skips
authentication; any other needs an authenticated principal that some rule allows the operation's action
(on some resource). The services then check the action on the exact resource once they know it (the topic
of a publish, the topics and group of a new consumer) and the ownership of consumer instances.

An operation missing from the table is refused (PERMISSION_DENIED) once rules are enforced, so a new route
cannot slip past; tests enumerate the app's OpenAPI operations and the gRPC service descriptor against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.service.access import ADMIN, CONSUME, DESCRIBE, MANAGE_SUBSCRIPTIONS, PUBLISH, READ_RANGES

__all__ = ["GRPC_METHODS", "REST_OPERATIONS", "Operation", "grpc_operation", "rest_operation"]


@dataclass(frozen=True, slots=True)
class Operation:
    """``action`` None: open to anyone, without credentials. ``resource`` says where the exact resource the
    service checks comes from (documentation; ``owner`` = the consumer instance's creator only)."""

    action: str | None
    resource: str = ""

    @property
    def open(self) -> bool:
        return self.action is None


OPEN: Final = Operation(None)

_SUBSCRIPTION = "the subscription's group and each of its topics"
_DEFINING = _SUBSCRIPTION + ", and consuming it as the caller would (gateway/service/push_admin.py)"
_REPLACING = _SUBSCRIPTION + "; the new one as created"

#: FastAPI operation ids, and the paths of the routes outside the OpenAPI document (the document itself, the
#: docs pages and their assets).
REST_OPERATIONS: Final[dict[str, Operation]] = {
    "publishMessages": Operation(PUBLISH, "topic from the path"),
    "getTopic": Operation(DESCRIBE, "topic from the path; broker addresses need describe_cluster"),
    "getPartitionOffsets": Operation(READ_RANGES, "topic from the path"),
    "readRange": Operation(READ_RANGES, "topic from the path"),
    "createConsumer": Operation(CONSUME, "group from the path, every topic of the body"),
    "pollMessages": Operation(CONSUME, "owner"),
    "commitMessages": Operation(CONSUME, "owner"),
    "nackMessages": Operation(CONSUME, "owner"),
    "extendDeadlines": Operation(CONSUME, "owner"),
    "seekPartitions": Operation(CONSUME, "owner"),
    "getGroupLag": Operation(CONSUME, "group from the path; topics filtered to those allowed"),
    "streamMessages": Operation(CONSUME, "owner"),
    "describeConsumer": Operation(CONSUME, "owner"),
    "deleteConsumer": Operation(CONSUME, "owner"),
    "listTopics": Operation(DESCRIBE, "each topic listed needs describe; addresses need describe_cluster"),
    "listConsumers": Operation(CONSUME, "owner; every instance with admin"),
    "liveness": OPEN,
    "readiness": OPEN,
    # public keys, as any issuer's JWKS: receivers of push requests fetch them without credentials
    "getPushKeys": OPEN,
    "listSubscriptions": Operation(MANAGE_SUBSCRIPTIONS, "each subscription listed: its group and topics"),
    "getSubscription": Operation(MANAGE_SUBSCRIPTIONS, _SUBSCRIPTION),
    "createSubscription": Operation(MANAGE_SUBSCRIPTIONS, _DEFINING),
    "replaceSubscription": Operation(MANAGE_SUBSCRIPTIONS, _REPLACING),
    "deleteSubscription": Operation(MANAGE_SUBSCRIPTIONS, _SUBSCRIPTION),
    "pauseSubscription": Operation(MANAGE_SUBSCRIPTIONS, _SUBSCRIPTION),
    "resumeSubscription": Operation(MANAGE_SUBSCRIPTIONS, _SUBSCRIPTION),
    "metrics": Operation(ADMIN),
    "/openapi.json": Operation(ADMIN),
    "/docs": Operation(ADMIN),
    "/redoc": Operation(ADMIN),
    "/docs/assets/{name}": Operation(ADMIN),
    # The web console's static files hold no data (gateway/api/console.py): open, so that a browser, which
    # sends no credential when it opens a page, can load the sign-in page; its API calls authenticate.
    "/console": OPEN,
    "/console/assets/{name}": OPEN,
}

_GATEWAY = "/tubemq.gateway.v1.GatewayService/"

#: Full gRPC method names.
GRPC_METHODS: Final[dict[str, Operation]] = {
    _GATEWAY + "Publish": Operation(PUBLISH, "request topic"),
    _GATEWAY + "PublishStream": Operation(PUBLISH, "each request's topic"),
    _GATEWAY + "GetTopic": Operation(DESCRIBE, "request topic; broker addresses need describe_cluster"),
    _GATEWAY + "CreateConsumer": Operation(CONSUME, "request group and every topic"),
    _GATEWAY + "Poll": Operation(CONSUME, "owner"),
    _GATEWAY + "Commit": Operation(CONSUME, "owner"),
    _GATEWAY + "Nack": Operation(CONSUME, "owner"),
    _GATEWAY + "ExtendDeadlines": Operation(CONSUME, "owner"),
    _GATEWAY + "Seek": Operation(CONSUME, "owner"),
    _GATEWAY + "GetGroupLag": Operation(CONSUME, "request group; topics filtered to those allowed"),
    _GATEWAY + "DeleteConsumer": Operation(CONSUME, "owner"),
    _GATEWAY + "Subscribe": Operation(CONSUME, "owner"),
    _GATEWAY + "ListSubscriptions": Operation(MANAGE_SUBSCRIPTIONS, "each subscription listed"),
    _GATEWAY + "GetSubscription": Operation(MANAGE_SUBSCRIPTIONS, _SUBSCRIPTION),
    _GATEWAY + "CreateSubscription": Operation(MANAGE_SUBSCRIPTIONS, _DEFINING),
    _GATEWAY + "ReplaceSubscription": Operation(MANAGE_SUBSCRIPTIONS, _REPLACING),
    _GATEWAY + "DeleteSubscription": Operation(MANAGE_SUBSCRIPTIONS, _SUBSCRIPTION),
    _GATEWAY + "PauseSubscription": Operation(MANAGE_SUBSCRIPTIONS, _SUBSCRIPTION),
    _GATEWAY + "ResumeSubscription": Operation(MANAGE_SUBSCRIPTIONS, _SUBSCRIPTION),
    "/grpc.health.v1.Health/Check": OPEN,
    "/grpc.health.v1.Health/Watch": OPEN,
    "/grpc.health.v1.Health/List": OPEN,
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": Operation(ADMIN),
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": Operation(ADMIN),
}

_DENIED: Final = Operation("unlisted operation")


def rest_operation(key: str) -> Operation:
    """The REST operation's entry; one missing from the table needs an action no rule can grant."""
    return REST_OPERATIONS.get(key, _DENIED)


def grpc_operation(method: str) -> Operation:
    """The method's entry; a method missing from the table needs an action no rule can grant."""
    return GRPC_METHODS.get(method, _DENIED)
