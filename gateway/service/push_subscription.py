"""Push subscriptions: what the operator defines (a group, its topics, an endpoint and how to deliver to it)
and the one check of a definition, shared by the subscriptions file and the API.

A definition is a JSON object in the API's spelling (camelCase); :func:`parse_subscription` turns it into a
:class:`PushSubscription` or raises InvalidInput naming the field (``subscriptions[2].endpoint`` in a file).
Limits that depend on the gateway (the longest ack deadline and nack delay, which endpoints are allowed)
come in :class:`SubscriptionBounds`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from gateway.service.errors import InvalidInput
from gateway.service.names import check_text, validate_group, validate_topic
from gateway.service.redelivery_checks import MAX_DELIVERY_ATTEMPTS
from gateway.tubemq.consumer import MAX_FILTER_ITEM_LENGTH

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_SUBSCRIPTION_NAME",
    "SECRET_PREFIX",
    "SETTLE_MARGIN",
    "SUBSCRIPTION_FIELDS",
    "PayloadForm",
    "PushSubscription",
    "SubscriptionBounds",
    "load_subscriptions",
    "longest_request",
    "message_hold",
    "parse_subscription",
]

PayloadForm = Literal["wrapped", "unwrapped"]
#: the longest subscription name (it goes into metric labels, logs and URLs)
MAX_SUBSCRIPTION_NAME = 64
#: the most deliveries of one subscription in flight at once, per replica process
MAX_CONCURRENCY = 1000
#: the prefix of a Standard Webhooks secret (base64 of 24 to 64 random bytes follows)
SECRET_PREFIX = "whsec_"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: the fields of a definition (the chart's values.schema.json lists the same: tests/deploy/test_helm_push.py)
SUBSCRIPTION_FIELDS = frozenset(
    {
        "name",
        "group",
        "topics",
        "endpoint",
        "payload",
        "valueFormat",
        "startPosition",
        "ackDeadlineMs",
        "minBackoffMs",
        "maxBackoffMs",
        "maxDeliveryAttempts",
        "retryTopic",
        "deadLetterTopic",
        "maxConcurrency",
        "orderedByKey",
        "secret",
        "token",
        "tokenAudience",
        "paused",
    }
)


#: seconds a delivered message stays held past its request's ``ackDeadlineMs`` (at least; see
#: :func:`message_hold`): the answer's settling (a commit, or a nack publishing to the retry topic) fits in
#: it, so the instance never hands a message out again while its first request is still running or settling
SETTLE_MARGIN = 5.0


def message_hold(ack_deadline: float, max_hold: float) -> float:
    """How long the instance holds a message out for one delivery (seconds): the request and its settling,
    within the consumer service's longest deadline ``max_hold``. With ``ack_deadline`` at most
    :func:`longest_request` of ``max_hold``, it exceeds the request by ``min(SETTLE_MARGIN, max_hold / 2)``
    at least."""
    return min(max_hold, 2 * ack_deadline + SETTLE_MARGIN)


def longest_request(max_hold: float) -> float:
    """The longest ``ackDeadlineMs`` (seconds) that leaves a message's hold a margin over its request."""
    return max_hold - min(SETTLE_MARGIN, max_hold / 2)


@dataclass(frozen=True, slots=True)
class SubscriptionBounds:
    """What the gateway allows a definition: the longest ack deadline and backoff (seconds; the consumer
    service's ``max_ack_deadline`` and ``max_nack_delay``) and the endpoint check (raises InvalidInput
    naming ``endpoint``; :class:`gateway.service.push_outbound.EndpointPolicy.check_url`)."""

    max_ack_deadline: float = 600.0
    max_backoff: float = 600.0
    check_endpoint: Callable[[str], None] = lambda url: None
    #: whether the gateway has a key to sign push tokens with (``push.token_key_file``)
    can_sign: bool = False


