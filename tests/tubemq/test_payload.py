import base64
import json
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.tubemq.errors import ClientError, InvalidAttribute
from gateway.tubemq.wire.payload import (
    FLAG_HAS_ATTRIBUTES,
    TOKEN_MSG_KEY,
    DecodedPayload,
    PayloadDecodeError,
    build_attribute_text,
    crc32,
    crc32_checksum,
    decode_key,
    decode_payload,
    encode_key,
    encode_payload,
    format_msg_time,
    ipv4_to_sent_addr,
    java_string_hash,
    parse_attribute_text,
    parse_msg_time,
    validate_attribute_key,
    validate_attribute_value,
)
from tests.support.files import CAPTURE_FILE

CAPTURE = CAPTURE_FILE


def _calls(method: int) -> Iterator[dict[str, Any]]:
    for conn in json.loads(CAPTURE.read_text())["connections"]:
        for call in conn["calls"]:
            if call["method"] == method:
                yield call


def test_capture_send_payloads_decode_and_reencode_identically() -> None:
    sends = list(_calls(13))
    assert len(sends) == 6
    for call in sends:
        req = call["request"]
        data = base64.b64decode(req["data"])
        decoded = decode_payload(data, req["flag"])
        assert decoded.msg_type == req["msgType"]
        assert decoded.msg_time == req["msgTime"]
        assert list(decoded.attributes) == ["idx"]
        assert decoded.body.startswith(b"cap")
        encoded = encode_payload(decoded.body, decoded.attributes, decoded.msg_type, decoded.msg_time)
        assert encoded == (data, req["flag"])
        # the broker filters on String.hashCode of field 8, which the payload repeats
        assert java_string_hash(req["msgType"]) == java_string_hash(decoded.msg_type or "")


def test_capture_first_send_exact_content() -> None:
    req = next(_calls(13))["request"]
    decoded = decode_payload(base64.b64decode(req["data"]), 1)
    assert decoded == DecodedPayload(b"cap-0", {"idx": "0"}, "s-cap", "202611221200")
    # 192.0.2.2 is the capture's client address
    assert ipv4_to_sent_addr("192.0.2.2") == req["sentAddr"] == -1073741310


def test_capture_fetched_checksums() -> None:
    messages = [m for call in _calls(17) for m in call["response"].get("messages", [])]
    assert len(messages) == 3
    for msg in messages:
        data = base64.b64decode(msg["payLoadData"])
        assert crc32_checksum(data) == msg["checkSum"]
        assert crc32_checksum(memoryview(data)) == msg["checkSum"]
        decoded = decode_payload(data, msg["flag"])
        assert decoded.msg_type == "s-cap2" and decoded.msg_time == "202611221200"
        assert decoded.body.startswith(b"cap2-")


def test_vectors() -> None:
    assert crc32_checksum(b"hello") == 907060870
    assert java_string_hash("abc") == 96354
    assert java_string_hash("typeA") == 110843975
    assert java_string_hash("") == 0
    # U+1F600 is two UTF-16 code units: 0xD83D, 0xDE00
    assert java_string_hash("\U0001f600") == 31 * 0xD83D + 0xDE00
    assert java_string_hash("a\U0001f600") == ((97 * 31 + 0xD83D) * 31 + 0xDE00)
    # int32 wrap-around: Java "hello world".hashCode() == 1794106052, "polygenelubricants" -> MIN_VALUE
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert ipv4_to_sent_addr("192.168.1.10") == -1062731510
    assert ipv4_to_sent_addr("10.0.0.1") == 167772161
    for bad in ["::1", "10.0.0", "host", "256.0.0.1"]:
        with pytest.raises(ValueError, match="IPv4"):
            ipv4_to_sent_addr(bad)


def test_attribute_order_and_flag() -> None:
    text = build_attribute_text({"region": "eu", "a": "1"}, " order ", "202401311530")
    assert text == "$msgType$=order,$msgTime$=202401311530,region=eu,a=1"
    data, flag = encode_payload(b"body", {"region": "eu"}, "order", "202401311530")
    assert flag == FLAG_HAS_ATTRIBUTES
    raw = b"$msgType$=order,$msgTime$=202401311530,region=eu"
    assert data == len(raw).to_bytes(4, "big") + raw + b"body"
    assert encode_payload(b"x", {"k": "v"}) == (b"\x00\x00\x00\x03k=vx", 1)
    assert encode_payload(b"x", None, None, "202401311530")[0][4:-1] == b"$msgTime$=202401311530"


