"""The interceptor's per-call shortcuts (issue #26) keep what a call sees.

``GatewayInterceptor`` remembers each peer's host (one parse per connection, not per call) and enters a call's
caller without awaiting anything when nothing is left to check; these tests hold the caller's address to the
peer's own host whatever the cache holds, and the one-event-per-method ``GrpcCallStarted`` to the method and
kind of the call.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from gateway.grpc import late_auth
from gateway.grpc.convert import peer_host
from gateway.grpc.interceptors import GatewayInterceptor
from gateway.observability.grpc_events import GrpcCallFinished, GrpcCallStarted
from gateway.service.principal import current_caller
from gateway.tubemq.events import EventBus

METHOD = "/tubemq.gateway.v1.GatewayService/GetTopic"
#: peers as grpc names them (strings only: no traffic), two of them on one host
PEERS = (
    "ipv4:127.0.0.7:5123",
    "ipv6:[::1]:5124",
    "ipv4:127.0.0.8:5123",
    "unix:/tmp/sock",
    "ipv4:127.0.0.7:6000",
)


class _Context:
    def __init__(self, peer: str) -> None:
        self._peer = peer
        self.trailers: Any = None

    def peer(self) -> str:
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailers = metadata

    def code(self) -> None:
        return None


class _Details:
    method = METHOD
    invocation_metadata = ()


async def _call(interceptor: GatewayInterceptor, peer: str) -> str | None:
    """The address of the caller the call ran as."""
    seen: list[str | None] = []

    async def behavior(request: Any, context: Any) -> bytes:
        seen.append(current_caller().address)
        return b""

    async def continuation(details: Any) -> Any:
        return handler

    handler = grpc.unary_unary_rpc_method_handler(behavior)

    async def one() -> None:
        wrapped = await interceptor.intercept_service(continuation, _Details())
        await wrapped.unary_unary(b"", _Context(peer))

    await asyncio.create_task(one())  # each call runs in a task of its own, as in grpc.aio
    return seen[0]


@pytest.mark.parametrize("cache", [1, 2, 4096])
async def test_each_call_runs_as_its_own_peers_host_whatever_the_cache_holds(
    cache: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(late_auth, "_MAX_PEERS", cache)
    interceptor = GatewayInterceptor()
    for _ in range(2):  # the second round reads the remembered hosts
        for peer in PEERS:
            assert await _call(interceptor, peer) == peer_host(peer), peer
    assert len(interceptor._callers._hosts) <= cache


async def test_the_started_and_finished_events_name_the_call() -> None:
    events = EventBus()
    got: list[object] = []
    events.subscribe(got.append)
    interceptor = GatewayInterceptor(events=events)
    for peer in PEERS[:2]:
        await _call(interceptor, peer)
    started = [e for e in got if isinstance(e, GrpcCallStarted)]
    finished = [e for e in got if isinstance(e, GrpcCallFinished)]
    assert started == [GrpcCallStarted(METHOD, "unary")] * 2
    assert [(e.method, e.code, e.grpc_type) for e in finished] == [(METHOD, "OK", "unary")] * 2
