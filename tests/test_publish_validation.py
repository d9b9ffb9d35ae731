"""The publish service's message check covers every check of the attribute text builder: the service
builds the text with ``checked=True`` (nothing checked twice), so a message it accepts must be one the
builder would accept, giving the same text."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.service.errors import InvalidInput
from gateway.service.publish import OutgoingMessage, validate_message
from gateway.tubemq.wire.payload import build_attribute_text

# Mostly text every check passes, now and then a piece some check refuses (so that most messages are
# accepted and the comparison runs, while each refusal is still tried).
_GOOD = ["a", "ż", "orders", "1", "x y", "%"]
_BAD = [",", "=", "$msgType$", "$msgTime$", "$msgKey$", "$", " ", "\t", "\ud800", "202401311530"]
_good = st.lists(st.sampled_from(_GOOD), min_size=1, max_size=3).map("".join)
text = _good | st.tuples(_good, st.sampled_from(_BAD), _good).map("".join) | st.text(max_size=4)
times = st.sampled_from(["202401311530", " 202401311530", "202402301530", "2024013115", ""]) | text


@settings(max_examples=200)
@given(
    key=st.none() | text,
    attributes=st.none() | st.dictionaries(text, text, max_size=2),
    stream_id=st.none() | text,
    msg_time=st.none() | times,
)
def test_a_message_the_service_accepts_builds_the_same_text_checked_or_not(
    key: str | None, attributes: dict[str, str] | None, stream_id: str | None, msg_time: str | None
) -> None:
    message = OutgoingMessage(b"v", key=key, attributes=attributes, stream_id=stream_id, msg_time=msg_time)
    try:
        validate_message(message, 0, "messages[0]")
    except InvalidInput:
        assume(False)
    built = build_attribute_text(attributes, stream_id, msg_time, key, checked=True)
    assert build_attribute_text(attributes, stream_id, msg_time, key) == built
