"""Outbound requests of push subscriptions, made safe against a hostile endpoint and a hostile definer.

* **Which endpoints** (:class:`EndpointPolicy`, from ``push.allow``): an entry is a host name
  (``hooks.example``), a suffix (``*.example.com``: its subdomains), ``*`` (any host name and any public
  address), or an IP address or CIDR network. A name must match a name entry; a literal address must lie in
  a network entry (or be public with ``*``). Whatever the name, every address it resolves to must be public
  (not private, loopback, link-local, multicast, reserved or unspecified; an IPv4-mapped IPv6 address counts
  as its IPv4 one) or lie in a network entry: a name that resolves to ``127.0.0.1`` is refused unless
  ``127.0.0.1`` is allowed explicitly.
* **Pinned address**: each new connection resolves the name once (the client's own DNS cache is off), every
  address is checked, and the connection goes to the first of them; the request's Host header and the TLS
  server name (SNI, and the certificate check) stay the endpoint's name. A DNS answer that changes between
  the check and the connection (rebinding) cannot move it elsewhere; a kept-alive connection stays with the
  address it was checked for.
* **No redirects** (a 3xx is a failed delivery), TLS verified (``push.ca_file``, else the system's CAs), no
  proxy from the environment, every request bounded in time (the subscription's ack deadline, connection
  included) and at most ``max_answer_bytes`` of an answer read.
* Secrets: the URL is logged without its query (it may carry a token), headers never.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.service.errors import InvalidInput

__all__ = [
    "DeliveryAnswer",
    "EndpointPolicy",
    "EndpointRefused",
    "Outbound",
    "Resolver",
    "resolve",
    "shown_url",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]


class EndpointRefused(Exception):
    """The endpoint (or an address its name resolves to) is not allowed by ``push.allow``."""


def shown_url(url: str) -> str:
    """The URL as logs and errors show it: scheme, host, port and path (no query, which may hold a token)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def _address(host: str) -> Address | None:
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class EndpointPolicy:
    """The parsed ``push.allow`` entries; see the module docstring."""

    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[Network, ...] = ()
    any_host: bool = False

    @classmethod
    def parse(cls, entries: Sequence[str]) -> EndpointPolicy:
        """ValueError naming an entry that is neither a host name, ``*.suffix``, ``*`` nor an address or
        network."""
        names: set[str] = set()
        suffixes: list[str] = []
        networks: list[Network] = []
        any_host = False
        for raw in entries:
            entry = raw.strip().lower()
            if entry == "*":
                any_host = True
                continue
            if not entry.endswith(".."):
                entry = entry.removesuffix(".")  # a fully qualified name's root dot
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            label = entry.removeprefix("*.")
            if not label or not all(_is_label(part) for part in label.split(".")):
                raise ValueError(
                    f"push.allow entry {raw!r} is not a host name, *.domain, * or an IP address/CIDR network"
                )
            if entry.startswith("*."):
                suffixes.append("." + label)
            else:
                names.add(label)
        return cls(frozenset(names), tuple(suffixes), tuple(networks), any_host)

    def _in_networks(self, address: Address) -> bool:
        return any(address in network for network in self.networks)

    def _address_allowed(self, address: Address) -> bool:
        return self._in_networks(address) or address.is_global

    def check_url(self, url: str) -> None:
        """The check at definition time (no DNS): InvalidInput naming ``endpoint`` when the host is not
        allowed. The addresses a name resolves to are checked at each delivery."""
        host = (urlsplit(url).hostname or "").lower().rstrip(".")
        address = _address(host)
        if address is not None:
            if self._in_networks(address) or (self.any_host and address.is_global):
                return
            raise InvalidInput(
                f"endpoint address {host} is not allowed: add it (or its network) to push.allow"
                + ("" if address.is_global else " (private, loopback and link-local addresses only by CIDR)"),
                field="endpoint",
            )
        if not (self.any_host or host in self.names or host.endswith(self.suffixes)):
            raise InvalidInput(
                f"endpoint host {host!r} is not allowed: add it to push.allow (a name, *.domain or *)",
                field="endpoint",
            )

    def check_addresses(self, host: str, addresses: Sequence[str]) -> str:
        """The address to connect to: the first of ``addresses`` once every one is allowed; EndpointRefused
        otherwise."""
        if not addresses:
            raise EndpointRefused(f"{host!r} resolved to no address")
        for text in addresses:
            address = _address(text)
            if address is None or not self._address_allowed(address):
                raise EndpointRefused(
                    f"{host!r} resolves to {text}, which push.allow does not allow (private, loopback and "
                    "link-local addresses need their network listed)"
                )
        return addresses[0]


