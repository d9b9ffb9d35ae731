"""The Spark page (docs/spark.md, once the README's Spark section) runs verbatim (issue #15, item 13): its
embedded command creates every topic its snippet reads or writes, and the snippet, run as written against
that cluster, copies the messages."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from spark_support import ClusterThread, read_tubemq, spark_session

from gateway.embedded.topics import parse_topic_specs

pytestmark = pytest.mark.spark

PAGE = Path(__file__).resolve().parent.parent / "docs" / "spark.md"
README_MASTERS = "127.0.0.1:18715"  # the embedded command's master; the test's cluster listens elsewhere


def spark_section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert text.startswith("# Spark\n"), "docs/spark.md is the Spark page"
    return text


def test_the_readme_snippet_runs_against_its_embedded_command() -> None:
    section = spark_section()
    command = re.search(r"tubemq-gateway embedded --topics (\S+)", section)
    assert command is not None, "the Spark section must say how to start the embedded cluster it uses"
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None
    code = snippet.group(1)
    topics = {spec.name for spec in parse_topic_specs(command.group(1))}
    used = set(re.findall(r'option\("topic", "(\w+)"\)', code))
    assert used and used <= topics, (
        f"the snippet uses topics {sorted(used - topics)} the command does not create"
    )
    assert README_MASTERS in code

    spark: Any = spark_session()
    cluster = ClusterThread(parse_topic_specs(command.group(1)), brokers=1)
    try:
        published = cluster.publish("demo", 0, 500)
        namespace: dict[str, Any] = {}
        exec(compile(code.replace(README_MASTERS, cluster.masters), str(PAGE), "exec"), namespace)
        copied = read_tubemq(spark, cluster.masters, topic="copy").collect()
        assert sorted(r.value for r in copied) == sorted(f"msg-{n}".encode() for n in range(500))
        assert len(published) == 500
    finally:
        cluster.close()
