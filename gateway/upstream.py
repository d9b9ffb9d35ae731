"""How the gateway reaches TubeMQ: the TLS context and the credentials made from the ``tubemq`` settings.

The client core takes an ``ssl.SSLContext`` and a ``Credentials`` object (``ConnectionPool(ssl=...,
credentials=...)``); this module builds them once from ``Settings.tubemq``, failing early with a message
that names the setting when a file cannot be used.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from gateway.config import TubeMQAuthSettings, TubeMQSettings, TubeMQTLSSettings
from gateway.tubemq.errors import CertificateFailure
from gateway.tubemq.refusals import Refusal, credential_refusal, tls_refusal
from gateway.tubemq.wire import Credentials

__all__ = [
    "DEFAULT_MASTER_PORT",
    "DEFAULT_MASTER_TLS_PORT",
    "UpstreamOptions",
    "refusal_settings",
    "upstream_options",
]

DEFAULT_MASTER_PORT = 8715
DEFAULT_MASTER_TLS_PORT = 8716


@dataclass(frozen=True, slots=True)
class UpstreamOptions:
    """What every ``ConnectionPool`` of the process gets, and the master port an address without one means."""

    ssl: ssl.SSLContext | None
    server_hostname: str | None
    credentials: Credentials | None

    @property
    def master_port(self) -> int:
        return DEFAULT_MASTER_TLS_PORT if self.ssl is not None else DEFAULT_MASTER_PORT

    def pool_kwargs(self) -> dict[str, object]:
        return {"ssl": self.ssl, "server_hostname": self.server_hostname, "credentials": self.credentials}


def upstream_options(settings: TubeMQSettings) -> UpstreamOptions:
    """The TLS context (None when ``tls.enabled`` is off) and credentials (None without a user name)."""
    tls = settings.tls
    return UpstreamOptions(
        ssl=tls_context(tls) if tls.enabled else None,
        server_hostname=tls.server_hostname if tls.enabled else None,
        credentials=credentials(settings.auth),
    )


def tls_context(tls: TubeMQTLSSettings) -> ssl.SSLContext:
    """A client context: the CA file (or the system's CAs), the client certificate if any, TLS 1.2+."""
    try:
        context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"tubemq.tls.ca_file {tls.ca_file}: cannot load CA certificates ({exc}); "
            "point it at a readable PEM file"
        ) from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.cert_file is not None:
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file) if tls.key_file else None)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(
                f"tubemq.tls.cert_file {tls.cert_file} / key_file {tls.key_file}: cannot load the client "
                f"certificate ({exc}); give a PEM certificate and its unencrypted PEM key"
            ) from exc
    return context


def credentials(auth: TubeMQAuthSettings) -> Credentials | None:
    if not auth.username.strip():
        return None
    try:
        return Credentials(auth.username, auth.password.get_secret_value())
    except ValueError as exc:
        raise ValueError(f"tubemq.auth: {exc}") from None


_AUTH = (
    "tubemq.auth.username and tubemq.auth.password (TUBEMQ_GATEWAY_TUBEMQ__AUTH__USERNAME, "
    "TUBEMQ_GATEWAY_TUBEMQ__AUTH__PASSWORD)"
)
#: the gateway's settings that fix each kind of refusal (a clock is no setting)
_SETTINGS: dict[Refusal, str] = {
    Refusal.NO_CREDENTIALS: _AUTH,
    Refusal.CREDENTIALS: _AUTH,
    Refusal.CLIENT_CERTIFICATE: "tubemq.tls.cert_file and tubemq.tls.key_file "
    "(TUBEMQ_GATEWAY_TUBEMQ__TLS__CERT_FILE, TUBEMQ_GATEWAY_TUBEMQ__TLS__KEY_FILE)",
    Refusal.SERVER_CERTIFICATE: "tubemq.tls.ca_file (TUBEMQ_GATEWAY_TUBEMQ__TLS__CA_FILE), and "
    "tubemq.tls.server_hostname for the name the certificates carry",
    Refusal.NOT_TLS: "masters: list the masters' TLS port (8716 by default) when tubemq.tls.enabled is true",
}


def refusal_settings(exc: BaseException) -> str | None:
    """The gateway settings that fix the refusal behind ``exc`` (or its causes: a failed registration wraps
    the link's TLS error), e.g. to add to the error the gateway stops with; None for anything else."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, CertificateFailure):
            kind: Refusal | None = credential_refusal(current.message)
        else:
            kind = tls_refusal(current)
        if kind is not None:
            setting = _SETTINGS.get(kind)
            return None if setting is None else f"the gateway's settings for this: {setting}"
        current = current.__cause__
    return None
