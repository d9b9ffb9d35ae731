"""Requests that came through a reverse proxy (an ingress): the client's address and the URL it used.

:class:`ProxyHeadersMiddleware` is the app's outermost middleware. For a request whose peer is in
``http.trusted_proxies`` it runs uvicorn's own proxy-headers middleware (``X-Forwarded-For`` becomes the
client address, ``X-Forwarded-Proto`` the scheme; uvicorn's server-level copy of it is off, see
``gateway/serve.py``, so both read the same list) and marks the request trusted; from any other peer the
headers are ignored. :func:`public_base_url` then gives the base URL the client reached the gateway at, for
the URLs the API answers (``baseUrl``, ``Location``): from ``Forwarded`` (RFC 7239), else
``X-Forwarded-Proto``/``-Host``/``-Port``/``-Prefix``, else ``Host`` and the connection's scheme. Where a
header holds a list (one entry per proxy), the last entry counts: the one the trusted peer itself added.
A value that is not a plain scheme, ``host[:port]`` or path is ignored.

These URLs are only ever written into answers: nothing connects to them. Forwarding to the replica that
owns a consumer instance takes the owner from the instance id, checked against ``consumers.forward_allow``
(``gateway/api/forwarding.py``), never from these headers.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware as UvicornProxyHeaders

__all__ = [
    "TRUSTED_PEER",
    "ProxyHeadersMiddleware",
    "TrustedProxies",
    "forwarded_headers",
    "public_base_url",
    "request_base_url",
]

#: scope key set (True) on a request whose peer is a trusted proxy
TRUSTED_PEER: Final = "gateway.trusted_proxy"

#: a host name or IPv4 address, or a bracketed IPv6 address, with an optional port
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$"
)
_PREFIX = re.compile(r"^(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+$")
_SCHEMES = frozenset({"http", "https"})
_DEFAULT_PORTS = {"http": "80", "https": "443"}


class TrustedProxies:
    """Membership of peer addresses in ``http.trusted_proxies`` (IP addresses, networks, ``*``), and the
    rewrite of a request that came from one (:meth:`rewrite`)."""

    def __init__(self, entries: Sequence[str]) -> None:
        self.entries = list(entries)
        self._any = "*" in self.entries
        self._networks = [ipaddress.ip_network(e, strict=False) for e in self.entries if e != "*"]
        self._contains = lru_cache(maxsize=1024)(self._compute)
        # uvicorn's middleware (here only rewriting the scope) trusts by its own parsing of the same entries;
        # it only runs for a peer ours already trusts, so the stricter of the two decides.
        self._rewrite = UvicornProxyHeaders(_rewritten, trusted_hosts=list(self.entries))  # type: ignore[arg-type]

    async def rewrite(self, scope: Scope) -> None:
        """For a request from a trusted proxy: mark it trusted, and take the client address and scheme from
        ``X-Forwarded-For`` and ``X-Forwarded-Proto`` (uvicorn's rules)."""
        client = scope.get("client")
        if client is not None and client[0] in self:
            scope[TRUSTED_PEER] = True
            await self._rewrite(scope, _nothing, _nothing)  # type: ignore[arg-type]

    def __contains__(self, host: object) -> bool:
        if self._any:
            return True
        if not isinstance(host, str) or not host or len(host) > 64:
            return False
        return self._contains(host)

    def _compute(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self._networks)

    def __repr__(self) -> str:
        return f"<TrustedProxies {self.entries}>"


class ProxyHeadersMiddleware:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, *, trusted: Sequence[str]) -> None:
        self.app = app
        self.trusted = TrustedProxies(trusted)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            await self.trusted.rewrite(scope)
        await self.app(scope, receive, send)


async def _rewritten(scope: Scope, receive: Receive, send: Send) -> None:
    """The app behind uvicorn's middleware in :class:`TrustedProxies`: it only rewrites the scope."""


async def _nothing(*args: object) -> None:
    raise RuntimeError("not used: the proxy headers step only rewrites the scope")


def _last(values: list[str]) -> str | None:
    """The last entry of a header that may be repeated and comma-separated."""
    for value in reversed(values):
        items = [item.strip() for item in value.split(",")]
        for item in reversed(items):
            if item:
                return item
    return None


