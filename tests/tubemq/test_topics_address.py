from pathlib import Path

import pytest

from gateway.embedded.topics import TopicSpec, load_topic_file, parse_topic_specs
from gateway.tubemq.address import NodeAddress, parse_address_list


def test_parse_topic_specs() -> None:
    specs = parse_topic_specs("demo:4, orders:8:2 ,plain")
    assert specs == [TopicSpec("demo", 4), TopicSpec("orders", 8, 2), TopicSpec("plain")]
    assert specs[1].partition_ids()[:2] == [0, 1]
    assert specs[1].partition_ids()[8:10] == [10000, 10001]


@pytest.mark.parametrize("bad", ["", "1abc:2", "demo:x", "demo:0", "demo:1:2:3", "demo,demo", "de-mo"])
def test_parse_topic_specs_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_topic_specs(bad)


def test_load_topic_file(tmp_path: Path) -> None:
    f = tmp_path / "topics.json"
    f.write_text('{"topics": [{"name": "demo", "partitions": 3}, {"name": "t2", "stores": 2}]}')
    assert load_topic_file(f) == [TopicSpec("demo", 3), TopicSpec("t2", 1, 2)]
    f.write_text('{"topics": []}')
    with pytest.raises(ValueError, match="non-empty"):
        load_topic_file(f)


def test_node_address() -> None:
    assert NodeAddress.parse("127.0.0.1:8715") == NodeAddress("127.0.0.1", 8715)
    assert str(NodeAddress("h", 1)) == "h:1"
    assert NodeAddress.parse("[::1]:9", None) == NodeAddress("::1", 9)
    assert NodeAddress.parse("host", 8123) == NodeAddress("host", 8123)
    assert parse_address_list("b:2, a:1,b:2") == [NodeAddress("b", 2), NodeAddress("a", 1)]
    for bad in ["", "host", "h:x", "h:0", ":5"]:
        with pytest.raises(ValueError):
            NodeAddress.parse(bad)
