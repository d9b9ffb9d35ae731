"""The Spark data source's direct mode towards a TubeMQ with TLS and authentication: options, and the backend
(plan, write, read) against an embedded cluster that demands both, without starting Spark."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.embedded.auth import ServerAuth
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.spark import backend
from gateway.spark.core import get_core
from gateway.spark.options import SourceOptions
from gateway.tubemq.wire.auth import Credentials
from tests.support.tls_support import make_pki

pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A TLS + authentication cluster on its own loop thread (the Spark core runs its own loop)."""
    pki = make_pki(tmp_path_factory.mktemp("spark-pki"), name="spark")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    auth = ServerAuth(Credentials("spark", "spark-pw"))
    cluster = EmbeddedCluster([TopicSpec("sparky", 2)], ssl=pki.server_context(), auth=auth)
    asyncio.run_coroutine_threadsafe(cluster.start(), loop).result(10)
    try:
        yield str(cluster.master_address), pki.ca
    finally:
        asyncio.run_coroutine_threadsafe(cluster.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def options(masters: str, ca: Path, password: str = "spark-pw") -> SourceOptions:
    return SourceOptions.parse(
        {
            "masters": masters,
            "topic": "sparky",
            "tls": "true",
            "tls.caFile": str(ca),
            "auth.username": "spark",
            "auth.password": password,
            "timeout": "3",
        }
    )


def test_tls_and_auth_options_parse_into_tubemq_settings(tmp_path: Path) -> None:
    parsed = SourceOptions.parse(
        {"masters": "m:8716", "topic": "t", "TLS": "true", "tls.CAFile": "/ca.pem", "tls.verify": "false"}
    )
    assert parsed.tubemq.tls.enabled and str(parsed.tubemq.tls.ca_file) == "/ca.pem"
    assert not parsed.tubemq.tls.verify and parsed.tubemq.auth.username == ""
    assert "pw" not in repr(options("m", tmp_path / "ca.pem", password="pw"))
    with pytest.raises(ValidationError, match="both username and password"):
        SourceOptions.parse({"masters": "m", "topic": "t", "auth.username": "u"})
    assert not SourceOptions.parse({"masters": "m", "topic": "t"}).tubemq.tls.enabled


def test_write_plan_and_read_over_tls_with_credentials(secured: tuple[str, Path]) -> None:
    masters, ca = secured
    opts = options(masters, ca)
    rows = [(f"v{i}".encode(),) for i in range(30)]
    assert backend.write_rows(opts, ["value"], rows) == 30
    planned = backend.plan(opts)
    assert len(planned) == 2
    values: list[bytes] = []
    for part in planned.values():
        task = part.range(part.bounds.min_offset, part.bounds.max_offset)
        for batch in backend.read_batches(opts, task):
            values += batch.column("value").to_pylist()
    assert sorted(values) == sorted(body for (body,) in rows)
    core = get_core(opts.timeout, opts.tubemq)
    assert core.pool.tls and core.pool.credentials is not None
    assert get_core(opts.timeout) is not core, "plain jobs get a core of their own"


def test_a_wrong_password_fails_the_task_with_415(secured: tuple[str, Path]) -> None:
    masters, ca = secured
    with pytest.raises(Exception, match="errCode 415"):
        backend.write_rows(options(masters, ca, password="nope"), ["value"], [(b"x",)])
