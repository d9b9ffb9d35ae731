"""Why a TubeMQ cluster refused this client, and what to do about it: the hint for an authentication refusal
(errCode 415) by the server's message, and for a TLS failure by OpenSSL's reason.

The messages matched are the real master's and broker's (``SimpleCertificateMasterHandler``,
``SimpleCertificateBrokerHandler``) and the alerts a Java TLS server sends (``bad_certificate`` when no
client certificate came, ``certificate_unknown`` when its issuer is not trusted).
"""

from __future__ import annotations

import ssl

__all__ = ["credential_hint", "tls_hint"]

#: (fragment of the server's 415 message, what to do); the first match wins
_CREDENTIAL_HINTS: tuple[tuple[str, str], ...] = (
    (
        "timestamp out of effective period",
        "the signed timestamp is outside the master's window (authValidTimeStampPeriodMs, 20 s by "
        "default): this host's clock and the master's differ; synchronise them (NTP)",
    ),
    (
        "is Blank",
        "the cluster requires authentication and this client sent no credentials: set the TubeMQ user "
        "name and password",
    ),
    (
        "required MasterCertificateInfo",
        "the cluster requires authentication and this client sent no credentials: set the TubeMQ user "
        "name and password",
    ),
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


def credential_hint(message: str) -> str | None:
    """What to do about a 415 (CERTIFICATE_FAILURE) answer with ``message`` (None: no specific advice)."""
    for fragment, hint in _CREDENTIAL_HINTS:
        if fragment in message:
            return hint
    return None


def tls_hint(exc: BaseException) -> str | None:
    """What to do about a TLS failure (None when ``exc`` is not one this module can explain)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            "this client does not trust the node's certificate: give the CA file that signed the TubeMQ "
            "servers' certificates, and connect by a name the certificate carries"
        )
    if not isinstance(exc, ssl.SSLError):
        return None
    reason = getattr(exc, "reason", None) or ""
    if reason in _CLIENT_CERT_ALERTS:
        return (
            "the TubeMQ node refused this client's TLS certificate (none was sent, or it is not signed by a "
            "CA in the node's trust store): give a client certificate and key the TubeMQ servers trust"
        )
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return "the port does not speak TLS: use the node's TLS port (master 8716, broker 8124 by default)"
    return None
