"""One gateway per port: refusing to start on a port another process already serves.

The worker processes of one gateway (``serve --workers N``) share their ports through ``SO_REUSEPORT``. The
kernel lets any process of the same user join such a group, so a second gateway started on the same port
would not fail: it would quietly take a share of the connections (with another cluster behind it). Before
it binds, a gateway therefore probes each configured port with a socket that does not ask for
``SO_REUSEPORT`` (:func:`probe`): the kernel refuses it while any socket listens there (or holds the port
for workers, see :func:`reserve`), with or without ``SO_REUSEPORT``, and allows it past connections left in
``TIME_WAIT`` by an earlier run (``SO_REUSEADDR``).

:func:`reserve` is the supervisor's hold on a port: ``SO_REUSEPORT`` (its workers join it) but not
``SO_REUSEADDR``, so that another gateway's probe sees the port taken even before the workers listen.

:func:`holder` names who serves a port, when this user may see it: the process owning the listening
socket, from ``/proc/net/tcp{,6}`` and ``/proc/<pid>/fd`` (Linux; elsewhere, or for another user's process,
the port alone is named).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterable
from pathlib import Path

__all__ = ["PortInUse", "bound_socket", "check_free", "holder", "probe", "reserve"]

_LISTEN = "0A"
_PROC = Path("/proc")


class PortInUse(OSError):
    """A port this gateway is configured to serve is served by another process already."""

    def __init__(self, what: str, host: str, port: int, held_by: str | None) -> None:
        self.what = what
        self.port = port
        self.held_by = held_by
        by = f" by {held_by}" if held_by else " by another process"
        super().__init__(
            f"the {what} port {port} ({host}) is already in use{by}: stop that process or choose another "
            "port; two gateways must never share a port"
        )


def bound_socket(host: str, port: int, *, reuse_addr: bool, reuse_port: bool) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not listening) with the options asked for; raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only then
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        if reuse_addr:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host.strip("[]"), port))
    except BaseException:
        sock.close()
        raise
    return sock


def probe(what: str, host: str, port: int) -> None:
    """Raise :class:`PortInUse` when another socket serves (or holds) ``host:port``; port 0 is always free."""
    if port == 0:
        return
    try:
        bound_socket(host, port, reuse_addr=True, reuse_port=False).close()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(what, host, port, holder(port)) from None
        raise


def check_free(ports: Iterable[tuple[str, str, int]]) -> None:
    """:func:`probe` each ``(what, host, port)``."""
    for what, host, port in ports:
        probe(what, host, port)


def reserve(what: str, host: str, port: int) -> socket.socket:
    """Hold ``host:port`` for this gateway's workers (see the module docstring): a bound, not listening
    socket; raises :class:`PortInUse` when another process serves the port, OSError when it cannot bind."""
    probe(what, host, port)
    return bound_socket(host, port, reuse_addr=False, reuse_port=True)


def holder(port: int) -> str | None:
    """``pid N (command line)`` of a process of this user listening on TCP ``port``, else None."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    with contextlib.suppress(OSError):
        for entry in _PROC.iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                for fd in (entry / "fd").iterdir():
                    target = os.readlink(fd)
                    if target.startswith("socket:[") and target[8:-1] in inodes:
                        return f"pid {entry.name} ({_command(entry)})"
    return None


def _listening_inodes(port: int) -> set[str]:
    found: set[str] = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
            for line in lines:
                fields = line.split()
                if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found.add(fields[9])
    return found


def _command(entry: Path) -> str:
    try:
        raw = (entry / "cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    return text[:200] or "?"