@dataclass(frozen=True, slots=True)
class PushSubscription:
    """One push subscription (times in seconds). Two definitions are equal when every field is; the secret
    never shows in ``repr`` (nor in logs)."""

    name: str
    group: str
    #: topic -> stream id filter (empty: every message)
    topics: Mapping[str, tuple[str, ...]]
    endpoint: str
    retry_topic: str
    payload: PayloadForm = "wrapped"
    #: how a wrapped payload shows the value: base64, utf8 or json (as a poll's ``format``)
    value_format: str = "base64"
    start_position: Literal["latest", "earliest"] = "latest"
    ack_deadline: float = 10.0
    min_backoff: float = 1.0
    max_backoff: float = 60.0
    max_delivery_attempts: int | None = None
    dead_letter_topic: str | None = None
    max_concurrency: int = 16
    ordered_by_key: bool = False
    secret: bytes = field(default=b"", repr=False)
    #: the ``aud`` of the JWT each request carries (None: no token)
    token_audience: str | None = None
    paused: bool = False

    def backoff(self, attempt: int) -> float:
        """The delay before the delivery after failed attempt ``attempt`` (1 = the first delivery): the
        minimum backoff doubled per attempt, at most the maximum."""
        return min(self.max_backoff, self.min_backoff * 2.0 ** min(max(attempt - 1, 0), 62))

    def to_dict(self) -> dict[str, Any]:
        """The definition in the API's spelling without the secret (``hasSecret`` says whether it has one)."""
        out: dict[str, Any] = {
            "name": self.name,
            "group": self.group,
            "topics": {t: list(f) for t, f in self.topics.items()},
            "endpoint": self.endpoint,
            "payload": self.payload,
            "valueFormat": self.value_format,
            "startPosition": self.start_position,
            "ackDeadlineMs": round(self.ack_deadline * 1000),
            "minBackoffMs": round(self.min_backoff * 1000),
            "maxBackoffMs": round(self.max_backoff * 1000),
            "retryTopic": self.retry_topic,
            "maxConcurrency": self.max_concurrency,
            "orderedByKey": self.ordered_by_key,
            "hasSecret": bool(self.secret),
            "token": self.token_audience is not None,
            "paused": self.paused,
        }
        if self.token_audience is not None:
            out["tokenAudience"] = self.token_audience
        if self.dead_letter_topic is not None:
            out["deadLetterTopic"] = self.dead_letter_topic
            out["maxDeliveryAttempts"] = self.max_delivery_attempts
        return out


