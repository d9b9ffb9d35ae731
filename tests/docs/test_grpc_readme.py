"""The grpcurl examples of docs/grpc.md (once README.md's gRPC section) work as written: each command is
parsed as grpcurl would (``-d`` JSON, service/method) and run by a reflection-driven client (reflection v1,
no generated code, proto3 JSON) against a served gateway; only the address is ours, and ``<instanceId>`` the
one just created."""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from tests.support.files import ROOT
from tests.support.grpc_support import TOPICS, Gateway, running_gateway
from tests.support.reflection_client import ReflectionClient

PAGE = ROOT / "docs" / "grpc.md"


def grpcurl_commands() -> list[list[str]]:
    """The gRPC page's grpcurl commands (indented code lines, with backslash continuations), as argv lists."""
    commands: list[list[str]] = []
    pending = ""
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if pending or text.startswith("grpcurl "):
            pending += text.removesuffix("\\") + " "
            if not text.endswith("\\"):
                commands.append(shlex.split(pending))
                pending = ""
    return commands


def test_the_readme_has_the_examples() -> None:
    commands = grpcurl_commands()
    methods = [argv[-1] for argv in commands]
    assert "tubemq.gateway.v1.GatewayService" in methods  # the list example
    for name in ("Publish", "GetTopic", "CreateConsumer", "Poll", "Commit"):
        assert f"tubemq.gateway.v1.GatewayService/{name}" in methods
    assert all(argv[:2] == ["grpcurl", "-plaintext"] for argv in commands)


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with (
        EmbeddedCluster(TOPICS, brokers=1, data_dir=tmp_path / "data") as cluster,
        running_gateway(cluster) as gateway,
    ):
        yield gateway


async def test_the_readme_grpcurl_examples_run(gw: Gateway) -> None:
    client = ReflectionClient(gw.channel, "v1")
    answers: dict[str, dict[str, object]] = {}
    for argv in grpcurl_commands():
        args = argv[2:]
        body = "{}"
        if args[0] == "-d":
            body, args = args[1], args[2:]
        address, *rest = args
        assert address == "localhost:9090", argv  # the default port of the gRPC page
        if rest[0] == "list":
            (service,) = rest[1:]
            assert service in await client.services()
            await client.resolve(service)
            assert client.pool.FindServiceByName(service).methods
            continue
        (method,) = rest
        if "<instanceId>" in body:
            body = body.replace("<instanceId>", str(answers["CreateConsumer"]["instanceId"]))
        json.loads(body)  # valid JSON as written
        answers[method.rpartition("/")[2]] = await client.call_json(method, body)
    results = answers["Publish"]["results"]
    assert isinstance(results, list) and results and "stored" in results[0]
    assert answers["GetTopic"]["topic"] == "demo"
    assert answers["Check"] == {"status": "SERVING"}
    assert set(answers) == {"Publish", "GetTopic", "CreateConsumer", "Poll", "Commit", "Check"}
