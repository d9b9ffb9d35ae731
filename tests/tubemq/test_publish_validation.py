"""The publish rules (``payload.prepare_message``) cover every check of the attribute text builder: a
message they accept is one the checked builder accepts too, with the same payload, msgType and msgTime,
and the size the topic's limit counts (body plus attribute text in characters)."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gateway.tubemq.errors import InvalidMessage
from gateway.tubemq.wire.payload import build_attribute_text, encode_payload, prepare_message

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
def test_a_message_the_publish_rules_accept_encodes_as_the_checked_builder_does(
    key: str | None, attributes: dict[str, str] | None, stream_id: str | None, msg_time: str | None
) -> None:
    try:
        message = prepare_message(b"v", attributes, stream_id, msg_time, key)
    except InvalidMessage:
        assume(False)
    text = build_attribute_text(attributes, stream_id, msg_time, key)
    assert (message.data, message.flag) == encode_payload(b"v", attributes, stream_id, msg_time, key)
    assert message.size == 1 + len(text)
    assert message.msg_type == (stream_id.strip() if stream_id is not None else None)
    assert message.msg_time == msg_time
