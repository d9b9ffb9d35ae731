"""Building the gateway's security from ``Settings.auth``, and the per-operation admission both adapters use.

:func:`build_security` reads the keys and rules files and refuses (:class:`SecurityConfigError`, with a
message saying what to set) a required mode that nothing could satisfy. In open mode it logs a loud warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.config import AuthSettings
from gateway.security.api_keys import ApiKeyAuthenticator, load_keys
from gateway.security.authenticator import Authenticator, TokenAuthenticator
from gateway.security.credentials import Credentials
from gateway.security.operations import Operation
from gateway.security.rules import RuleSet, load_rules, parse_principal, parse_rules
from gateway.service.access import ALLOW_ALL, AccessPolicy
from gateway.service.principal import ANONYMOUS, Principal

__all__ = [
    "DEFAULT_RULES",
    "OPEN_MODE_WARNING",
    "Security",
    "SecurityConfigError",
    "build_security",
    "check_override_names",
]

log = logging.getLogger("gateway.security")

#: The rules when auth is required and no ``auth.rules_file`` is given: role ``admin`` may do everything.
DEFAULT_RULES = {"rules": [{"roles": ["admin"], "actions": ["*"], "topics": ["*"], "groups": ["*"]}]}

OPEN_MODE_WARNING = (
    "AUTHENTICATION IS OFF (auth.mode=open): anyone who can reach this gateway may publish to and consume "
    "from every topic. Fine on a laptop; anywhere else set TUBEMQ_GATEWAY_AUTH__MODE=required with "
    "auth.api_keys_file and/or auth.jwt (see docs/security.md)"
)


class SecurityConfigError(ValueError):
    """The auth settings cannot work; the message says what to set."""


@dataclass
class Security:
    """The authenticator and the access policy of one gateway process."""

    authenticator: Authenticator
    policy: AccessPolicy

    @property
    def mode(self) -> str:
        return self.authenticator.mode

    async def authenticate(self, operation: Operation, credentials: Credentials) -> Principal:
        """The principal for one call of ``operation``: ANONYMOUS for an open operation (its credentials
        are not looked at), else the authenticated caller, provided some rule allows it the operation's
        action. Raises Unauthenticated or PermissionDenied."""
        if operation.action is None:
            return ANONYMOUS
        principal = await self.authenticator.authenticate(credentials)
        if self.policy.enforcing:
            self.policy.check(principal, operation.action)
        return principal

    def admit(self, operation: Operation, principal: Principal) -> None:
        """Raise PermissionDenied unless ``principal`` may do ``operation`` on some resource."""
        if operation.action is not None and self.policy.enforcing:
            self.policy.check(principal, operation.action)

    async def close(self) -> None:
        await self.authenticator.close()


def open_security() -> Security:
    return Security(Authenticator("open"), ALLOW_ALL)


def _jwt(auth: AuthSettings) -> TokenAuthenticator | None:
    j = auth.jwt
    given = [name for name in ("issuer", "jwks_url") if getattr(j, name)]
    if not given and not j.audience:
        return None
    missing = [name for name in ("issuer", "jwks_url") if not getattr(j, name)]
    if not j.audience:
        missing.append("audience")
    if missing:
        raise SecurityConfigError(
            "auth.jwt is partly configured: also set "
            + ", ".join(f"auth.jwt.{m} (TUBEMQ_GATEWAY_AUTH__JWT__{m.upper()})" for m in missing)
        )
    from gateway.security.jwt_auth import JwtAuthenticator

    return JwtAuthenticator.from_settings(j)


def check_override_names(names: Iterable[str]) -> None:
    """``rate_limits.overrides`` name principals as rules do (``api_key:alice``, ``jwt:<subject>``,
    ``mtls:<subject>``) or ``anonymous``; raises SecurityConfigError for a bare name, saying what to write."""
    for name in names:
        if name != "anonymous":
            try:
                parse_principal(name, "rate_limits.overrides")
            except ValueError as exc:
                raise SecurityConfigError(str(exc)) from None


def build_security(auth: AuthSettings) -> Security:
    """The security ``auth`` describes; raises SecurityConfigError when it cannot work."""
    if auth.mode == "open":
        log.warning(OPEN_MODE_WARNING)
        configured = [n for n in ("api_keys_file", "rules_file") if getattr(auth, n)]
        if configured:
            log.warning("auth.mode=open: %s ignored until auth.mode=required", ", ".join(configured))
        return open_security()
    try:
        keys = ApiKeyAuthenticator(load_keys(auth.api_keys_file)) if auth.api_keys_file else None
        rules: RuleSet = load_rules(auth.rules_file) if auth.rules_file else parse_rules(DEFAULT_RULES)
    except ValueError as exc:
        raise SecurityConfigError(str(exc)) from None
    jwt = _jwt(auth)
    authenticator = Authenticator("required", api_keys=keys, jwt=jwt, mtls=auth.mtls_principal)
    if not authenticator.methods:
        raise SecurityConfigError(
            "auth.mode=required but no way to authenticate is configured: set auth.api_keys_file (create "
            "keys with `tubemq-gateway keys new`), auth.jwt.issuer + audience + jwks_url, or "
            "auth.mtls_principal with TLS client certificates"
        )
    if not auth.rules_file:
        log.warning("auth.rules_file is not set: only principals with role 'admin' are allowed anything")
    log.info(
        "authentication required",
        extra={
            "methods": authenticator.methods,
            "api_keys": len(keys) if keys is not None else 0,
            "rules": len(rules.rules),
        },
    )
    return Security(authenticator, rules)