@pytest.mark.parametrize(("attrs", "mtype", "mtime"), [(None, None, None), ({}, "", "  "), ({}, " ", None)])
def test_no_prefix_for_empty_text(attrs: dict[str, str] | None, mtype: str | None, mtime: str | None) -> None:
    assert encode_payload(b"plain", attrs, mtype, mtime) == (b"plain", 0)


def test_non_ascii_attributes_use_utf8_byte_length() -> None:
    data, flag = encode_payload(b"b", {"city": "Zürich"})
    assert int.from_bytes(data[:4], "big") == len("city=Zürich".encode())
    assert decode_payload(data, flag).attributes == {"city": "Zürich"}


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("a,b", "v", "','"),
        ("a=b", "v", "'='"),
        ("k", "v,w", "','"),
        ("k", "x=y", "'='"),
        ("$msgType$", "v", r"\$msgType\$"),
        ("k", "pre$msgTime$", r"\$msgTime\$"),
        ("", "v", "blank"),
        (" ", "v", "blank"),
        ("k", "", "blank"),
    ],
)
def test_invalid_attributes(key: str, value: str, problem: str) -> None:
    with pytest.raises(InvalidAttribute, match=problem) as info:
        encode_payload(b"x", {key: value})
    assert isinstance(info.value, ClientError) and isinstance(info.value, ValueError)


def test_validators_and_reserved_msg_type() -> None:
    validate_attribute_key("ok-key")
    validate_attribute_value("ok value")
    with pytest.raises(InvalidAttribute, match="key"):
        validate_attribute_key("a,b")
    with pytest.raises(InvalidAttribute, match="value"):
        validate_attribute_value("a=b")
    with pytest.raises(InvalidAttribute):
        encode_payload(b"x", None, "a,b")
    with pytest.raises(InvalidAttribute, match="yyyyMMddHHmm"):
        encode_payload(b"x", None, None, "2024-01-31")


def test_decode_without_flag_returns_body() -> None:
    assert decode_payload(b"\x00\x00\x00\x05hello", 0) == DecodedPayload(b"\x00\x00\x00\x05hello", {})
    assert decode_payload(bytearray(b"x"), 2).body == b"x"


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x00\x00", b"\x00\x00\x00\x05abc", b"\xff\xff\xff\xffabc", b"\x00\x00\x00\x02\xff\xfe"],
)
def test_decode_rejects_bad_prefix(data: bytes) -> None:
    with pytest.raises(PayloadDecodeError) as info:
        decode_payload(data, 1)
    assert isinstance(info.value, ValueError)


def test_decode_empty_prefix_and_lenient_items() -> None:
    assert decode_payload(b"\x00\x00\x00\x00body", 1) == DecodedPayload(b"body", {})
    text = "noeq,=v,a=1,a=2,$msgTime$=2024,$msgType$=t"
    assert parse_attribute_text(text) == ({"a": "1"}, "t", None, None)


def test_msg_time() -> None:
    assert format_msg_time(datetime(2024, 1, 31, 15, 30, 59)) == "202401311530"
    aware = datetime(2024, 1, 31, 15, 30, tzinfo=timezone(timedelta(hours=3)))
    assert format_msg_time(aware) == format_msg_time(aware.astimezone().replace(tzinfo=None))
    assert len(format_msg_time()) == 12
    assert parse_msg_time("202401311530") == datetime(2024, 1, 31, 15, 30)
    for bad in ["20240131153", "2024013115301", "202413011530", "20240131 530", "\uff12" * 12]:
        with pytest.raises(ValueError):
            parse_msg_time(bad)


attr_text = st.text(
    alphabet=st.characters(blacklist_characters=",=$", blacklist_categories=("Cs",)), min_size=1, max_size=12
).filter(lambda s: bool(s.strip()))
msg_times = st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31)).map(
    format_msg_time
)


@given(
    body=st.binary(max_size=64),
    attributes=st.dictionaries(attr_text, attr_text, max_size=5),
    msg_type=st.none() | attr_text.map(str.strip).filter(bool),
    msg_time=st.none() | msg_times,
)
def test_roundtrip(
    body: bytes, attributes: dict[str, str], msg_type: str | None, msg_time: str | None
) -> None:
    data, flag = encode_payload(body, attributes, msg_type, msg_time)
    assert flag == (1 if attributes or msg_type or msg_time else 0)
    decoded = decode_payload(data, flag)
    assert decoded == DecodedPayload(body, attributes, msg_type, msg_time)
    assert list(decoded.attributes) == list(attributes)
    assert encode_payload(decoded.body, decoded.attributes, decoded.msg_type, decoded.msg_time) == (
        data,
        flag,
    )


