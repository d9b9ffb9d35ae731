"""The ASGI TLS extension for requests uvicorn receives over TLS.

uvicorn terminates TLS but tells the app nothing about the client's certificate. The protocol class here is
uvicorn's httptools protocol (the only parser the gateway serves with: see ``gateway/serve.py``) with one
addition: when a TLS connection is made, it reads the verified client certificate from the transport's
``ssl_object`` and wraps the app, for that connection only, so that every request's scope carries
``scope["extensions"]["tls"]`` as the ASGI TLS extension describes it:
``client_cert_name`` (the subject as an RFC 4514 string, or None without a verified certificate),
``client_cert_chain`` (the client's certificate as PEM, when there is one), ``client_cert_error`` (None),
``tls_version`` and ``cipher_suite`` (None: the ssl module does not give the suite's number),
``server_cert`` (None).

Nothing else of uvicorn's behaviour changes; plain-HTTP connections are untouched.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, cast

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["TlsHttpToolsProtocol", "rfc4514_name", "tls_extension"]

#: RFC 4514 attribute type names; other attributes are written as their dotted OID (as the RFC asks)
_SHORT_NAMES = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
#: OIDs of the other attributes the ssl module names in a certificate subject
_OIDS = {
    "emailAddress": "1.2.840.113549.1.9.1",
    "serialNumber": "2.5.4.5",
    "surname": "2.5.4.4",
    "givenName": "2.5.4.42",
    "title": "2.5.4.12",
    "initials": "2.5.4.43",
    "generationQualifier": "2.5.4.44",
    "pseudonym": "2.5.4.65",
    "dnQualifier": "2.5.4.46",
    "businessCategory": "2.5.4.15",
    "postalCode": "2.5.4.17",
    "jurisdictionCountryName": "1.3.6.1.4.1.311.60.2.1.3",
    "jurisdictionStateOrProvinceName": "1.3.6.1.4.1.311.60.2.1.2",
    "jurisdictionLocalityName": "1.3.6.1.4.1.311.60.2.1.1",
    "organizationIdentifier": "2.5.4.97",
}
_TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}

Subject = tuple[tuple[tuple[str, str], ...], ...]


def _escape(value: str) -> str:
    """RFC 4514 section 2.4: escape the special characters, a leading space or '#', a trailing space."""
    last = len(value) - 1
    return "".join(
        "\\00"
        if ch == "\0"
        else "\\" + ch
        if ch in ',+"\\<>;' or (i == 0 and ch in " #") or (i == last and ch == " ")
        else ch
        for i, ch in enumerate(value)
    )


def rfc4514_name(subject: Subject) -> str:
    """An ``ssl`` ``getpeercert()["subject"]`` (RDNs in certificate order) as an RFC 4514 string (RDNs in
    reverse order, ``CN=alice,O=Example``)."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append(
            "+".join(
                f"{_SHORT_NAMES.get(kind) or _OIDS.get(kind, kind)}={_escape(value)}" for kind, value in rdn
            )
        )
    return ",".join(rdns)


def tls_extension(ssl_object: ssl.SSLObject | ssl.SSLSocket) -> dict[str, Any]:
    """The ASGI ``tls`` extension for one TLS connection (see the module docstring)."""
    # getpeercert() returns the parsed certificate only when it was verified against the client CA.
    peer = ssl_object.getpeercert()
    subject = peer.get("subject") if peer else None
    name = rfc4514_name(cast(Subject, subject)) if isinstance(subject, tuple) and subject else None
    der = ssl_object.getpeercert(binary_form=True) if name is not None else None
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": name,
        "client_cert_error": None,
        "tls_version": _TLS_VERSIONS.get(ssl_object.version() or ""),
        "cipher_suite": None,
    }


def _with_tls(app: ASGIApp, extension: dict[str, Any]) -> ASGIApp:
    async def tls_app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope["extensions"] = {**(scope.get("extensions") or {}), "tls": extension}
        await app(scope, receive, send)

    return tls_app


class TlsHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, adding the TLS extension to the scopes of a TLS connection
    (``tls_extension``: the connection's, for a request answered below ASGI: ``direct_protocol.py``)."""

    tls_extension: dict[str, Any] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self.tls_extension = tls_extension(ssl_object)
            self.app = _with_tls(self.app, self.tls_extension)
