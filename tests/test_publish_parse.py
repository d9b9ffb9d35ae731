"""REST publish parsing: the fast path for plain messages agrees with the general one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.publish_parse import _parse_any, parse_json_batch, parse_message
from gateway.service.errors import InvalidInput
from gateway.service.publish import OutgoingMessage

_JSON_SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5)
_FIELDS = {
    # mostly the plain shapes the fast path takes, so that it is exercised against every other field
    "value": st.text(max_size=5)
    | st.text(max_size=5)
    | _JSON_SCALARS
    | st.dictionaries(st.text(max_size=3), _JSON_SCALARS, max_size=2),
    "encoding": st.sampled_from(["utf8", "utf8", "base64", "json", "latin1"]) | _JSON_SCALARS,
    "attributes": st.none()
    | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=3)
    | st.dictionaries(st.text(max_size=3), st.text(max_size=3) | st.integers(), max_size=3)
    | _JSON_SCALARS,
    "key": _JSON_SCALARS,
    "partition": _JSON_SCALARS,
    "streamId": _JSON_SCALARS,
    "msgTime": _JSON_SCALARS,
}
_MESSAGES = st.fixed_dictionaries({}, optional=_FIELDS)


def _outcome(parse: Any, item: dict[str, Any]) -> OutgoingMessage | tuple[str, str | None]:
    try:
        return parse(item, 3)  # type: ignore[no-any-return]
    except InvalidInput as exc:
        return (str(exc), exc.field)


@settings(max_examples=250)
@given(_MESSAGES)
def test_fast_path_agrees_with_the_general_parser(item: dict[str, Any]) -> None:
    try:
        json.dumps(item).encode()  # only what a JSON body can carry
    except (ValueError, UnicodeEncodeError):
        return
    assert _outcome(parse_message, item) == _outcome(_parse_any, item)


def test_plain_messages_with_attributes() -> None:
    body = json.dumps({"messages": [{"value": "héllo", "attributes": {"a": "1"}}, {"value": "x"}]})
    assert parse_json_batch(body.encode()) == [
        OutgoingMessage("héllo".encode(), attributes={"a": "1"}),
        OutgoingMessage(b"x"),
    ]


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"value": "v", "attributes": {"a": 1}}, "messages[0].attributes"),
        ({"value": "v", "bogus": 1}, "messages[0].bogus"),
        ({"value": 5}, "messages[0].value"),
        ("text", "messages[0]"),
    ],
)
def test_errors_name_the_field(item: object, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_json_batch(json.dumps({"messages": [item]}).encode())
    assert caught.value.field == field and caught.value.index == 0
