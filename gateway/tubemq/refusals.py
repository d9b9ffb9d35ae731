"""Why a TubeMQ cluster refused this client, and what to do about it: the kind of refusal and its advice, for
an authentication refusal (errCode 415) by the server's message, and for a TLS failure by OpenSSL's reason.

The messages matched are the real master's and broker's (``SimpleCertificateMasterHandler``,
``SimpleCertificateBrokerHandler``) and the alerts a Java TLS server sends (``bad_certificate`` when no
client certificate came, ``certificate_unknown`` when its issuer is not trusted).
"""

from __future__ import annotations

import ssl
from enum import Enum

__all__ = ["Refusal", "credential_hint", "credential_refusal", "tls_hint", "tls_refusal"]


class Refusal(Enum):
    """What kind of refusal a failure is; the value is the advice."""

    NO_CREDENTIALS = (
        "the cluster requires authentication and this client sent no credentials: set the TubeMQ user "
        "name and password"
    )
    CLOCK = (
        "the signed timestamp is outside the master's window (authValidTimeStampPeriodMs, 20 s by "
        "default): this host's clock and the master's differ; synchronise them (NTP)"
    )
    CREDENTIALS = (
        "the cluster refused this client's credentials; set the TubeMQ user name and password it presents"
    )
    CLIENT_CERTIFICATE = (
        "the TubeMQ node refused this client's TLS certificate (none was sent, or it is not signed by a CA "
        "in the node's trust store): give a client certificate and key the TubeMQ servers trust"
    )
    SERVER_CERTIFICATE = (
        "this client does not trust the node's certificate: give the CA file that signed the TubeMQ "
        "servers' certificates, and connect by a name the certificate carries"
    )
    NOT_TLS = "the port does not speak TLS: use the node's TLS port (master 8716, broker 8124 by default)"


#: (fragment of the server's 415 message, its kind); the first match wins, CREDENTIALS when none does
_CREDENTIAL_MESSAGES: tuple[tuple[str, Refusal], ...] = (
    ("timestamp out of effective period", Refusal.CLOCK),
    ("is Blank", Refusal.NO_CREDENTIALS),
    ("required MasterCertificateInfo", Refusal.NO_CREDENTIALS),
    ("AuthenticateInfo is null", Refusal.NO_CREDENTIALS),
)

#: OpenSSL reasons of an alert the server sent about this client's certificate (or its absence)
_CLIENT_CERT_ALERTS = frozenset(
    {
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    }
)
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"})


def credential_refusal(message: str) -> Refusal:
    """The kind of a 415 (CERTIFICATE_FAILURE) answer with ``message``."""
    for fragment, kind in _CREDENTIAL_MESSAGES:
        if fragment in message:
            return kind
    return Refusal.CREDENTIALS


def credential_hint(message: str) -> str:
    """What to do about a 415 (CERTIFICATE_FAILURE) answer with ``message``."""
    return credential_refusal(message).value


def tls_refusal(exc: BaseException) -> Refusal | None:
    """The kind of a TLS failure (None when ``exc`` is not one of those)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return Refusal.SERVER_CERTIFICATE
    if not isinstance(exc, ssl.SSLError):
        return None
    reason = getattr(exc, "reason", None) or ""
    if reason in _CLIENT_CERT_ALERTS:
        return Refusal.CLIENT_CERTIFICATE
    return Refusal.NOT_TLS if reason in _NOT_TLS else None


def tls_hint(exc: BaseException) -> str | None:
    """What to do about a TLS failure (None when ``exc`` is not one this module can explain)."""
    kind = tls_refusal(exc)
    return None if kind is None else kind.value
