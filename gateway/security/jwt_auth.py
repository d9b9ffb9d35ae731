"""JWT bearer tokens from an OIDC issuer, verified with PyJWT against the issuer's JWKS.

* The signature is checked with a key of the issuer's JSON Web Key Set (``auth.jwt.jwks_url``, fetched with
  httpx, no redirects followed). The set is cached; a token naming an unknown ``kid`` makes it fetch the set
  again, at most once per ``jwks_refresh_interval`` seconds (a flood of made-up key ids cannot turn into a
  flood of fetches), and a set older than ``jwks_max_age`` is fetched again when next needed.
* Algorithms are pinned by ``auth.jwt.algorithms`` (asymmetric only: the settings refuse ``none`` and HS*,
  so a token "signed" with the issuer's public key as an HMAC secret cannot verify). The token's ``alg``
  must also fit the key's type (RS*/PS* an RSA key, ES* an EC key, EdDSA an OKP key) and the key's own
  ``alg`` if it names one.
* ``iss`` must equal ``auth.jwt.issuer``, ``aud`` contain one of ``auth.jwt.audience``; ``exp`` is required;
  ``exp``, ``nbf`` and ``iat`` are checked with ``leeway`` seconds of clock skew.
* The principal is the ``principal_claim`` (default ``sub``) of the issuer (``jwt:<sub>``, never the API
  key principal of the same name); roles come from ``roles_claim`` only (a list, or a space-separated
  string; dots descend into objects); the OAuth ``scope`` / ``scp`` claims are the principal's scopes, which
  rules match in their own ``scopes`` field, never as roles.
* A verified token is remembered until it expires (at most ``cache_size`` tokens, the oldest dropped
  first), so a client sending the same token again costs one dictionary lookup. A key removed from the
  JWKS therefore stops working for new tokens at once, and for already verified ones when they expire.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpx
import jwt

from gateway.config import JwtSettings
from gateway.security.rules import claim_values
from gateway.service.errors import Unauthenticated, Unavailable
from gateway.service.principal import Principal

__all__ = ["JwksCache", "JwtAuthenticator"]

log = logging.getLogger("gateway.security")

#: Largest JWKS document accepted, bytes.
MAX_JWKS_BYTES = 1024 * 1024
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}


@dataclass(frozen=True, slots=True)
class _Key:
    jwk: jwt.PyJWK
    alg: object  # the key's own "alg", if it names one


def _key_type(algorithm: str) -> str | None:
    return _KEY_TYPES.get(algorithm[:2])


class JwksCache:
    """The issuer's signing keys by ``kid``; see the module docstring for when it fetches."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        refresh_interval: float = 30.0,
        max_age: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._timeout = timeout
        self._refresh_interval = refresh_interval
        self._max_age = max_age
        self._clock = clock
        self._keys: dict[str | None, _Key] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None
        self.fetches = 0

    def __repr__(self) -> str:
        return f"<JwksCache {self.url} keys={len(self._keys)} fetches={self.fetches}>"

    async def key(self, kid: str | None) -> _Key:
        """The key named ``kid`` (a token without ``kid`` needs a set of exactly one key); raises
        Unauthenticated for an unknown one, Unavailable when the set cannot be fetched at all."""
        now = self._clock()
        stale = self._fetched_at is None or now - self._fetched_at >= self._max_age
        found = self._lookup(kid)
        if found is not None and not stale:
            return found
        may_refresh = stale or self._fetched_at is None or now - self._fetched_at >= self._refresh_interval
        if may_refresh:
            await self._refresh(force=stale)
            found = self._lookup(kid)
        if found is None:
            raise Unauthenticated(
                "the JWT names a signing key the issuer does not publish (unknown kid); get a new token"
                if kid is not None
                else "the JWT has no kid and the issuer publishes several keys"
            )
        return found

    def _lookup(self, kid: str | None) -> _Key | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self, *, force: bool) -> None:
        before = self._fetched_at
        async with self._lock:
            if self._fetched_at != before:  # another task fetched while this one waited
                return
            if not force and before is not None and self._clock() - before < self._refresh_interval:
                return
            try:
                self._keys = await self._fetch()
            except (httpx.HTTPError, ValueError) as exc:
                self._fetched_at = self._clock()  # a failing issuer is asked at the refresh rate only
                log.warning("fetching the JWKS failed", extra={"url": self.url, "error": str(exc)})
                if not self._keys:
                    raise Unavailable(
                        f"cannot fetch the token issuer's keys from auth.jwt.jwks_url ({exc}); retry later",
                        retry_after=self._refresh_interval,
                    ) from None
                return
            self._fetched_at = self._clock()

    async def _fetch(self) -> dict[str | None, _Key]:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout, follow_redirects=False)
        self.fetches += 1
        response = await self._client.get(self.url, headers={"Accept": "application/json"})
        response.raise_for_status()
        if len(response.content) > MAX_JWKS_BYTES:
            raise ValueError(f"the JWKS is above {MAX_JWKS_BYTES} bytes")
        data = response.json()
        if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
            raise ValueError('the JWKS is not {"keys": [...]}')
        keys: dict[str | None, _Key] = {}
        for item in data["keys"]:
            # Public signing keys only: a symmetric ("oct") key in a key set must never verify anything.
            if not isinstance(item, dict) or item.get("kty") not in ("RSA", "EC", "OKP"):
                continue
            if item.get("use", "sig") != "sig":
                continue
            try:
                keys[item.get("kid")] = _Key(jwt.PyJWK(item), item.get("alg"))
            except jwt.PyJWTError as exc:
                log.warning("skipping a JWKS key", extra={"kid": item.get("kid"), "error": str(exc)})
        if not keys:
            raise ValueError("the JWKS holds no usable public signing key")
        log.info("fetched the JWKS", extra={"url": self.url, "keys": len(keys)})
        return keys

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _error(exc: jwt.PyJWTError) -> Unauthenticated:
    if isinstance(exc, jwt.ExpiredSignatureError):
        return Unauthenticated("the JWT has expired; get a new token from the issuer")
    if isinstance(exc, jwt.InvalidAudienceError):
        return Unauthenticated("the JWT's audience (aud) is not accepted here (auth.jwt.audience)")
    if isinstance(exc, jwt.InvalidIssuerError):
        return Unauthenticated("the JWT's issuer (iss) is not accepted here (auth.jwt.issuer)")
    if isinstance(exc, jwt.ImmatureSignatureError):
        return Unauthenticated("the JWT is not valid yet (nbf or iat in the future)")
    if isinstance(exc, jwt.InvalidSignatureError):
        return Unauthenticated("the JWT's signature does not verify with the issuer's key")
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return Unauthenticated(f"the JWT lacks the {exc.claim!r} claim")
    return Unauthenticated(f"the JWT is not valid: {exc}")


