"""Gateway replicas for the REST and forwarding tests: uvicorn servers on loopback ports over the test
cluster of ``consumer_support``, and a small SSE reader."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn

from gateway.api.app import create_app
from gateway.config import ConsumerSettings, ProducerSettings, Settings, TlsSettings
from gateway.runtime import Runtime
from gateway.serve import http_config
from gateway.service.consumers import ConsumerService
from tests.support.consumer_support import Env
from tests.support.serving import bound_socket
from tests.support.waiting import bounded, eventually

if TYPE_CHECKING:  # auth_support imports this module
    from tests.support.auth_support import AuthFiles
    from tests.support.tls_support import Pki


@dataclass
class Gateway:
    """One gateway replica served by uvicorn on a loopback port."""

    url: str
    runtime: Runtime
    server: uvicorn.Server
    task: asyncio.Task[None]

    @property
    def consumers(self) -> ConsumerService:
        assert self.runtime.consumers is not None
        return self.runtime.consumers

    async def stop(self) -> None:
        """Stop serving and close the runtime (idempotent): the port stops answering, as if killed."""
        if not self.task.done():
            self.server.should_exit = True
            await bounded(self.task, "uvicorn's shutdown")
            await bounded(self.runtime.stop(), "the runtime's stop")


def peer_settings(*socks: socket.socket, secret: str = "replica-shared-secret-0123456789") -> dict[str, Any]:
    """Consumer settings letting replicas on the loopback ports of ``socks`` forward to each other."""
    return {
        "id_secret": secret,
        "forward_allow": ["127.0.0.1"],
        "forward_ports": [s.getsockname()[1] for s in socks],
    }


#: consumer settings (``consumers.*``) that make a test gateway's consumers join, fetch and rebalance in
#: fractions of a second
FAST_CONSUMERS: dict[str, float] = {
    "heartbeat_interval": 0.1,
    "empty_fetch_wait": 0.05,
    "rebalance_commit_wait": 0.3,
    "assignment_wait": 5.0,
}


@asynccontextmanager
async def gateway(
    env: Env,
    sock: socket.socket | None = None,
    *,
    tls: TlsSettings | None = None,
    auth: dict[str, Any] | None = None,
    http: dict[str, Any] | None = None,
    push: dict[str, Any] | None = None,
    idempotency: dict[str, Any] | None = None,
    **consumer_settings: Any,
) -> AsyncIterator[Gateway]:
    """Start a gateway on the test cluster, on ``sock`` or a fresh loopback socket, over TLS with ``tls``,
    with the ``auth``, ``http``, ``push`` and ``idempotency`` settings when given. The socket is bound first
    so that the advertised URL is known."""
    sock = sock if sock is not None else bound_socket()
    port = sock.getsockname()[1]
    options: dict[str, Any] = {**FAST_CONSUMERS, "sse_keepalive": 0.3, "forward_timeout": 1.0}
    options.update(consumer_settings)
    settings = Settings(
        masters=",".join(str(a) for a in env.cluster.master_addresses),
        http_host="127.0.0.1",
        http_port=port,
        producer=ProducerSettings(heartbeat_interval=0.5),
        consumers=ConsumerSettings(**options),
        tls=tls or TlsSettings(),
        auth=auth or {},
        http=http or {},
        push=push or {},
        idempotency=idempotency or {},
    )
    runtime = Runtime(settings)
    await runtime.start()
    app = create_app(runtime=runtime)
    # No log_config or log_level: uvicorn would reconfigure process-wide loggers other tests rely on.
    config = http_config(settings, app, log_level=None, lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(_started(server), timeout=5.0, what="uvicorn start")
        served = Gateway(settings.advertised_url(), runtime, server, task)
        try:
            yield served
        finally:
            await served.stop()
    finally:
        sock.close()


def _started(server: uvicorn.Server) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return server.started

    return check


@dataclass
class SseEvent:
    id: str | None
    event: str
    data: str


class SseReader:
    """Reads events (comments and retry hints skipped) from an open SSE response."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.aiter_lines()

    async def read(self, count: int, timeout: float = 10.0) -> list[SseEvent]:  # noqa: ASYNC109
        events: list[SseEvent] = []
        fields: dict[str, str] = {}
        async with asyncio.timeout(timeout):
            while len(events) < count:
                line = await anext(self._lines)
                if line == "":
                    if "data" in fields:
                        events.append(
                            SseEvent(fields.get("id"), fields.get("event", "message"), fields["data"])
                        )
                    fields = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
        return events


@asynccontextmanager
async def replica_pair(env: Env, **options: Any) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Two gateways on ``env``, on loopback ports, that forward to each other (:func:`peer_settings`), each
    started with ``options`` (:func:`gateway`'s keywords)."""
    first, second = bound_socket(), bound_socket()
    peers = peer_settings(first, second)
    async with (
        gateway(env, first, **options, **peers) as one,
        gateway(env, second, **options, **peers) as two,
    ):
        yield one, two


@asynccontextmanager
async def mtls_replicas(env: Env, pki: Pki, files: AuthFiles) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Two replicas forwarding to each other over mTLS (client certificates required, the replicas sharing
    ``pki``'s dual-use certificate), a caller's certificate subject its principal: (owner, other)."""
    tls = TlsSettings(
        cert_file=pki.dual.cert, key_file=pki.dual.key, client_ca_file=pki.ca, client_auth="required"
    )
    first, second = bound_socket(), bound_socket()
    # forward_timeout bounds the TLS handshake with the owner, served on the same event loop: on a loaded
    # machine (the suite runs in parallel workers) that can take longer than the plain replicas' 1 s
    peers = {**peer_settings(first, second), "forward_ca_file": pki.ca, "forward_timeout": 10.0}
    auth = files.auth_settings(mtls_principal=True)
    async with (
        gateway(env, first, tls=tls, auth=auth, **peers) as owner,
        gateway(env, second, tls=tls, auth=auth, **peers) as other,
    ):
        yield owner, other
