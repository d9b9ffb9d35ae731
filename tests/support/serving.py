"""Servers the tests start: a loopback port free to give one (``free_port``) or a socket bound to one
(``bound_socket``), and a uvicorn server run in a task of the test's loop until the test is done with it
(``uvicorn_serving``)."""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn

__all__ = ["bound_socket", "free_port", "server_port", "uvicorn_serving"]


#: the ports free_port draws from: below the kernel's ephemeral range (Linux's default starts at 32768), so no
#: connection's local port and no server bound to port 0 takes one between its release and its use, which the
#: suite's parallel processes (scripts/test.sh) would otherwise do now and then; above the fixed ports the
#: project and its peers use (TubeMQ's 8715/8123, the embedded command's 18715 and 18122+i, 18080)
FREE_PORTS = range(20000, 32768)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return FREE_PORTS.stop


def free_port() -> int:
    """A loopback port free now, drawn from :data:`FREE_PORTS` (bound and released: another process may still
    take it before the caller does, but no ephemeral port is handed out there); any free port where none of
    them can be had."""
    stop = min(FREE_PORTS.stop, _ephemeral_low())
    for _ in range(50 if stop > FREE_PORTS.start else 0):
        port = FREE_PORTS.start + secrets.randbelow(stop - FREE_PORTS.start)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bound_socket() -> socket.socket:
    """A TCP socket bound to a free loopback port, for a server to serve on (its port is known before)."""
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only then (else 40 ms ACK delays).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def uvicorn_serving(
    server: uvicorn.Server,
    sockets: list[socket.socket] | None = None,
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - how long the server may take to start
    force_exit: bool = False,
) -> AsyncIterator[asyncio.Task[None]]:
    """``server`` serving (on ``sockets`` when given, else where its config says) in a task of this loop,
    entered once it has started (a server that fails or takes longer than ``timeout`` seconds fails the
    test). On exit a server still running is asked to exit (at once with ``force_exit``, skipping its
    graceful waits) and awaited."""
    task = asyncio.create_task(server.serve(sockets=sockets))
    try:
        async with asyncio.timeout(timeout):
            while not server.started:
                if task.done():
                    task.result()  # its error, if it failed
                    raise AssertionError("the server stopped before it started")
                await asyncio.sleep(0.01)
        yield task
    finally:
        if not task.done():
            server.should_exit = True
            server.force_exit = force_exit
            await asyncio.wait_for(task, 20)


def server_port(server: uvicorn.Server) -> int:
    """The port a started ``server`` listens on (its first socket)."""
    return int(server.servers[0].sockets[0].getsockname()[1])
