"""Who is calling: the identity an adapter established for a request, as the service layer sees it.

The REST and gRPC adapters authenticate a caller (API key, JWT, client certificate, or nobody in open mode)
and hand the resulting :class:`Principal`, with the caller's network address, to the services as the request's
:class:`Caller`, set in one place (:func:`enter_caller`) for the duration of the request. The service layer
uses it for what is its own business and not the transport's: which principal owns a consumer instance, and
whose quota a publish spends. It never sees credentials, only the name and the attributes rules may test.

Identities of different authentication methods never collide: an API key's principal ``alice``, a JWT whose
``sub`` is ``alice`` and a certificate whose subject is ``alice`` are three callers. Two strings say who a
principal is:

* :attr:`Principal.label`: ``<method>:<name>`` (``api_key:alice``, ``jwt:alice``, ``mtls:CN=alice,O=Acme``),
  the form rules and rate-limit overrides name a principal by (a JWT's issuer is the configured one, checked
  when the token is verified) and the form logs and error messages show;
* :attr:`Principal.identity`: what ownership of consumer instances and quota buckets compare: the label,
  and for a JWT also its issuer (``jwt:alice@https://issuer.example``), so that tokens of two issuers never
  share an identity even if the gateway one day trusts several.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

__all__ = [
    "ANONYMOUS",
    "AUTH_METHODS",
    "NOBODY",
    "AuthMethod",
    "Caller",
    "Principal",
    "current_caller",
    "current_principal",
    "enter_caller",
    "leave_caller",
    "principal_scope",
]

AuthMethod = Literal["anonymous", "api_key", "jwt", "mtls"]
#: the methods an authenticated principal may have (the prefixes of :attr:`Principal.label`)
AUTH_METHODS: frozenset[str] = frozenset({"api_key", "jwt", "mtls"})

_EMPTY: Mapping[str, object] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    ``name`` is the name within its method (an API key's principal, a JWT's ``sub``, a certificate
    subject); ``method`` says how it was established; ``issuer`` is a JWT's ``iss`` (empty otherwise);
    ``roles`` are the role names rules may grant on (API key roles, a JWT's roles claim); ``scopes`` a JWT's
    OAuth scopes (``scope`` / ``scp``), which rules match in their own field, never as roles; ``claims``
    keeps the verified token claims rules may match (empty otherwise). Two principals are equal when their
    :attr:`identity`, roles and scopes are.
    """

    name: str
    method: AuthMethod
    roles: frozenset[str] = frozenset()
    claims: Mapping[str, object] = field(default_factory=lambda: _EMPTY, compare=False, hash=False)
    scopes: frozenset[str] = frozenset()
    issuer: str = field(default="", compare=False, hash=False)
    #: ``<method>:<name>``: how rules, overrides and logs name this principal
    label: str = field(init=False, compare=False, hash=False, repr=False)
    #: what ownership and quotas compare: the label, with ``@<issuer>`` for a JWT
    identity: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        label = "anonymous" if self.method == "anonymous" else f"{self.method}:{self.name}"
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "identity", f"{label}@{self.issuer}" if self.issuer else label)

    @property
    def anonymous(self) -> bool:
        return self.method == "anonymous"


#: The caller when authentication is off (open mode): every request runs as this principal.
ANONYMOUS = Principal("anonymous", "anonymous")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes the request being served: its :class:`Principal` and the network address it came from
    (the client behind a trusted proxy; None where the transport has none). :attr:`key` is whose share of
    the limits and quotas it spends."""

    principal: Principal
    address: str | None = None
    #: the principal's identity, or ``anonymous@<address>`` (``anonymous`` without an address)
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        who = self.principal
        key = who.identity if not who.anonymous or not self.address else f"{who.name}@{self.address}"
        object.__setattr__(self, "key", key)


#: no request: the anonymous principal from nowhere
NOBODY = Caller(ANONYMOUS)

_current: contextvars.ContextVar[Caller] = contextvars.ContextVar("gateway_caller", default=NOBODY)


def current_caller() -> Caller:
    """The caller of the request being served in this task (:data:`NOBODY` outside any request)."""
    return _current.get()


def current_principal() -> Principal:
    """The principal of the request being served in this task (``ANONYMOUS`` outside any request)."""
    return _current.get().principal


def enter_caller(principal: Principal, address: str | None) -> contextvars.Token[Caller]:
    """The one place the caller of a request is set: every adapter (REST, its publish
    hot path and SSE through ``gateway/api/auth.py``; gRPC through ``gateway/grpc/interceptors.py``) calls
    it once per request, before any service runs, and ``tests/security/test_caller_identity.py`` checks that
    every route and every gRPC method goes through it. Returns the token :func:`leave_caller` takes."""
    return _current.set(Caller(principal, address))


def leave_caller(token: contextvars.Token[Caller]) -> None:
    """Restore the caller from before :func:`enter_caller` (the request is over)."""
    _current.reset(token)


class principal_scope:  # lower case: used like the function it replaced, ``with principal_scope(p):``
    """Run the body as ``principal`` (from ``address``): :func:`current_caller` returns them until the block
    ends. A class rather than a ``@contextmanager`` generator: it is entered on every request, and this costs
    a fraction of a generator-based context manager."""

    __slots__ = ("_address", "_principal", "_token")

    def __init__(self, principal: Principal, address: str | None = None) -> None:
        self._principal = principal
        self._address = address
        self._token: contextvars.Token[Caller] | None = None

    def __enter__(self) -> Principal:
        self._token = enter_caller(self._principal, self._address)
        return self._principal

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            leave_caller(self._token)
            self._token = None