@given(st.binary(max_size=40), st.integers(0, 3))
def test_decode_never_crashes_unexpectedly(data: bytes, flag: int) -> None:
    try:
        decoded = decode_payload(data, flag)
    except PayloadDecodeError:
        assert flag & 1
    else:
        assert len(decoded.body) <= len(data)


@given(st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31)))
def test_msg_time_roundtrip(when: datetime) -> None:
    assert parse_msg_time(format_msg_time(when)) == when.replace(second=0, microsecond=0)


def test_utc_marker_used() -> None:
    # an aware UTC time and its local equivalent give the same stamp
    now = datetime.now(UTC)
    assert format_msg_time(now) == format_msg_time(now.astimezone())


# --- the message key ($msgKey$) ---------------------------------------------------------------------


def test_key_travels_as_reserved_attribute() -> None:
    data, flag = encode_payload(b"v", {"region": "eu"}, "orders", "202401311530", "customer-42")
    assert flag == 1
    # after TubeMQ's own reserved items, before the user items; a Java consumer reads it with
    # getAttrValue("$msgKey$")
    assert data[4:-1] == b"$msgType$=orders,$msgTime$=202401311530,$msgKey$=customer-42,region=eu"
    decoded = decode_payload(data, flag)
    assert decoded == DecodedPayload(b"v", {"region": "eu"}, "orders", "202401311530", "customer-42")
    assert TOKEN_MSG_KEY not in decoded.attributes
    # a key alone still sets the attribute flag
    assert encode_payload(b"v", key="k") == (b"\x00\x00\x00\x0a$msgKey$=kv", 1)
    assert encode_payload(b"v", key="") == (b"v", 0)


def test_key_escapes_only_separators_percent_and_dollar() -> None:
    assert encode_key("customer-42 ü") == "customer-42 ü"
    assert encode_key("a,b=c%d$msgTime$") == "a%2Cb%3Dc%25d%24msgTime%24"
    text = build_attribute_text(None, None, None, "a,b=c%d$msgTime$")
    assert text == "$msgKey$=a%2Cb%3Dc%25d%24msgTime%24"
    assert parse_attribute_text(text) == ({}, None, None, "a,b=c%d$msgTime$")
    # a Java producer's own value: a '%' that starts none of the four escapes stays
    assert decode_key("50%off%2") == "50%off%2"
    assert decode_key("x%2cy%3dz") == "x,y=z"


def test_reserved_key_name_refused_as_user_attribute() -> None:
    for name in (TOKEN_MSG_KEY, "x$msgKey$"):
        with pytest.raises(InvalidAttribute, match="reserved token"):
            validate_attribute_key(name)
        with pytest.raises(InvalidAttribute):
            encode_payload(b"x", {name: "spoof"})
    validate_attribute_value("$msgKey$ in a value is harmless")


def test_first_key_item_wins() -> None:
    assert parse_attribute_text("$msgKey$=a,$msgKey$=b,$msgKey$=")[3] == "a"
    assert parse_attribute_text("$msgKey$=")[3] is None


@given(
    body=st.binary(min_size=1, max_size=16),
    key=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40),
    attributes=st.dictionaries(attr_text, attr_text, max_size=3),
)
def test_key_roundtrip(body: bytes, key: str, attributes: dict[str, str]) -> None:
    data, flag = encode_payload(body, attributes, None, None, key)
    decoded = decode_payload(data, flag)
    assert decoded.key == key
    assert decoded.attributes == attributes
    assert decoded.body == body
    # the stored text never holds a separator or a reserved token of its own making
    value = encode_key(key)
    assert not any(c in value for c in ",=$")


@given(st.binary(max_size=5000), st.integers(0, 15))
def test_the_crc32_is_zlibs_on_any_buffer(data: bytes, cut: int) -> None:
    """ISA-L's CRC-32 (payload.crc32, what fetched messages are checked with) is zlib's, on any buffer."""
    expected = zlib.crc32(data)
    assert crc32(data) == expected
    assert crc32(bytearray(data)) == expected
    assert crc32(memoryview(b"x" * cut + data)[cut:]) == expected
    assert crc32_checksum(data) == expected & 0x7FFFFFFF
