"""The shapes of the push subscriptions API in the OpenAPI document (docs/push.md, API). The routes read the
definition with the one check the subscriptions file takes (gateway/service/push_subscription.py) and answer
plain dicts; these models document them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.api.contract_types import (
    DeliveryCounts,
    Encoding,
    PushPayload,
    PushStartPosition,
    SubscriptionSource,
    SubscriptionStatus,
    SubscriptionTopics,
    TopicStreamIds,
)

__all__ = ["Subscription", "SubscriptionDefinition", "SubscriptionList", "SubscriptionState"]


class _Fields(BaseModel):
    """What a definition and an answer share."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="unique among every subscription, the file's and the API's",
    )
    group: str = Field(min_length=1, max_length=64, description="the TubeMQ consumer group delivered as")
    topics: SubscriptionTopics
    endpoint: str = Field(
        min_length=1, max_length=2048, description="the https:// (or http://) URL allowed by push.allow"
    )
    retryTopic: str = Field(description="the topic failed messages go through until they are due again")
    deadLetterTopic: str | None = Field(None, description="where a message goes after maxDeliveryAttempts")
    maxDeliveryAttempts: int | None = Field(
        None, ge=1, le=1000, description="with a deadLetterTopic; default 5"
    )
    payload: PushPayload = "wrapped"
    valueFormat: Encoding = Field("base64", description="how a wrapped payload shows the value")
    startPosition: PushStartPosition = "latest"
    ackDeadlineMs: int = Field(10_000, ge=1, description="how long a request may take")
    minBackoffMs: int = Field(
        1000, ge=0, description="the delay after the first failure, doubled per attempt"
    )
    maxBackoffMs: int = Field(60_000, ge=0, description="the longest delay between attempts")
    maxConcurrency: int = Field(
        16, ge=1, le=1000, description="requests in flight at once, per gateway process"
    )
    orderedByKey: bool = Field(False, description="post the messages of one key one after the other")
    token: bool = Field(False, description="send a JWT the gateway signs (needs push.token_key_file)")
    tokenAudience: str | None = Field(None, description="with token: the JWT's aud (default: the endpoint)")
    paused: bool = Field(False, description="defined but not delivering")


class SubscriptionDefinition(_Fields):
    """A push subscription as the API takes it (the fields of the subscriptions file; docs/push.md)."""

    secret: str | None = Field(
        None,
        pattern=r"^whsec_",
        description="a Standard Webhooks secret: whsec_ and the base64 of 24 to 64 random bytes; never "
        "answered",
    )


class SubscriptionState(BaseModel):
    """What the gateway process that answered knows of the subscription's delivery (each process of each
    replica delivers its share of the group's partitions and counts its own)."""

    status: SubscriptionStatus
    inFlight: int = Field(description="requests to the endpoint in flight now")
    deliveries: DeliveryCounts
    lastOutcome: str | None = Field(None, description="the last delivery's outcome")
    lastDeliveryAt: str | None = Field(None, description="when it ended (RFC 3339)")
    lastError: str | None = Field(None, description="why the loop cannot join the group or poll")


class Subscription(_Fields):
    """A push subscription as answered: the definition without its secret, where it is defined, its state."""

    model_config = ConfigDict(extra="forbid")

    topics: TopicStreamIds
    hasSecret: bool = Field(description="whether requests are signed (the secret itself is never shown)")
    source: SubscriptionSource
    state: SubscriptionState


class SubscriptionList(BaseModel):
    subscriptions: list[Subscription] = Field(description="those the caller may manage, by name")
