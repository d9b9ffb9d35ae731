"""The named types of the REST contract: every enum, map and union a field of ``openapi.yaml`` uses.

Each is a ``TypeAliasType``, so pydantic validates it as the plain type it stands for (a ``Literal`` stays a
``str``, a map a ``dict``) and the OpenAPI document gets it once, as a named schema under
``components/schemas`` that fields reference. Code generators name their types after these (``Encoding``,
``StartPosition``, ``Attributes``) instead of after the field that first used an inline schema
(``CreateConsumerRequestStartposition``, ``MessageInAttributesType0``).
``tests/api/test_openapi_generators.py`` checks that the contract has no inline enum, map or union left, and
``tests/docs/test_clients.py`` (``test_generated_python_client_names_every_model_after_a_schema_and_runs``)
generates a Python client and checks that no model is named after a position.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypeAliasType

__all__ = [
    "Attributes",
    "BrokerState",
    "DeliveryCounts",
    "Encoding",
    "MessageValue",
    "PushPayload",
    "PushStartPosition",
    "ReadinessChecks",
    "SeekPosition",
    "SeekTime",
    "ShieldReason",
    "StartOffsets",
    "StartPosition",
    "StreamFilters",
    "SubscriptionSource",
    "SubscriptionStatus",
    "SubscriptionTopics",
    "TopicStreamIds",
]

Encoding = TypeAliasType(
    "Encoding",
    Annotated[
        Literal["utf8", "base64", "json"],
        Field(
            description="how a message value is written in JSON: utf8 (text), base64 (text holding any "
            "bytes), json (the value is the JSON it holds)"
        ),
    ],
)

StartPosition = TypeAliasType(
    "StartPosition",
    Annotated[
        Literal["latest", "earliest", "offsets"],
        Field(
            description="where a group without a stored offset starts: latest (end), earliest (oldest "
            "message), or offsets (bound consumption: start the partitions in `offsets` exactly there)"
        ),
    ],
)

SeekPosition = TypeAliasType(
    "SeekPosition",
    Annotated[
        Literal["latest", "earliest", "offsets", "time"],
        Field(
            description="where a seek moves partitions: latest (end), earliest (oldest message kept), "
            "offsets (each partition to its offset in `offsets`), or time (to the first message whose "
            "msgTime is at or after `time`'s minute)"
        ),
    ],
)

SeekTime = TypeAliasType(
    "SeekTime",
    Annotated[
        int | str,
        Field(
            description="Unix time in milliseconds, or RFC 3339 text with its UTC offset "
            "(2026-11-27T01:30:00Z, 2026-11-27T09:30:00+08:00)"
        ),
    ],
)

Attributes = TypeAliasType(
    "Attributes",
    Annotated[
        dict[str, str],
        Field(description="a message's string attributes by name (',' and '=' are reserved in both)"),
    ],
)

StreamFilters = TypeAliasType(
    "StreamFilters",
    Annotated[
        dict[str, list[str]],
        Field(
            description="per topic, the stream ids ($msgType$) to deliver; a topic not listed gets every "
            "message"
        ),
    ],
)

StartOffsets = TypeAliasType(
    "StartOffsets",
    Annotated[
        dict[str, int],
        Field(description="partitionKey (brokerId:topic:partitionId) -> broker index offset"),
    ],
)

#: any JSON value: a union of every JSON type, which generators type as their "any" (TypeScript
#: ``unknown``, Python ``Any``, Java ``Object``/``JsonNode``) instead of a union of inline types
MessageValue = TypeAliasType(
    "MessageValue",
    Annotated[
        object,
        Field(
            description="a message value, any JSON value: text for utf8, base64 text for base64, any JSON "
            "(object, array, string, number, boolean, null) for json"
        ),
    ],
)

ReadinessChecks = TypeAliasType(
    "ReadinessChecks",
    Annotated[
        dict[str, object],
        Field(
            description="what readiness rests on: draining, auth, masterSession, masterFailures, "
            "usableRoutes, usableBrokers"
        ),
    ],
)

BrokerState = TypeAliasType(
    "BrokerState",
    Annotated[
        Literal["closed", "open", "half_open"],
        Field(description="closed: in use; open: shielded (no sends); half_open: on trial after a shielding"),
    ],
)

ShieldReason = TypeAliasType(
    "ShieldReason",
    Annotated[
        Literal["unavailable", "quality", "failures"],
        Field(
            description="why a broker was shielded: unavailable, its send quality, or consecutive failures"
        ),
    ],
)

LagSource = TypeAliasType(
    "LagSource",
    Annotated[
        Literal["tubemq", "gateway"],
        Field(
            description="tubemq: the brokers' committed offsets; gateway: no broker holds an offset of the "
            "group yet (the broker writes them every few seconds after a group's first commit), so these are "
            "the read positions of this gateway's instances of the group (none when they are on another "
            "worker or replica)"
        ),
    ],
)

PushPayload = TypeAliasType(
    "PushPayload",
    Annotated[
        Literal["wrapped", "unwrapped"],
        Field(
            description="wrapped: the message as the poll answer's JSON; unwrapped: the value as the body, "
            "the rest as tubemq-* headers"
        ),
    ],
)

PushStartPosition = TypeAliasType(
    "PushStartPosition",
    Annotated[
        Literal["latest", "earliest"],
        Field(description="where a subscription's group without a committed offset starts"),
    ],
)

TopicStreamIds = TypeAliasType(
    "TopicStreamIds",
    Annotated[
        dict[str, list[str]],
        Field(description="topic -> the stream ids ($msgType$) delivered of it (empty: every message)"),
    ],
)

SubscriptionTopics = TypeAliasType(
    "SubscriptionTopics",
    Annotated[
        list[str] | TopicStreamIds,
        Field(description="topic names, or topic -> stream id filters (empty: every message)"),
    ],
)

SubscriptionSource = TypeAliasType(
    "SubscriptionSource",
    Annotated[
        Literal["file", "api"],
        Field(description="file: push.subscriptions_file (read-only through the API); api: made through it"),
    ],
)

SubscriptionStatus = TypeAliasType(
    "SubscriptionStatus",
    Annotated[
        Literal["running", "paused", "failing", "starting"],
        Field(description="failing: the last delivery was not acknowledged, or the loop cannot join or poll"),
    ],
)

DeliveryCounts = TypeAliasType(
    "DeliveryCounts",
    Annotated[
        dict[str, int],
        Field(description="deliveries by outcome: acked, rejected, timeout, connect, refused, error"),
    ],
)
