"""The push subscription model: a definition's one check (every wrong field named, by its path in a file),
the backoff per attempt, and a secret that never shows."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.service.errors import InvalidInput
from gateway.service.push_outbound import EndpointPolicy
from gateway.service.push_subscription import (
    SETTLE_MARGIN,
    PushSubscription,
    SubscriptionBounds,
    load_subscriptions,
    longest_request,
    message_hold,
    parse_subscription,
)

SECRET = "whsec_" + base64.b64encode(b"s" * 32).decode()
BOUNDS = SubscriptionBounds(
    max_ack_deadline=600.0, max_backoff=600.0, check_endpoint=EndpointPolicy.parse(["*.example"]).check_url
)
VALID: dict[str, Any] = {
    "name": "orders-hook",
    "group": "orders-push",
    "topics": {"orders": ["eu", "us"], "refunds": []},
    "endpoint": "https://hooks.example/orders?key=abc",
    "retryTopic": "orders_retry",
}


def test_a_full_definition_is_read_in_the_api_spelling() -> None:
    definition = {
        **VALID,
        "payload": "unwrapped",
        "valueFormat": "json",
        "startPosition": "earliest",
        "ackDeadlineMs": 5000,
        "minBackoffMs": 250,
        "maxBackoffMs": 2000,
        "deadLetterTopic": "orders_dlq",
        "maxDeliveryAttempts": 4,
        "maxConcurrency": 8,
        "orderedByKey": True,
        "secret": SECRET,
        "paused": True,
    }
    s = parse_subscription(definition, BOUNDS)
    assert (s.name, s.group, s.endpoint, s.payload, s.value_format) == (
        "orders-hook",
        "orders-push",
        definition["endpoint"],
        "unwrapped",
        "json",
    )
    assert s.topics == {"orders": ("eu", "us"), "refunds": ()}
    assert (s.ack_deadline, s.min_backoff, s.max_backoff) == (5.0, 0.25, 2.0)
    assert (s.dead_letter_topic, s.max_delivery_attempts, s.max_concurrency) == ("orders_dlq", 4, 8)
    assert s.ordered_by_key and s.paused and s.secret == b"s" * 32
    shown = s.to_dict()
    assert shown["hasSecret"] is True and SECRET not in json.dumps(shown)
    assert "secret" not in repr(s) and SECRET[6:] not in repr(s)
    shown.pop("hasSecret")
    assert parse_subscription({**shown, "secret": SECRET}, BOUNDS) == s  # what the API shows reads back


def test_defaults_and_the_backoff_doubling_up_to_its_maximum() -> None:
    s = parse_subscription({**VALID, "topics": ["orders"], "minBackoffMs": 100, "maxBackoffMs": 1000}, BOUNDS)
    assert (s.payload, s.start_position, s.ack_deadline, s.max_concurrency, s.dead_letter_topic) == (
        "wrapped",
        "latest",
        10.0,
        16,
        None,
    )
    assert [s.backoff(a) for a in (1, 2, 3, 4, 5, 1000)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "has space"}, "name"),
        ({"name": "x" * 65}, "name"),
        ({"group": "bad group"}, "group"),
        ({"topics": []}, "topics"),
        ({"topics": {"orders": "eu"}}, "topics"),
        ({"topics": {"orders": ["\x00"]}}, "topics.orders"),
        ({"topics": ["bad topic"]}, "topics"),
        ({"endpoint": "ftp://hooks.example/"}, "endpoint"),
        ({"endpoint": "https://user:pw@hooks.example/"}, "endpoint"),
        ({"endpoint": "https://hooks.example/#frag"}, "endpoint"),
        ({"endpoint": "https://other.test/"}, "endpoint"),  # not in push.allow
        ({"endpoint": "https://hooks.example:99999/"}, "endpoint"),
        ({"payload": "raw"}, "payload"),
        ({"valueFormat": "hex"}, "valueFormat"),
        ({"startPosition": "offsets"}, "startPosition"),
        ({"ackDeadlineMs": 0}, "ackDeadlineMs"),
        ({"ackDeadlineMs": 600_001}, "ackDeadlineMs"),
        ({"ackDeadlineMs": 600_000}, "ackDeadlineMs"),  # no margin left under consumers.max_ack_deadline
        ({"ackDeadlineMs": 1.5}, "ackDeadlineMs"),
        ({"minBackoffMs": -1}, "minBackoffMs"),
        ({"minBackoffMs": 500, "maxBackoffMs": 100}, "maxBackoffMs"),
        ({"retryTopic": None}, "retryTopic"),
        ({"retryTopic": "orders"}, "retryTopic"),
        ({"deadLetterTopic": "orders_retry"}, "deadLetterTopic"),
        ({"maxDeliveryAttempts": 3}, "deadLetterTopic"),
        ({"deadLetterTopic": "dlq", "maxDeliveryAttempts": 0}, "maxDeliveryAttempts"),
        ({"maxConcurrency": 0}, "maxConcurrency"),
        ({"maxConcurrency": True}, "maxConcurrency"),
        ({"orderedByKey": "yes"}, "orderedByKey"),
        ({"secret": "plain"}, "secret"),
        ({"secret": "whsec_" + base64.b64encode(b"short").decode()}, "secret"),
        ({"secret": "whsec_not base64!"}, "secret"),
        ({"colour": "blue"}, "colour"),
        ({"token": "yes"}, "token"),
        ({"tokenAudience": "https://aud.example"}, "tokenAudience"),  # without token
    ],
)
def test_each_wrong_field_is_named(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_subscription({**VALID, **change}, BOUNDS, "subscriptions[3].")
    assert caught.value.field == f"subscriptions[3].{field}"


def test_the_longest_ack_deadline_leaves_a_margin_and_one_longer_is_refused() -> None:
    longest = round(longest_request(BOUNDS.max_ack_deadline) * 1000)
    assert longest == 595_000
    assert parse_subscription({**VALID, "ackDeadlineMs": longest}, BOUNDS).ack_deadline == 595.0
    with pytest.raises(InvalidInput, match="ackDeadlineMs must be an integer 1 to 595000"):
        parse_subscription({**VALID, "ackDeadlineMs": longest + 1}, BOUNDS)


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=0.002, max_value=3600, allow_nan=False),
    st.floats(min_value=0, max_value=1, allow_nan=False),
)
def test_a_message_is_held_past_its_request_by_a_margin(max_hold: float, share: float) -> None:
    """For every accepted ack deadline, the message's hold outlasts the request by the settle margin (half
    the longest deadline when that is short), and never passes the consumer service's longest deadline."""
    ack = max(0.001, share * longest_request(max_hold))
    hold = message_hold(ack, max_hold)
    assert hold <= max_hold
    assert hold - ack >= min(SETTLE_MARGIN, max_hold / 2) - 1e-9


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([*sorted(VALID), "payload", "ackDeadlineMs", "secret"]), _json))
def test_any_json_is_a_subscription_or_an_invalid_input(changes: dict[str, Any]) -> None:
    try:
        parse_subscription({**VALID, **changes}, BOUNDS)
    except InvalidInput as exc:
        assert exc.field
    with pytest.raises(InvalidInput):
        parse_subscription([changes], BOUNDS)


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "subs.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_file_holds_unique_names_within_the_limit(tmp_path: Path) -> None:
    other = {**VALID, "name": "second", "group": "second-push"}
    found = load_subscriptions(_write(tmp_path, {"subscriptions": [VALID, other]}), BOUNDS, 2)
    assert [s.name for s in found] == ["orders-hook", "second"] and isinstance(found[0], PushSubscription)
    for document, error in (
        ({"subscriptions": [VALID, VALID]}, r"subscriptions\[1\]\.name: 'orders-hook' is defined twice"),
        ({"subscriptions": [VALID, {**other, "group": VALID["group"]}]}, r"subscriptions\[1\]\.group: "),
        (
            {"subscriptions": [VALID, other, VALID]},
            r"3 subscriptions, more than push.max_subscriptions \(2\)",
        ),
        ([VALID], r'expected \{"subscriptions": \[\.\.\.\]\}'),
        ({"subscriptions": [{**VALID, "maxConcurrency": 0}]}, r"subscriptions\[0\]\.maxConcurrency: "),
    ):
        with pytest.raises(ValueError, match=error):
            load_subscriptions(_write(tmp_path, document), BOUNDS, 2)
    (tmp_path / "subs.json").write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot read push subscriptions"):
        load_subscriptions(tmp_path / "subs.json", BOUNDS, 2)


def test_a_token_needs_a_signing_key_and_defaults_to_the_endpoint_as_audience() -> None:
    with pytest.raises(InvalidInput, match=r"push\.token_key_file") as caught:
        parse_subscription({**VALID, "token": True}, BOUNDS)
    assert caught.value.field == "token"
    signing = dataclasses.replace(BOUNDS, can_sign=True)
    assert parse_subscription({**VALID, "token": True}, signing).token_audience == VALID["endpoint"]
    chosen = parse_subscription({**VALID, "token": True, "tokenAudience": "api://orders"}, signing)
    assert chosen.token_audience == "api://orders" and chosen.to_dict()["tokenAudience"] == "api://orders"
    assert parse_subscription(VALID, signing).token_audience is None
    with pytest.raises(InvalidInput) as caught:
        parse_subscription({**VALID, "token": True, "tokenAudience": ""}, signing)
    assert caught.value.field == "tokenAudience"
