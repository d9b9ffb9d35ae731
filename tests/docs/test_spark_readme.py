"""The Spark page (docs/spark.md, once the README's Spark section) runs verbatim (issue #15, item 13): its
embedded command creates every topic its snippet reads or writes, and the snippet, run as written against
that cluster, copies the messages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded.topics import parse_topic_specs
from tests.support.files import ROOT
from tests.support.spark_support import ClusterThread, read_tubemq, spark_session

pytestmark = pytest.mark.spark

PAGE = ROOT / "docs" / "spark.md"
README_MASTERS = "127.0.0.1:18715"  # the embedded command's master; the test's cluster listens elsewhere


def spark_section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert text.startswith("# Spark\n"), "docs/spark.md is the Spark page"
    return text


def test_the_readme_snippet_runs_against_its_embedded_command() -> None:
    section = spark_section()
    command = re.search(r"tubemq-gateway embedded --embedded-topics (\S+)", section)
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


#: appended to the page's snippet: what the job copied, read back in the same Spark session
COPIED = """
copied = (spark.read.format("tubemq").option("masters", "127.0.0.1:18715").option("topic", "copy")
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
print("copied", sorted(row.value.decode() for row in copied.collect()))
"""


def test_the_page_runs_its_job_without_an_activated_virtualenv(tmp_path: Path) -> None:
    """The page's commands as a newcomer runs them in a shell: no virtualenv activated, only the system's
    directories on PATH (where ``python3`` lacks the package), the virtualenv at ``.venv`` of the directory
    the commands run in, the snippet saved as ``job.py``."""
    section = spark_section()
    lines = re.findall(r"^    (\S.*job\.py)$", section, re.M)
    assert lines, "the Spark page must say how to run the snippet (saved as job.py)"
    (run,) = lines
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None
    command = re.search(r"tubemq-gateway embedded --embedded-topics (\S+)", section)
    assert command is not None
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    (tmp_path / ".venv").symlink_to(sys.prefix)
    cluster = ClusterThread(parse_topic_specs(command.group(1)), brokers=1)
    try:
        cluster.publish("demo", 0, 50)
        job = (snippet.group(1) + COPIED).replace(README_MASTERS, cluster.masters)
        (tmp_path / "job.py").write_text(job, encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), "LANG": "C.UTF-8"}
        done = subprocess.run(
            ["bash", "-c", run], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        cluster.close()
    assert done.returncode == 0, f"{run}: exit {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    assert f"copied {sorted(f'msg-{n}' for n in range(50))}" in done.stdout, done.stdout
