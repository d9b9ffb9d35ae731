"""The publish rules, one case per rule in one place: ``payload.prepare_message`` refuses a message breaking
one with ``InvalidMessage`` naming the field, and the publish service answers it as InvalidInput (REST 400,
gRPC INVALID_ARGUMENT) naming ``messages[i].<field>`` (``message.<field>`` for a bare message) with the
rule's message. The messages are those the service gave before the rules moved out of it (captured from its
``validate_message``), so clients see the same answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import parse_topic_specs
from gateway.service.errors import InvalidInput
from gateway.service.publish import OutgoingMessage, PublishService
from gateway.tubemq.errors import InvalidAttribute, InvalidMessage
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.wire.payload import BatchPreparer, prepare_message

_SURROGATE = (
    " holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), which is not text; send valid Unicode"
)
_OWN_PARAMETERS = "; set the message type and time through their own parameters"

# (case, the message's fields besides value=b"v", the field named, the message)
RULES: list[tuple[str, dict[str, Any], str, str]] = [
    ("empty value", {"value": b""}, "value", "value must not be empty"),
    ("empty key", {"key": ""}, "key", "key must be 1-1024 characters"),
    ("long key", {"key": "k" * 1025}, "key", "key must be 1-1024 characters"),
    (
        "surrogate key",
        {"key": "a\ud800"},
        "key",
        "key" + _SURROGATE,
    ),
    ("negative partition", {"partition": -1}, "partition", "partition must be >= 0"),
    ("attribute not text", {"attributes": {"a": 1}}, "attributes", "attributes must map strings to strings"),
    (
        "surrogate attribute key",
        {"attributes": {"\udfff": "v"}},
        "attributes",
        "an attribute key" + _SURROGATE,
    ),
    (
        "blank attribute key",
        {"attributes": {" ": "v"}},
        "attributes",
        "attribute key ' ' is blank; give a non-blank key",
    ),
    (
        "attribute key with comma",
        {"attributes": {"a,b": "v"}},
        "attributes",
        "attribute key 'a,b' contains ',', which separates attributes; remove it",
    ),
    (
        "attribute key with equals",
        {"attributes": {"a=b": "v"}},
        "attributes",
        "attribute key 'a=b' contains '=', which separates attributes; remove it",
    ),
    (
        "attribute key msgType",
        {"attributes": {"$msgType$": "v"}},
        "attributes",
        "attribute key '$msgType$' contains the reserved token $msgType$" + _OWN_PARAMETERS,
    ),
    (
        "attribute key msgTime",
        {"attributes": {"x$msgTime$": "v"}},
        "attributes",
        "attribute key 'x$msgTime$' contains the reserved token $msgTime$" + _OWN_PARAMETERS,
    ),
    (
        "attribute key msgKey",
        {"attributes": {"$msgKey$": "v"}},
        "attributes",
        "attribute key '$msgKey$' contains the reserved token $msgKey$"
        ", which carries the message key; set the key through its own parameter",
    ),
    (
        "surrogate attribute value",
        {"attributes": {"a": "\ud800"}},
        "attributes.a",
        "attribute 'a'" + _SURROGATE,
    ),
    (
        "empty attribute value",
        {"attributes": {"a": ""}},
        "attributes.a",
        "attribute value '' is blank; give a non-blank value",
    ),
    (
        "attribute value with comma",
        {"attributes": {"a": "x,y"}},
        "attributes.a",
        "attribute value 'x,y' contains ',', which separates attributes; remove it",
    ),
    (
        "attribute value with equals",
        {"attributes": {"a": "x=y"}},
        "attributes.a",
        "attribute value 'x=y' contains '=', which separates attributes; remove it",
    ),
    (
        "attribute value msgTime",
        {"attributes": {"a": "$msgTime$"}},
        "attributes.a",
        "attribute value '$msgTime$' contains the reserved token $msgTime$" + _OWN_PARAMETERS,
    ),
    ("blank streamId", {"stream_id": "  "}, "streamId", "streamId must be 1-256 non-blank characters"),
    ("empty streamId", {"stream_id": ""}, "streamId", "streamId must be 1-256 non-blank characters"),
    ("long streamId", {"stream_id": "s" * 257}, "streamId", "streamId must be 1-256 non-blank characters"),
    (
        "surrogate streamId",
        {"stream_id": "s\ud800"},
        "streamId",
        "streamId" + _SURROGATE,
    ),
    (
        "streamId with comma",
        {"stream_id": "a,b"},
        "streamId",
        "streamId 'a,b' contains ',', which TubeMQ reserves as a separator",
    ),
    (
        "streamId with equals",
        {"stream_id": "a=b"},
        "streamId",
        "streamId 'a=b' contains '=', which TubeMQ reserves as a separator",
    ),
    (
        "streamId msgType",
        {"stream_id": "$msgType$"},
        "streamId",
        "streamId '$msgType$' contains '$msgType$', which TubeMQ reserves as a separator",
    ),
    (
        "streamId msgTime",
        {"stream_id": "x$msgTime$"},
        "streamId",
        "streamId 'x$msgTime$' contains '$msgTime$', which TubeMQ reserves as a separator",
    ),
    (
        "short msgTime",
        {"msg_time": "2024013115"},
        "msgTime",
        "msgTime '2024013115' must be yyyyMMddHHmm, e.g. 202401311530",
    ),
    (
        "msgTime not a date",
        {"msg_time": "202402301530"},
        "msgTime",
        "msgTime '202402301530' must be yyyyMMddHHmm, e.g. 202401311530",
    ),
    (
        "msgTime with spaces",
        {"msg_time": " 202401311530"},
        "msgTime",
        "msgTime ' 202401311530' must be yyyyMMddHHmm, e.g. 202401311530",
    ),
    (
        "long bad msgTime",
        {"msg_time": "x" * 60},
        "msgTime",
        "msgTime 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' must be yyyyMMddHHmm, e.g. 202401311530",
    ),
    ("empty msgTime", {"msg_time": ""}, "msgTime", "msgTime '' must be yyyyMMddHHmm, e.g. 202401311530"),
    # several rules broken: the first in the order value, key, partition, attributes, streamId, msgTime
    ("key before streamId", {"key": "", "stream_id": ","}, "key", "key must be 1-1024 characters"),
    (
        "attributes before msgTime",
        {"attributes": {"a": ""}, "msg_time": "x"},
        "attributes.a",
        "attribute value '' is blank; give a non-blank value",
    ),
    (
        "streamId before msgTime",
        {"stream_id": ",", "msg_time": "x"},
        "streamId",
        "streamId ',' contains ',', which TubeMQ reserves as a separator",
    ),
]


def _outgoing(fields: dict[str, Any]) -> OutgoingMessage:
    return OutgoingMessage(fields.get("value", b"v"), **{k: v for k, v in fields.items() if k != "value"})


@pytest.mark.parametrize(("fields", "field", "message"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_each_rule_names_its_field(fields: dict[str, Any], field: str, message: str) -> None:
    m = _outgoing(fields)
    with pytest.raises(InvalidMessage) as caught:
        prepare_message(m.value, m.attributes, m.stream_id, m.msg_time, m.key, m.partition)
    assert (caught.value.field, str(caught.value)) == (field, message)
    assert isinstance(caught.value, InvalidAttribute)  # a ClientError and a ValueError, as before


def test_a_message_within_every_rule_is_prepared() -> None:
    message = prepare_message(b"v", {"a": "1"}, " s1 ", "202401311530", "k" * 1024, None)
    assert (message.msg_type, message.msg_time, message.key) == ("s1", "202401311530", "k" * 1024)
    assert prepare_message(b"v", stream_id="s" * 256, partition=0).partition == 0


_texts = st.sampled_from(["a", "b", " s1 ", "x,y", "k=v", "$msgType$", " ", "", "\ud800", "é"])
_times = st.sampled_from(["202401311530", "20240131153", "x"])
_message_fields = st.fixed_dictionaries(
    {},
    optional={
        "value": st.sampled_from([b"", b"v", b"body" * 40, bytearray(b"ba"), memoryview(b"mv")]),
        "attributes": st.one_of(
            st.dictionaries(_texts, _texts, max_size=3),
            st.sampled_from([{"a": 1}, {"a": ["x"]}, {"a": None}, (("a", "b"),)]),
        ),
        "stream_id": _texts,
        "msg_time": _times,
        "key": st.sampled_from(["k", "", "k" * 1025]),
        "partition": st.sampled_from([0, 3, -1, "1:demo:0"]),
    },
)


def _outcome(prepare: Any, fields: dict[str, Any]) -> object:
    m = _outgoing(fields)
    try:
        return prepare(m.value, m.attributes, m.stream_id, m.msg_time, m.key, m.partition)
    except Exception as exc:  # the same error: type, message and field
        return (type(exc), str(exc), getattr(exc, "field", None))


@settings(max_examples=300)
@given(st.lists(st.one_of(_message_fields, st.sampled_from([r[1] for r in RULES])), max_size=12))
def test_a_batch_preparer_gives_what_prepare_message_gives(batch: list[dict[str, Any]]) -> None:
    preparer = BatchPreparer()
    for fields in batch + batch:  # the second time round, every text it kept is reused
        assert _outcome(preparer.prepare, fields) == _outcome(prepare_message, fields), fields


@pytest.fixture
async def service() -> AsyncIterator[PublishService]:
    async with EmbeddedCluster(parse_topic_specs("demo:2")) as cluster, ConnectionPool() as pool:
        producer = Producer(cluster.master_addresses, pool=pool, config=ProducerConfig())
        await producer.start()
        try:
            yield PublishService(producer)
        finally:
            await producer.close()


async def test_the_service_answers_each_rule_naming_the_field(service: PublishService) -> None:
    good = OutgoingMessage(b"fine")
    for _, fields, field, message in RULES:
        batch = [good, good, good, _outgoing(fields), good]
        with pytest.raises(InvalidInput) as caught:
            await service.publish("demo", batch)
        error = caught.value
        assert (error.field, error.index, str(error)) == (f"messages[3].{field}", 3, message)
        with pytest.raises(InvalidInput) as caught:
            await service.publish("demo", [_outgoing(fields)], raw=True)
        assert (caught.value.field, caught.value.index) == (f"message.{field}", None)
        assert str(caught.value) == message
