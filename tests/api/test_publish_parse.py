"""REST publish parsing: the fast paths for plain messages (the twin's read of the usual batch with orjson,
the usual message) agree with the general one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.api.publish_parse import _parse_any, parse_json_batch_py, parse_message, usual_batch_py
from gateway.service.errors import InvalidInput
from gateway.service.publish import OutgoingMessage
from tests.support.publish_reference import prepared_reference

# scripts/test.sh runs this module again on the pure path (TUBEMQ_GATEWAY_NO_EXTENSIONS=1)
pytestmark = pytest.mark.compiled_twins("gateway.api._publish_parse")

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
    assert parse_json_batch_py(body.encode()) == [
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
        parse_json_batch_py(json.dumps({"messages": [item]}).encode())
    assert caught.value.field == field and caught.value.index == 0


_BIG = st.sampled_from([2**64, -(2**63) - 1, 2**63, 10**30, 1.5, 1e300, float("nan"), float("inf")])


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    """JSON bodies: mostly usual batches, some with any other field, numbers past 64 bits, NaN, lone
    surrogate escapes, duplicate keys, another envelope, or bytes cut or changed."""
    usual = st.fixed_dictionaries(
        {"value": st.text(max_size=6)},
        optional={"attributes": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)},
    )
    odd = st.one_of(
        _MESSAGES,
        st.fixed_dictionaries({"value": st.text(max_size=3), "partition": _BIG}),
        st.fixed_dictionaries({"value": st.lists(_BIG, max_size=2), "encoding": st.just("json")}),
    )
    items: list[Any] = draw(st.lists(usual if draw(st.booleans()) else st.one_of(usual, odd), max_size=5))
    doc: Any = (
        {"messages": items} if draw(st.integers(0, 9)) else draw(st.sampled_from([[], {"m": 1}, items]))
    )
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    mutation = draw(st.integers(0, 7))
    if mutation == 1:
        text = text.replace('"value": "', '"value": "\\ud800', 1)
    elif mutation == 2:
        text = text.replace('{"value"', '{"value": "dup", "value"', 1)
    elif mutation == 3 and text:
        text = text[: draw(st.integers(0, len(text) - 1))]
    body = text.encode("utf-8", "surrogatepass")
    if mutation == 4:
        body = b"\xef\xbb\xbf" + body
    return body


@settings(max_examples=400)
@given(_bodies())
def test_a_batch_the_twin_takes_reads_as_the_standard_library_reads_it(body: bytes) -> None:
    got = usual_batch_py(body, 10)
    if got is not None:
        assert got == prepared_reference(body, 10), body


def test_a_number_past_64_bits_is_read_exactly() -> None:
    body = json.dumps({"messages": [{"value": [2**64, 10**30], "encoding": "json"}]}).encode()
    assert parse_json_batch_py(body) == [
        OutgoingMessage(b"[18446744073709551616,1000000000000000000000000000000]")
    ]
    assert usual_batch_py(body, 10) is None  # not the usual batch: the reference reads it
