"""Options of the tubemq Spark source (no Spark needed): offsets specs, required options, bad values."""

from __future__ import annotations

import pytest

from gateway.spark.options import EARLIEST, KNOWN_OPTIONS, LATEST, SourceOptions, parse_offset_spec


def test_offset_specs_resolve_words_json_and_defaults() -> None:
    assert parse_offset_spec(None, EARLIEST, "x").resolve("1:t:0", 28, 280) == 28
    assert parse_offset_spec("LATEST", EARLIEST, "x").resolve("1:t:0", 28, 280) == 280
    spec = parse_offset_spec('{"1:t:0": 56, "1:t:1": -2, "1:t:2": -1}', LATEST, "x")
    assert [spec.resolve(k, 28, 280) for k in ("1:t:0", "1:t:1", "1:t:2", "1:t:3")] == [56, 28, 280, 280]
    for bad in ("soon", "[1]", '{"1:t:0": "5"}', '{"1:t:0": -3}', '{"t0": 5}', '{"1:t:0": true}'):
        with pytest.raises(ValueError):
            parse_offset_spec(bad, EARLIEST, "startingOffsets")


def test_source_options_defaults_and_checks() -> None:
    batch = SourceOptions.parse({"masters": "h:8715", "topic": "t"})
    assert batch.starting.default == EARLIEST and batch.ending.default == LATEST
    assert batch.timeout == 10.0 and batch.group_prefix == "tubemq_spark" and batch.gateway is None
    given = {"MASTERS": "h", "Topic": "t", "maxMessagesPerTrigger": "50"}
    stream = SourceOptions.parse(given, streaming=True)
    assert stream.starting.default == LATEST and stream.max_messages_per_trigger == 50
    pinned = SourceOptions.parse({**given, "startingOffsets": '{"1:t:0": 56}'}, streaming=True)
    assert pinned.starting.resolve("1:t:0", 0, 280) == 56
    assert pinned.starting.resolve("1:t:1", 0, 280) == 0  # left out of the JSON: earliest
    via = SourceOptions.parse({"gateway": "http://gw:8080/", "topic": "t"})
    assert via.gateway == "http://gw:8080" and via.masters is None
    for bad in (
        {"masters": "h"},
        {"topic": "t"},
        {"gateway": "gw:8080", "topic": "t"},
        {"masters": "h", "topic": "t", "maxMessagesPerTrigger": "0"},
        {"masters": "h", "topic": "t", "timeout": "-1"},
    ):
        with pytest.raises(ValueError):
            SourceOptions.parse(bad)


def test_a_group_prefix_follows_tubemqs_group_name_rule() -> None:
    """groupPrefix names the range reads' consumer groups: TubeMQ's group rule (ASCII, at most 1024 with
    the generated suffix) holds before any group reaches a broker, and the error names the option."""
    assert (
        SourceOptions.parse({"masters": "h", "topic": "t", "groupPrefix": "a" * 960}).group_prefix
        == "a" * 960
    )
    for bad in ("a" * 961, "9bad", "caf\u00e9", "a b", "x\u0661"):
        with pytest.raises(ValueError, match="option 'groupPrefix'"):
            SourceOptions.parse({"masters": "h", "topic": "t", "groupPrefix": bad})


def test_several_topics_caps_data_loss_and_split_options() -> None:
    both = SourceOptions.parse({"masters": "h", "topic": "a, b", "subscribe": "b,c"})
    assert both.topics == ("a", "b", "c")
    assert SourceOptions.parse({"masters": "h", "subscribe": "x"}).topic == "x"
    with pytest.raises(ValueError, match="exactly one topic"):
        _ = both.topic
    base = {"masters": "h", "topic": "t"}
    assert SourceOptions.parse(base).fail_on_data_loss is True
    assert SourceOptions.parse({**base, "failOnDataLoss": "FALSE"}).fail_on_data_loss is False
    assert SourceOptions.parse({**base, "maxOffsetsPerTrigger": "70"}).max_messages_per_trigger == 70
    same = {**base, "maxOffsetsPerTrigger": "70", "maxMessagesPerTrigger": "70"}
    assert SourceOptions.parse(same).max_messages_per_trigger == 70
    assert SourceOptions.parse({**base, "minPartitions": "8"}).min_partitions == 8
    for bad, match in (
        ({"maxOffsetsPerTrigger": "70", "maxMessagesPerTrigger": "71"}, "give one of them"),
        ({"failOnDataLoss": "yes"}, "failOnDataLoss must be 'true' or 'false'"),
        ({"minPartitions": "0"}, "minPartitions must be >= 1"),
        ({"maxOffsetsPerTrigger": "many"}, "maxOffsetsPerTrigger must be a whole number"),
        ({"topic": " , "}, "option 'topic' is required"),
        ({"startingTimestamp": "1700000000000"}, "no time-to-offset look-up"),
        ({"startingOffsetsByTimestamp": "{}"}, "no time-to-offset look-up"),
        ({"endingTimestamp": "1700000000000"}, "no time-to-offset look-up"),
        ({"subscribePattern": "t.*"}, "cannot list the master's topics"),
        ({"assign": '{"t": [0]}'}, "startingOffsets JSON"),
    ):
        with pytest.raises(ValueError, match=match):
            SourceOptions.parse({**base, **bad})


def test_only_known_options_pass_and_offsets_are_index_offsets() -> None:
    base = {"masters": "h", "topic": "t"}
    for name in KNOWN_OPTIONS:  # every known name is accepted (values that parse)
        value = {"gateway": "http://gw:1", "tls": "false", "tls.verify": "true", "groupPrefix": "p1"}.get(
            name, "1"
        )
        if name in ("startingOffsets", "endingOffsets"):
            value = "earliest"
        elif name in ("failOnDataLoss",):
            value = "true"
        elif name in ("tls.caFile", "tls.certFile", "tls.keyFile", "auth.username", "auth.password"):
            continue  # need files or a pair: test_spark_upstream covers them
        extra = {"gateway": "http://gw:1"} if name == "gatewayToken" else {}
        SourceOptions.parse({**base, **extra, name.upper(): value})
    assert SourceOptions.parse({**base, "checkpointLocation": "/x", "queryName": "q"}).topics == ("t",)
    with pytest.raises(ValueError, match=r"unknown option 'kafka.bootstrap.servers'.*: masters, gateway"):
        SourceOptions.parse({**base, "kafka.bootstrap.servers": "h:9092"})
    with pytest.raises(ValueError, match="'endingOffsets' is for batch reads only"):
        SourceOptions.parse({**base, "endingOffsets": "latest"}, streaming=True)
    assert SourceOptions.parse({**base, "endingOffsets": "latest"}).ending.default == LATEST
    assert parse_offset_spec('{"1:t:0": 56, "1:t:1": 0}', EARLIEST, "x").per_partition["1:t:0"] == 56
    with pytest.raises(ValueError, match=r"offset 30 of '1:t:0' is not an index offset.*start at 28 and 56"):
        parse_offset_spec('{"1:t:0": 30}', EARLIEST, "startingOffsets")
