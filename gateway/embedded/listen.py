"""Where an embedded server listens: a TCP socket by default (:func:`tcp_server`), or any ``StartServer``
taking :func:`asyncio.start_server`'s arguments (the client core's in-memory network, so that a test runs the
real master and brokers without a socket). The embedded cluster hands one ``StartServer`` to every server it
starts, RPC and web alike."""

from __future__ import annotations

import asyncio
import ssl as _ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

__all__ = ["ClientConnected", "Listening", "StartServer", "tcp_server"]

#: what a server does with each accepted stream (``asyncio.start_server``'s ``client_connected_cb``)
ClientConnected = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

_STREAM_LIMIT = 64 * 1024  # asyncio.start_server's default


class Listening(Protocol):
    """A listener: ``close`` stops accepting (accepted streams stay), ``wait_closed`` waits for it."""

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class StartServer(Protocol):
    """Listen on ``host:port`` (0: any free port), handing each accepted stream to ``client_connected_cb``;
    returns the listener and the port it took."""

    async def __call__(
        self,
        client_connected_cb: ClientConnected,
        host: str,
        port: int = 0,
        *,
        ssl: _ssl.SSLContext | None = None,
        limit: int = _STREAM_LIMIT,
    ) -> tuple[Listening, int]: ...


async def tcp_server(
    client_connected_cb: ClientConnected,
    host: str,
    port: int = 0,
    *,
    ssl: _ssl.SSLContext | None = None,
    limit: int = _STREAM_LIMIT,
) -> tuple[Listening, int]:
    """Listen on a TCP socket (TLS with ``ssl``): :func:`asyncio.start_server`."""
    server = await asyncio.start_server(client_connected_cb, host, port, ssl=ssl, limit=limit)
    return server, int(server.sockets[0].getsockname()[1])