def parse_subscription(
    data: object, bounds: SubscriptionBounds = SubscriptionBounds(), prefix: str = ""
) -> PushSubscription:
    """Check one definition; InvalidInput naming the field (``prefix`` + its name) when it is wrong."""
    if not isinstance(data, Mapping):
        raise InvalidInput("a subscription is a JSON object", field=prefix.rstrip(".") or None)
    unknown = sorted(str(k) for k in data if k not in SUBSCRIPTION_FIELDS)
    if unknown:
        raise InvalidInput(
            f"unknown subscription fields {unknown[:5]}: the fields are {sorted(SUBSCRIPTION_FIELDS)}",
            field=prefix + unknown[0],
        )
    p = prefix
    name = _name(data.get("name"), p + "name")
    group = validate_group(data.get("group"), p + "group")
    if len(group) > MAX_FILTER_ITEM_LENGTH:
        raise InvalidInput(
            f"a push subscription's group has at most {MAX_FILTER_ITEM_LENGTH} characters (its retried "
            "messages carry it as their stream id)",
            field=p + "group",
        )
    topics = _topics(data.get("topics"), p + "topics")
    endpoint = data.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise InvalidInput("endpoint is the URL to deliver to (https://host/path)", field=p + "endpoint")
    _check_url_shape(endpoint, p + "endpoint")
    try:
        bounds.check_endpoint(endpoint)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, field=p + "endpoint") from None
    payload = _choice(data.get("payload", "wrapped"), ("wrapped", "unwrapped"), p + "payload")
    value_format = _choice(data.get("valueFormat", "base64"), ("base64", "utf8", "json"), p + "valueFormat")
    start = _choice(data.get("startPosition", "latest"), ("latest", "earliest"), p + "startPosition")
    longest = longest_request(bounds.max_ack_deadline)
    ack_deadline = _ms(data.get("ackDeadlineMs", 10_000), p + "ackDeadlineMs", longest)
    min_backoff = _ms(data.get("minBackoffMs", 1000), p + "minBackoffMs", bounds.max_backoff, zero=True)
    max_backoff = _ms(data.get("maxBackoffMs", 60_000), p + "maxBackoffMs", bounds.max_backoff, zero=True)
    if max_backoff < min_backoff:
        raise InvalidInput("maxBackoffMs must not be below minBackoffMs", field=p + "maxBackoffMs")
    retry = validate_topic(data.get("retryTopic"), p + "retryTopic")
    if retry in topics:
        raise InvalidInput("retryTopic must not be one of the subscribed topics", field=p + "retryTopic")
    dead: str | None = None
    attempts: int | None = None
    if data.get("deadLetterTopic") is not None:
        dead = validate_topic(data["deadLetterTopic"], p + "deadLetterTopic")
        if dead in topics or dead == retry:
            raise InvalidInput(
                "deadLetterTopic must differ from the subscribed topics and the retry topic",
                field=p + "deadLetterTopic",
            )
        attempts = _int(
            data.get("maxDeliveryAttempts", 5), p + "maxDeliveryAttempts", 1, MAX_DELIVERY_ATTEMPTS
        )
    elif data.get("maxDeliveryAttempts") is not None:
        raise InvalidInput("maxDeliveryAttempts needs a deadLetterTopic", field=p + "deadLetterTopic")
    concurrency = _int(data.get("maxConcurrency", 16), p + "maxConcurrency", 1, MAX_CONCURRENCY)
    audience = _audience(data, endpoint, bounds.can_sign, p)
    return PushSubscription(
        name=name,
        group=group,
        topics=topics,
        endpoint=endpoint,
        retry_topic=retry,
        payload=payload,  # type: ignore[arg-type]
        value_format=value_format,
        start_position=start,  # type: ignore[arg-type]
        ack_deadline=ack_deadline,
        min_backoff=min_backoff,
        max_backoff=max_backoff,
        max_delivery_attempts=attempts,
        dead_letter_topic=dead,
        max_concurrency=concurrency,
        ordered_by_key=_bool(data.get("orderedByKey", False), p + "orderedByKey"),
        secret=_secret(data.get("secret"), p + "secret"),
        token_audience=audience,
        paused=_bool(data.get("paused", False), p + "paused"),
    )