def _is_label(part: str) -> bool:
    return 0 < len(part) <= 63 and part.isascii() and all(c.isalnum() or c in "-_" for c in part)


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to now, each once, in the resolver's order (OSError: it does not)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class _CheckedResolver(AbstractResolver):
    """The client's resolver: each new connection resolves the endpoint's name once, every address is
    checked, and the connection goes to the first of them (raises EndpointRefused otherwise)."""

    def __init__(self, policy: EndpointPolicy, resolve: Resolver) -> None:
        self._policy = policy
        self._resolve = resolve

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            addresses = await self._resolve(host, port)
        except OSError as exc:
            raise EndpointRefused(f"{host!r} does not resolve: {exc}") from None
        address = self._policy.check_addresses(host, addresses)
        checked = _address(address)
        kind = socket.AF_INET6 if isinstance(checked, ipaddress.IPv6Address) else socket.AF_INET
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": kind,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class DeliveryAnswer:
    """What one delivery got: the HTTP status (None: no answer) and, without an answer, why."""

    status: int | None
    failure: str = ""

    @property
    def acknowledged(self) -> bool:
        # A 1xx (102 Processing) is interim: the client waits on for the final answer, which decides.
        return self.status is not None and 200 <= self.status < 300


class Outbound:
    """Sends push requests to one endpoint, over a pool of connections of its own (so that a connection
    made for one subscription's name is never used for another's)."""

    def __init__(
        self,
        endpoint: str,
        policy: EndpointPolicy,
        *,
        max_connections: int,
        max_answer_bytes: int = 65536,
        verify: ssl.SSLContext | bool = True,
        resolve: Resolver = resolve,
    ) -> None:
        self._endpoint = endpoint
        self._host = (urlsplit(endpoint).hostname or "").rstrip(".")
        self._policy = policy
        self._max_answer = max_answer_bytes
        self.shown = shown_url(endpoint)
        self._resolver = _CheckedResolver(policy, resolve)
        self._verify = verify
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # made in the running loop, on first use
            connector = aiohttp.TCPConnector(
                resolver=self._resolver,
                use_dns_cache=False,  # every new connection resolves (and checks) again
                limit=self._max_connections,
                ssl=self._verify if isinstance(self._verify, ssl.SSLContext) else True,
            )
            # trust_env False: no proxy and no .netrc from the environment
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, body: bytes, headers: Mapping[str, str], timeout: float) -> DeliveryAnswer:  # noqa: ASYNC109
        """POST ``body``; the answer's status once at most ``max_answer_bytes`` of it were read, within
        ``timeout`` seconds all told. Raises EndpointRefused (nothing was sent)."""
        literal = _address(self._host)
        if literal is not None:  # the client connects to a literal address without resolving it
            self._policy.check_addresses(self._host, [str(literal)])
        try:
            async with (
                asyncio.timeout(timeout),
                self._client().post(
                    self._endpoint,
                    data=body,
                    headers=dict(headers),
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=timeout),
                ) as response,
            ):
                read = 0
                while read < self._max_answer:
                    chunk = await response.content.read(min(65536, self._max_answer - read))
                    if not chunk:
                        break
                    read += len(chunk)
                return DeliveryAnswer(response.status)
        except EndpointRefused:
            raise
        except TimeoutError:
            return DeliveryAnswer(None, "timeout")
        except aiohttp.ClientConnectorError:
            return DeliveryAnswer(None, "connect")
        except aiohttp.ClientError as exc:
            return DeliveryAnswer(None, type(exc).__name__)
