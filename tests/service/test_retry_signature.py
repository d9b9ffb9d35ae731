"""The signature of retry copies (gateway.service.retry_signature) and how a copy of the retry topic is read
(gateway.service.redelivery.parse_retried): only a copy signed for the group with a configured secret, the
current or a previous one, is delivered, and its due time counts at most the largest allowed delay."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import Settings
from gateway.runtime import ConfigurationError, retry_secrets
from gateway.service.redelivery import RedeliveryPolicy, parse_retried
from gateway.service.retry_signature import OPEN_MODE_SECRET, SIGNATURE, RetrySigner
from gateway.tubemq.consumer import ConsumedMessage

OLD, NEW = b"the-former-retry-secret", b"the-current-retry-secret"
WALL = 1_800_000_000_000


def _copy(
    signer: RetrySigner, body: bytes = b"v", group: str = "g", due: int = WALL, **extra: str
) -> ConsumedMessage:
    attributes = {
        "own": "kept",
        "gateway.group": group,
        "gateway.topic": "src",
        "gateway.partitionKey": "1:src:0",
        "gateway.offset": "7",
        "gateway.messageId": "42",
        "gateway.attempt": "2",
        "gateway.due": str(due),
    }
    attributes[SIGNATURE] = signer.sign(attributes, body)
    attributes.update(extra)
    return ConsumedMessage(9, body, attributes, group, None, 0, 0)


def _policy(*secrets: bytes, max_delay: float = 600.0) -> RedeliveryPolicy:
    return RedeliveryPolicy("retry", None, None, RetrySigner(list(secrets)), max_delay)


def test_a_signed_copy_is_delivered_under_its_origin_without_the_bookkeeping() -> None:
    parsed = parse_retried(_copy(RetrySigner([NEW])), "g", _policy(NEW), 100.0, WALL)
    assert parsed is not None
    message, origin = parsed
    assert (message.message_id, message.offset, message.attributes) == (42, 7, {"own": "kept"})
    assert (origin.topic, origin.partition_key, origin.attempt, origin.due) == ("src", "1:src:0", 2, 100.0)


def test_after_a_rotation_the_previous_secret_still_verifies_and_an_unknown_one_does_not() -> None:
    assert parse_retried(_copy(RetrySigner([OLD])), "g", _policy(NEW, OLD), 0.0, WALL) is not None
    assert parse_retried(_copy(RetrySigner([OLD])), "g", _policy(NEW), 0.0, WALL) is None


def test_a_copy_for_another_group_or_unsigned_is_set_aside() -> None:
    signer = RetrySigner([NEW])
    assert parse_retried(_copy(signer, group="other"), "g", _policy(NEW), 0.0, WALL) is None
    unsigned = _copy(signer)
    del unsigned.attributes[SIGNATURE]
    assert parse_retried(unsigned, "g", _policy(NEW), 0.0, WALL) is None


def test_the_due_time_counts_at_most_the_largest_delay() -> None:
    far = _copy(RetrySigner([NEW]), due=WALL + 10**12)
    parsed = parse_retried(far, "g", _policy(NEW, max_delay=30.0), 100.0, WALL)
    assert parsed is not None and parsed[1].due == 130.0


@given(
    body=st.binary(max_size=64),
    name=st.sampled_from(
        ["gateway.topic", "gateway.partitionKey", "gateway.messageId", "gateway.due", "gateway.x"]
    ),
    value=st.text(max_size=12),
    other_body=st.binary(max_size=64),
)
def test_any_changed_bookkeeping_or_value_breaks_the_signature(
    body: bytes, name: str, value: str, other_body: bytes
) -> None:
    signer = RetrySigner([NEW])
    copy = _copy(signer, body)
    assert signer.verify(copy.attributes, body)
    if copy.attributes.get(name) != value:
        assert not signer.verify({**copy.attributes, name: value}, body)
    if other_body != body:
        assert not signer.verify(copy.attributes, other_body)


def test_the_retry_key_is_the_operators_and_built_in_only_in_open_mode() -> None:
    def settings(mode: str, **consumers: object) -> Settings:
        return Settings(auth={"mode": mode}, consumers=consumers)

    previous = ["p" * 16]
    assert retry_secrets(settings("required", retry_secret="r" * 16, id_secret="i" * 16)) == [b"r" * 16]
    assert retry_secrets(settings("required", id_secret="i" * 16, previous_retry_secrets=previous)) == [
        b"i" * 16,
        b"p" * 16,
    ]
    assert retry_secrets(settings("open")) == [OPEN_MODE_SECRET.encode()]
    # authentication on and nothing set: a secret of the run (serve --workers), never the built-in one
    assert retry_secrets(settings("required"), "g" * 64) == [b"g" * 64]
    with pytest.raises(ConfigurationError, match=r"consumers\.id_secret"):
        retry_secrets(settings("required"))
