"""Client identities as TubeMQ masters and brokers expect them (§6.1, §7.1).

The server only checks that an id is non-blank and at most 1024 characters, but operators read these ids in
the master's admin pages, so we keep the Java layout and swap the Java version tag for ours:

* producer: ``{localIp}-{pid}-{nanoTime}-{rand}-py-{version}``
  (Java: ``192.0.2.2-12977-4015574237257-13999286-2.5.0-SNAPSHOT``)
* consumer: ``{group}_{localIp}-{pid}-{nanoTime}-{rand}-Pull-py-{version}`` (or ``-Push-``)

``nanoTime`` is a monotonic nanosecond reading and ``rand`` a non-negative random 31-bit int, as in Java; the
pair keeps two clients of one process apart.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import time

from gateway import __version__
from gateway.tubemq.randomness import private_random

VERSION_TAG = f"py-{__version__}"
"""What we put where the Java client writes its own version (``2.5.0-SNAPSHOT``)."""

FALLBACK_IPV4 = "127.0.0.1"
MAX_CLIENT_ID_LENGTH = 1024

# A TEST-NET-1 address: connecting a UDP socket to it only asks the kernel for a route, sending nothing.
_PROBE_ADDRESS = ("192.0.2.1", 9)
#: The id suffix's own generator (the process-wide ``random`` state is left to the host application).
_SUFFIX_RANDOM = private_random()


@functools.cache
def local_ipv4() -> str:
    """The local IPv4 address a TubeMQ client reports as ``hostName`` and ``sentAddr``.

    Like Java's ``AddressUtils.getLocalAddress`` we prefer a non-loopback address: first the source address
    the kernel would route outwards with, then the address the host name resolves to, else ``127.0.0.1``.
    Cached for the life of the process.
    """
    for candidate in (_routed_ipv4, _hostname_ipv4):
        try:
            address = candidate()
        except OSError:
            continue
        if _is_usable(address):
            return address
    return FALLBACK_IPV4


def _routed_ipv4() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(_PROBE_ADDRESS)
        return str(probe.getsockname()[0])


def _hostname_ipv4() -> str:
    return socket.gethostbyname(socket.gethostname())


def _is_usable(address: str) -> bool:
    try:
        parsed = ipaddress.IPv4Address(address)
    except ValueError:
        return False
    return not (parsed.is_loopback or parsed.is_unspecified or parsed.is_link_local)


def _unique_suffix() -> str:
    return f"{os.getpid()}-{time.monotonic_ns()}-{_SUFFIX_RANDOM.getrandbits(31)}"


def producer_id(local_ip: str | None = None) -> str:
    """A fresh producer id, e.g. ``10.0.0.9-4242-987654321-123456-py-0.1.0``."""
    return f"{local_ip or local_ipv4()}-{_unique_suffix()}-{VERSION_TAG}"


def consumer_id(group: str, local_ip: str | None = None, *, push: bool = False) -> str:
    """A fresh consumer id for ``group``, e.g. ``g1_10.0.0.9-4242-987654321-123456-Pull-py-0.1.0``.

    Raises ``ValueError`` for a blank group or one holding a character that would break the
    ``consumerId@group#...`` strings of §5.1.
    """
    if not group.strip():
        raise ValueError("consumer group must not be blank")
    if any(ch in group for ch in "@#:,"):
        raise ValueError(f"consumer group {group!r} must not contain '@', '#', ':' or ','")
    kind = "Push" if push else "Pull"
    client_id = f"{group}_{local_ip or local_ipv4()}-{_unique_suffix()}-{kind}-{VERSION_TAG}"
    if len(client_id) > MAX_CLIENT_ID_LENGTH:
        raise ValueError(f"consumer group {group!r} is too long: the client id exceeds 1024 characters")
    return client_id