def load_subscriptions(path: Path, bounds: SubscriptionBounds, limit: int) -> list[PushSubscription]:
    """The definitions of a subscriptions file: ``{"subscriptions": [...]}``. ValueError saying what is wrong
    (the field by its path in the file); names and groups must be unique and there may be at most
    ``limit``."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read push subscriptions: {exc}") from None
    items = document.get("subscriptions") if isinstance(document, dict) else None
    if not isinstance(items, list):
        raise ValueError(f'{path}: expected {{"subscriptions": [...]}}, a list of subscription objects')
    if len(items) > limit:
        raise ValueError(f"{path}: {len(items)} subscriptions, more than push.max_subscriptions ({limit})")
    found: list[PushSubscription] = []
    names: set[str] = set()
    groups: set[str] = set()
    for index, item in enumerate(items):
        try:
            subscription = parse_subscription(item, bounds, f"subscriptions[{index}].")
        except InvalidInput as exc:
            raise ValueError(f"{path}: {exc.field}: {exc.message}") from None
        if subscription.name in names:
            raise ValueError(f"{path}: subscriptions[{index}].name: {subscription.name!r} is defined twice")
        if subscription.group in groups:
            raise ValueError(
                f"{path}: subscriptions[{index}].group: {subscription.group!r} belongs to another "
                "subscription (the two would share its messages): give each subscription its own group"
            )
        names.add(subscription.name)
        groups.add(subscription.group)
        found.append(subscription)
    return found


def _name(value: object, field: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_SUBSCRIPTION_NAME or not _NAME.fullmatch(value):
        raise InvalidInput(
            f"name must be 1-{MAX_SUBSCRIPTION_NAME} letters, digits, '_', '.' or '-', starting with a "
            "letter or digit",
            field=field,
        )
    return value


def _topics(value: object, field: str) -> dict[str, tuple[str, ...]]:
    """``["t1", "t2"]`` or ``{"t1": ["streamId", ...], "t2": []}``."""
    if isinstance(value, list):
        value = {topic: [] for topic in value} if all(isinstance(t, str) for t in value) else None
    if not isinstance(value, Mapping) or not value:
        raise InvalidInput(
            'topics is a list of topic names or an object of topic -> stream id filters ({"t": ["s1"]})',
            field=field,
        )
    if len(value) > 64:
        raise InvalidInput("at most 64 topics per subscription", field=field)
    out: dict[str, tuple[str, ...]] = {}
    for topic, filters in value.items():
        validate_topic(topic, field)
        if filters is None:
            filters = []
        if not isinstance(filters, list) or len(filters) > 300:
            raise InvalidInput(f"the stream id filters of {topic!r} are a list of at most 300", field=field)
        for item in filters:
            check_text(item, f"{field}.{topic}", MAX_FILTER_ITEM_LENGTH)
        out[topic] = tuple(dict.fromkeys(filters))
    return out


def _check_url_shape(url: str, field: str) -> None:
    """An absolute http(s) URL with a host, no credentials and no fragment, at most 2048 characters."""
    if len(url) > 2048 or not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        raise InvalidInput("endpoint must be an ASCII URL of at most 2048 characters", field=field)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"endpoint is not a valid URL: {exc}", field=field) from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise InvalidInput("endpoint must be an https:// (or http://) URL with a host", field=field)
    if parts.username is not None or parts.password is not None or parts.fragment:
        raise InvalidInput("endpoint must carry no user:password@ and no #fragment", field=field)
    if port == 0:
        raise InvalidInput("endpoint's port must be 1-65535", field=field)


def _choice(value: object, allowed: tuple[str, ...], field: str) -> str:
    if value not in allowed:
        raise InvalidInput(f"{field.rsplit('.', 1)[-1]} must be one of {list(allowed)}", field=field)
    return str(value)


def _int(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{field.rsplit('.', 1)[-1]} must be an integer {low} to {high}", field=field)
    return value


def _ms(value: object, field: str, high: float, *, zero: bool = False) -> float:
    """Milliseconds (an integer) to seconds: 1 (0 with ``zero``) to ``high`` seconds."""
    low = 0 if zero else 1
    return _int(value, field, low, round(high * 1000)) / 1000


def _bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{field.rsplit('.', 1)[-1]} must be true or false", field=field)
    return value


def _audience(data: Mapping[str, Any], endpoint: str, can_sign: bool, p: str) -> str | None:
    """The token's audience: ``tokenAudience``, else the endpoint, with ``token`` true; None without."""
    wanted = _bool(data.get("token", False), p + "token")
    audience = data.get("tokenAudience")
    if audience is not None and not wanted:
        raise InvalidInput("tokenAudience needs token true", field=p + "tokenAudience")
    if not wanted:
        return None
    if not can_sign:
        raise InvalidInput(
            "token needs a signing key: set push.token_key_file (docs/push.md, Tokens)", field=p + "token"
        )
    if audience is None:
        return endpoint
    if not isinstance(audience, str) or not 0 < len(audience) <= 2048 or not audience.isprintable():
        raise InvalidInput("tokenAudience is 1-2048 printable characters", field=p + "tokenAudience")
    return audience


def _secret(value: object, field: str) -> bytes:
    """A Standard Webhooks secret: ``whsec_`` then the base64 of 24 to 64 bytes (None: unsigned)."""
    if value is None:
        return b""
    shown = "secret must be 'whsec_' followed by the base64 of 24 to 64 random bytes"
    if not isinstance(value, str) or not value.startswith(SECRET_PREFIX):
        raise InvalidInput(shown, field=field)
    try:
        key = base64.b64decode(value[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(shown, field=field) from None
    if not 24 <= len(key) <= 64:
        raise InvalidInput(shown, field=field)
    return key