class JwtAuthenticator:
    """Verifies bearer JWTs; see the module docstring. ``clock`` is wall time (token times are)."""

    def __init__(
        self,
        jwks: JwksCache,
        *,
        issuer: str,
        audience: Sequence[str],
        algorithms: Sequence[str] = ("RS256",),
        leeway: float = 30.0,
        principal_claim: str = "sub",
        roles_claim: str | None = None,
        cache_size: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        bad = [a for a in algorithms if _key_type(a) is None]
        if bad or not algorithms:
            raise ValueError(f"algorithms {bad or list(algorithms)}: only RS*, PS*, ES*, EdDSA are accepted")
        self.jwks = jwks
        self._issuer = issuer
        self._audience = list(audience)
        self._algorithms = frozenset(algorithms)
        self._leeway = leeway
        self._principal_claim = principal_claim
        self._roles_claim = roles_claim
        self._cache: OrderedDict[str, tuple[Principal, float]] = OrderedDict()
        self._cache_size = cache_size
        self._clock = clock

    @classmethod
    def from_settings(cls, s: JwtSettings) -> JwtAuthenticator:
        assert s.issuer is not None and s.jwks_url is not None
        cache = JwksCache(
            s.jwks_url,
            timeout=s.jwks_timeout,
            refresh_interval=s.jwks_refresh_interval,
            max_age=s.jwks_max_age,
        )
        return cls(
            cache,
            issuer=s.issuer,
            audience=s.audience,
            algorithms=s.algorithms,
            leeway=s.leeway,
            principal_claim=s.principal_claim,
            roles_claim=s.roles_claim,
            cache_size=s.cache_size,
        )

    def __repr__(self) -> str:
        return f"<JwtAuthenticator iss={self._issuer} cached={len(self._cache)} {self.jwks!r}>"

    async def authenticate(self, token: str) -> Principal:
        cached = self._cache.get(token)
        if cached is not None:
            if self._clock() < cached[1] + self._leeway:
                return cached[0]
            del self._cache[token]
        principal, expires = await self._verify(token)
        self._cache[token] = (principal, expires)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return principal

    async def _verify(self, token: str) -> tuple[Principal, float]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("the bearer token is not a well-formed JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise Unauthenticated(
                f"the JWT's algorithm {alg!r} is not accepted here (auth.jwt.algorithms: "
                f"{sorted(self._algorithms)})"
            )
        if kid is not None and not isinstance(kid, str):
            raise Unauthenticated("the JWT's kid is not a string")
        key = await self.jwks.key(kid)
        if key.jwk.key_type != _key_type(alg) or key.alg not in (None, alg):
            raise Unauthenticated(f"the JWT's algorithm {alg} does not fit the issuer's key {kid!r}")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.jwk.key,
                algorithms=[alg],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise _error(exc) from None
        return self._principal(claims), float(claims["exp"])

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        name = claims.get(self._principal_claim)
        if not isinstance(name, str) or not name:
            raise Unauthenticated(f"the JWT has no {self._principal_claim!r} claim naming the caller")
        roles: set[str] = set()
        if self._roles_claim:
            for value in claim_values(claims, self._roles_claim):
                if isinstance(value, str):
                    roles.update(value.split())
        # OAuth scopes are their own rule field (``scopes``), never roles: a scope an issuer grants for its
        # own reasons ("openid admin") must not match a role rule.
        scopes: set[str] = set()
        scope = claims.get("scope")
        if isinstance(scope, str):
            scopes.update(scope.split())
        scp = claims.get("scp")
        if isinstance(scp, list):
            scopes.update(s for s in scp if isinstance(s, str))
        elif isinstance(scp, str):
            scopes.update(scp.split())
        return Principal(
            name,
            "jwt",
            roles=frozenset(roles),
            claims=MappingProxyType(dict(claims)),
            scopes=frozenset(scopes),
            issuer=str(claims.get("iss", self._issuer)),
        )

    async def close(self) -> None:
        await self.jwks.close()
