"""The caller of every request is set in one place (#28 item 4): ``gateway.service.principal.enter_caller``.

Every entry point is enumerated here: each route of the app (``rest_operations``: the OpenAPI document's
operations and every other route), the publish steps (``gateway/api/publish_steps.py``), and each method of
the gRPC service of ``proto/tubemq/gateway/v1/gateway.proto``. Each request comes from an address of its
own; the test fails when a request did not enter its caller (principal and that address), or when anything
in the request's task read the caller before it was entered or read another one (a new entry point that
forgets it would put every anonymous client in one bucket of the limits and quotas).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
import pytest

from gateway.api import publish_steps
from gateway.api.app import create_app
from gateway.api.auth import rest_operations
from gateway.embedded.cluster import EmbeddedCluster
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service import principal as principal_module
from gateway.service.principal import NOBODY, Caller, current_caller
from tests.support.grpc_support import TOPICS, gateway_settings, running_gateway


@dataclass
class Seen:
    """What one task did with the caller: the callers it entered, and those it read."""

    entered: list[Caller] = field(default_factory=list)
    read: list[Caller] = field(default_factory=list)


class Recording:
    """Stands in for the caller's context variable: records, per task, every caller entered and read."""

    def __init__(self, var: contextvars.ContextVar[Caller]) -> None:
        self._var = var
        self.tasks: dict[object, Seen] = {}  # by task (held: an id could be reused)

    def _seen(self) -> Seen:
        task = asyncio.current_task()
        return self.tasks.setdefault(task, Seen())

    def get(self) -> Caller:
        value = self._var.get()
        self._seen().read.append(value)
        return value

    def set(self, value: Caller) -> contextvars.Token[Caller]:
        self._seen().entered.append(value)
        return self._var.set(value)

    def reset(self, token: contextvars.Token[Caller]) -> None:
        self._var.reset(token)

    def with_address(self, address: str) -> list[Seen]:
        return [seen for seen in self.tasks.values() if any(c.address == address for c in seen.entered)]


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recording]:
    spy = Recording(principal_module._current)
    monkeypatch.setattr(principal_module, "_current", spy)
    yield spy


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=1) as c:
        yield c


_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")
_VALUES = {"topic": "demo", "group": "g1", "instance_id": "i-0000", "path": "x"}


def _concrete(path: str) -> str:
    return _PARAM.sub(lambda m: _VALUES.get(m[1], "x"), path)


def _check(recording: Recording, address: str, what: str) -> None:
    """The request from ``address`` entered its caller once, and its task read no other caller."""
    tasks = recording.with_address(address)
    assert tasks, f"{what}: no caller was entered for it (gateway.service.principal.enter_caller)"
    for seen in tasks:
        assert [c.address for c in seen.entered] == [address], f"{what}: entered {seen.entered}"
        strays = [c for c in seen.read if c is NOBODY or c.address != address]
        assert not strays, f"{what}: read a caller that is not its own: {strays}"
        assert seen.entered[0].key == f"anonymous@{address}", what


async def test_every_rest_route_and_the_publish_steps_enter_the_caller(
    cluster: EmbeddedCluster, recording: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.runtime import Runtime

    runtime = Runtime(gateway_settings(cluster))
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        publishes: list[Caller] = []
        answer = publish_steps.respond

        async def publish_seen(topic: str, *args: Any) -> Any:
            publishes.append(current_caller())
            return await answer(topic, *args)

        monkeypatch.setattr(publish_steps, "respond", publish_seen)
        operations = rest_operations(app)
        assert len(operations) > 20  # the enumeration found the app's routes
        for n, op in enumerate(operations):
            address = f"10.0.{n // 250}.{n % 250 + 1}"
            transport = httpx.ASGITransport(app=app, client=(address, 40000))
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
                body = json.dumps({"messages": [{"value": "a"}]}) if op.method == "POST" else None
                headers = {"content-type": "application/json"} if body is not None else {}
                sent = http.request(op.method, _concrete(op.path), content=body, headers=headers)
                await asyncio.wait_for(asyncio.create_task(sent), 30)  # a task of its own, as a server's
            _check(recording, address, f"{op.method} {op.path}")
        # the publish route took the publish steps, as the caller it entered
        assert [c.address for c in publishes] == [
            f"10.0.{n // 250}.{n % 250 + 1}"
            for n, op in enumerate(operations)
            if (op.method, op.path) == ("POST", publish_steps.PUBLISH_PATH)
        ]
    finally:
        await runtime.stop()


def _grpc_methods() -> list[tuple[str, Any, bool, bool]]:
    """Every method of the proto's service: (full path, request class, client streams, server streams)."""
    found = []
    for service in pb.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            request = getattr(pb, method.input_type.name)
            path = f"/{service.full_name}/{method.name}"
            found.append((path, request, method.client_streaming, method.server_streaming))
    return found


async def _call(
    channel: grpc.aio.Channel, path: str, request: Any, streams_in: bool, streams_out: bool
) -> None:
    def identity(data: bytes) -> bytes:
        return data

    message = request().SerializeToString()
    try:
        if streams_in:

            async def one() -> AsyncIterator[bytes]:
                yield message

            if streams_out:
                call = channel.stream_stream(path, identity, identity)(one(), timeout=5)
                async for _ in call:
                    break
                call.cancel()
            else:
                await channel.stream_unary(path, identity, identity)(one(), timeout=5)
        elif streams_out:
            call = channel.unary_stream(path, identity, identity)(message, timeout=5)
            async for _ in call:
                break
            call.cancel()
        else:
            await channel.unary_unary(path, identity, identity)(message, timeout=5)
    except grpc.aio.AioRpcError:
        pass  # an empty request is mostly refused: what counts is that the caller was entered first


async def test_every_grpc_method_enters_the_caller(cluster: EmbeddedCluster, recording: Recording) -> None:
    methods = _grpc_methods()
    assert len(methods) >= 10
    async with running_gateway(cluster) as gw:
        for path, request, streams_in, streams_out in methods:
            recording.tasks.clear()
            await _call(gw.channel, path, request, streams_in, streams_out)
            await asyncio.sleep(0.05)  # the server's task has finished its call
            _check(recording, "127.0.0.1", path)