def _forwarded_element(values: list[str]) -> dict[str, str]:
    """The parameters of the last element of ``Forwarded`` (``for=..;proto=..;host=..``), names lower case."""
    element = _last(values)
    if element is None:
        return {}
    pairs: dict[str, str] = {}
    for pair in element.split(";"):
        name, sep, value = pair.partition("=")
        if sep:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            pairs[name.strip().lower()] = value
    return pairs


def _header_values(scope: Scope) -> dict[bytes, list[str]]:
    wanted = (
        b"forwarded",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-port",
        b"x-forwarded-prefix",
    )
    found: dict[bytes, list[str]] = {}
    host: str | None = None
    for name, value in scope.get("headers", ()):
        if name in wanted:
            found.setdefault(name, []).append(value.decode("latin-1"))
        elif name == b"host" and host is None:
            host = value.decode("latin-1").strip()
    if host is not None:
        found[b"host"] = [host]
    return found


def _scheme(*candidates: str | None) -> str:
    for candidate in candidates:
        if candidate is not None and candidate.lower() in _SCHEMES:
            return candidate.lower()
    return "http"


def _host(*candidates: str | None) -> str | None:
    for candidate in candidates:
        if candidate is not None and _HOST.match(candidate):
            return candidate
    return None


def public_base_url(scope: Scope) -> str | None:
    """``scheme://host[:port][/prefix]`` the client used, when the peer is a trusted proxy that sent at least
    one of the proxy headers; else None (the caller then uses the replica's advertised URL, as for a client
    that talks to the replica directly)."""
    if not scope.get(TRUSTED_PEER):
        return None
    headers = _header_values(scope)
    if all(name == b"host" for name in headers):
        return None  # no proxy header: a client talking to this replica directly
    forwarded = _forwarded_element(headers.get(b"forwarded", []))
    scheme = _scheme(
        forwarded.get("proto"), _last(headers.get(b"x-forwarded-proto", [])), scope.get("scheme")
    )
    host = _host(forwarded.get("host"), _last(headers.get(b"x-forwarded-host", [])))
    if host is not None:
        port = _last(headers.get(b"x-forwarded-port", []))
        has_port = ":" in host.rsplit("]", 1)[-1]
        valid = port is not None and port.isdigit() and 0 < int(port) < 65536
        if valid and not has_port and port != _DEFAULT_PORTS[scheme]:
            host = f"{host}:{port}"
    else:
        host = _host(_last(headers.get(b"host", [])))
    if host is None:
        return None
    prefix = _last(headers.get(b"x-forwarded-prefix", [])) or scope.get("root_path") or ""
    if prefix and not _PREFIX.match(prefix.rstrip("/") or "/"):
        prefix = ""
    return f"{scheme}://{host}{prefix.rstrip('/')}"


def request_base_url(scope: Scope) -> str | None:
    """``scheme://host[:port][/root]`` of this request as its client sent it (the connection's scheme, the
    ``Host`` header): the URL a client reached this replica at, whatever the replica's own address (behind
    ``docker run -p`` or a port-forward); None without a usable ``Host``."""
    host = _host(_header_values(scope).get(b"host", [None])[0])
    if host is None:
        return None
    scheme = _scheme(scope.get("scheme"))
    root = scope.get("root_path") or ""
    if root and not _PREFIX.match(root.rstrip("/") or "/"):
        root = ""
    return f"{scheme}://{host}{root.rstrip('/')}"


def forwarded_headers(scope: Scope) -> dict[str, str]:
    """The ``X-Forwarded-*`` headers that carry this request's public base URL to the replica a request is
    forwarded to (which believes them only when this replica is among its trusted proxies); none when the
    base URL is not known."""
    base = public_base_url(scope)
    if base is None:
        return {}
    scheme, _, rest = base.partition("://")
    host, slash, prefix = rest.partition("/")
    headers = {"x-forwarded-proto": scheme, "x-forwarded-host": host}
    if slash:
        headers["x-forwarded-prefix"] = "/" + prefix
    return headers
