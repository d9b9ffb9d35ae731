"""The documented examples run verbatim: README.md's Publish and Consume shell blocks (bash with -euo
pipefail, so a failing curl fails the test) and the gRPC Python examples of docs/grpc.md are extracted from
those pages and run against a gateway served on the embedded cluster (127.0.0.1, ephemeral ports), with
only ``GW`` / ``GW_GRPC`` set to its addresses, the variables the examples read. The shell blocks are
skipped only when curl is missing."""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.grpc.server import GrpcServer
from tests.support.client_tools import run_example as run
from tests.support.consumer_support import Env, environment
from tests.support.doc_blocks import runnable
from tests.support.files import ROOT
from tests.support.gateway_support import Gateway, gateway

GRPC_PAGE = ROOT / "docs" / "grpc.md"


def documents(text: str) -> list[Any]:
    """The JSON documents curl printed one after another (no separators)."""
    decoder = json.JSONDecoder()
    out, at = [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        value, at = decoder.raw_decode(text, at)
        out.append(value)
    return out


@dataclass
class Served:
    env: Env
    http: Gateway
    grpc_address: str


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with environment("demo:4") as env, gateway(env) as http:
        grpc_server = GrpcServer(http.runtime, host="127.0.0.1", port=0, grace=0.5)
        await grpc_server.start()
        try:
            yield Served(env, http, grpc_server.address)
        finally:
            await grpc_server.stop(0)


def test_the_examples_are_where_the_test_looks() -> None:
    runnable("Publish", "sh")[0]
    runnable("Consume", "sh")[0]
    assert "GW=${GW:-http://localhost:8080}" in runnable("Publish", "sh")[0]
    assert all(
        'os.environ.get("GW_GRPC", "localhost:9090")' in code
        for code in runnable("gRPC API", "python", 3, GRPC_PAGE)
    )


async def test_readme_examples_run_verbatim(served: Served, tmp_path: Path) -> None:
    """Shell (publish, consume) then Python (gRPC publish, stream, subscribe; error details) on one
    gateway, as a reader going down the README and then docs/grpc.md would."""
    if shutil.which("curl") is not None:
        await shell_examples(served, tmp_path)
    await python_example(served, tmp_path)
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed: the README's shell examples use it (the Python example ran)")


async def shell_examples(served: Served, tmp_path: Path) -> None:
    env = {"GW": served.http.url}
    published = documents(
        await run(["bash", "-euo", "pipefail", "-c", runnable("Publish", "sh")[0]], env, tmp_path)
    )
    batch, raw, topic = published
    assert [r["status"] for r in batch["results"]] == [200, 200, 200]
    assert all(isinstance(r["offset"], int) and r["offset"] >= 0 for r in batch["results"])
    assert raw["results"][0]["status"] == 200
    assert (tmp_path / "file.bin").read_bytes() == b"raw bytes"
    assert len(topic["partitions"]) == 4

    out = await run(["bash", "-euo", "pipefail", "-c", runnable("Consume", "sh")[0]], env, tmp_path)
    polled, first_commit, all_commit = documents(out[: out.index("retry:")])
    values = sorted((m["value"], m["key"] or "") for m in polled["messages"])
    assert values == sorted(
        [("hello", "customer-42"), ("hello", ""), ('{"any":"json"}', ""), ("raw bytes", "customer-42")]
    )
    assert first_commit["committed"] + len(first_commit["stale"]) >= 1
    assert all_commit["pending"] == 0
    # the stream ran for its 3 s and ended; the instance was deleted (204, no body)
    assert out[out.index("retry:") :].strip().startswith("retry:")


async def python_example(served: Served, tmp_path: Path) -> None:
    store = served.env.cluster.brokers[0].store("demo")
    expected_offset = store.max_offset  # nothing else publishes: "hello" is appended right there
    code, keyed, errors = runnable("gRPC API", "python", 3, GRPC_PAGE)
    env = {"GW_GRPC": served.grpc_address, "PYTHONPATH": str(ROOT)}
    out = await run([sys.executable, "-c", code], env, tmp_path, timeout=90.0)
    lines = out.splitlines()
    stored = re.fullmatch(r"stored in 1:demo:(\d+) at offset (\d+)", lines[0])
    assert stored is not None, lines[0]
    assert int(stored.group(2)) == expected_offset  # the broker's index offset, not an unset field
    assert lines[1] == "100 streamed messages stored"
    consumed = lines[2:]
    assert len(consumed) >= 101
    assert any(line.endswith("k1 b'hello'") for line in consumed)
    # the keyed retry loop: the second call with the same key is answered from the first, nothing stored twice
    end = store.max_offset
    published, replayed = (await run([sys.executable, "-c", keyed], env, tmp_path)).splitlines()
    assert re.fullmatch(r"published 1:demo:\d+", published), published
    assert replayed == published.replace("published", "replayed")
    assert store.max_offset == end + 28  # one message of one entry stored
    # the error-details example: an empty value is refused with the standard google.rpc details
    refused = (await run([sys.executable, "-c", errors], env, tmp_path)).splitlines()
    assert refused[0].startswith("StatusCode.INVALID_ARGUMENT ")
    assert any(line.startswith("ErrorInfo ") for line in refused[1:])
    assert any(line.startswith("BadRequest ") for line in refused[1:])
