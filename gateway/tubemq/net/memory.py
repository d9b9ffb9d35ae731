"""An in-process network: :class:`MemoryNetwork`, where a TubeMQ client and TubeMQ servers of one event loop
talk through in-memory streams instead of sockets.

Its two methods take what asyncio's own do, so that each side plugs it in where it would open a socket:
``create_connection`` is :meth:`asyncio.loop.create_connection` (a :class:`~gateway.tubemq.net.link.Link`'s
``connector``, a :class:`~gateway.tubemq.net.pool.ConnectionPool`'s), ``start_server`` is
:func:`asyncio.start_server` (the embedded cluster's ``start_server``). The frames that cross are the real
ones, encoded and decoded by the real code on both sides; only the socket is missing, so a test of the client
core against the embedded master and brokers needs no port, no kernel buffer and no loopback round trip.

Addresses are the network's own: a server listens on any ``host:port`` (port 0 takes the next free one), a
connection to an address nobody listens on is refused (``ConnectionRefusedError``), as on a host. The streams
(:class:`~gateway.tubemq.net.memory_transport.MemoryTransport`) keep a socket's order and flow control. There
is no TLS: an SSL context is refused.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import ssl as _ssl
from collections.abc import Awaitable, Callable

from gateway.tubemq.net.memory_transport import MemoryTransport

__all__ = ["MemoryNetwork"]

ClientConnected = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None] | None]

_STREAM_LIMIT = 64 * 1024  # asyncio.start_server's default
_FIRST_PORT = 1024


class MemoryNetwork:
    """Listeners by ``(host, port)`` and the streams between them and their clients (see the module)."""

    def __init__(self) -> None:
        self._listeners: dict[tuple[str, int], tuple[ClientConnected, int]] = {}
        self._ports = itertools.count(_FIRST_PORT)
        self._client_ports = itertools.count(_FIRST_PORT)
        self.connections = 0
        """Streams opened so far."""

    def __repr__(self) -> str:
        listening = sorted(f"{host}:{port}" for host, port in self._listeners)
        return f"<MemoryNetwork listening={listening} connections={self.connections}>"

    async def start_server(
        self,
        client_connected_cb: ClientConnected,
        host: str,
        port: int = 0,
        *,
        ssl: _ssl.SSLContext | None = None,
        limit: int = _STREAM_LIMIT,
    ) -> tuple[_Listener, int]:
        """Listen on ``host:port`` as :func:`asyncio.start_server` would, each accepted stream handed to
        ``client_connected_cb`` as a reader and a writer; returns the listener (``close`` stops listening,
        the accepted streams stay, as a closed server's do) and the port. Raises ``OSError``
        (``EADDRINUSE``) when the address is taken."""
        _refuse_tls(ssl)
        if port == 0:
            port = next(p for p in self._ports if (host, p) not in self._listeners)
        key = (host, port)
        if key in self._listeners:
            raise OSError(errno.EADDRINUSE, f"address already in use: {host}:{port}")
        entry = (client_connected_cb, limit)
        self._listeners[key] = entry
        return _Listener(self._listeners, key, entry), port

    async def create_connection(
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str,
        port: int,
        *,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """Open a stream to the server listening on ``host:port`` as
        :meth:`asyncio.loop.create_connection` would; ``ConnectionRefusedError`` when none listens."""
        _refuse_tls(ssl)
        listener = self._listeners.get((host, port))
        if listener is None:
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"Connect call failed ({host!r}, {port})")
        client_connected_cb, limit = listener
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        server_side = asyncio.StreamReaderProtocol(reader, client_connected_cb, loop=loop)
        client_side = protocol_factory()
        client_address = ("memory-client", next(self._client_ports))
        client = MemoryTransport(loop, client_side, client_address, (host, port))
        server = MemoryTransport(loop, server_side, (host, port), client_address)
        MemoryTransport.pair(client, server)
        self.connections += 1
        server_side.connection_made(server)
        client_side.connection_made(client)
        return client, client_side


class _Listener:
    """A listening address of the network; ``close`` frees it."""

    def __init__(
        self,
        listeners: dict[tuple[str, int], tuple[ClientConnected, int]],
        key: tuple[str, int],
        entry: tuple[ClientConnected, int],
    ) -> None:
        self._listeners, self._key, self._entry = listeners, key, entry

    def close(self) -> None:
        if self._listeners.get(self._key) is self._entry:
            del self._listeners[self._key]

    async def wait_closed(self) -> None:
        return None


def _refuse_tls(ssl: _ssl.SSLContext | None) -> None:
    if ssl is not None:
        raise ValueError("the in-memory network carries no TLS: test TLS over sockets")
