"""TLS of the gateway's listeners, from the ``tls`` settings: uvicorn's options and gRPC's credentials.

The same certificate, key and client-certificate policy serve HTTP, gRPC and the admin listener.
``client_auth``: ``none`` asks for no client certificate; ``optional`` asks, verifies one that is sent
against ``client_ca_file`` and accepts a connection without; ``required`` refuses a connection without a
valid one. gRPC's Python API offers only "ask, require and verify" or "do not ask", so on the gRPC
listener ``optional`` does not ask (clients with or without a certificate get through, and no subject is
given); use ``required`` where gRPC clients must be identified by certificate.

A verified client certificate's subject reaches HTTP handlers in the ASGI TLS extension
(:mod:`gateway.api.tls_scope`) and gRPC handlers in ``context.auth_context()["x509_subject"]`` (gRPC's
own key, :data:`GRPC_SUBJECT_KEY`; an RFC 2253 string, the same text as RFC 4514 for the usual attributes;
present only for a verified certificate).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import grpc

from gateway.config import TlsSettings

__all__ = [
    "GRPC_PEM_CERT_KEY",
    "GRPC_SUBJECT_KEY",
    "TlsConfigError",
    "check_tls",
    "forwarding_ssl_context",
    "grpc_server_credentials",
    "uvicorn_tls_options",
]

#: the ``auth_context()`` key under which gRPC gives a verified client certificate's subject
GRPC_SUBJECT_KEY = "x509_subject"
#: the ``auth_context()`` key under which gRPC gives the peer's certificate (PEM)
GRPC_PEM_CERT_KEY = "x509_pem_cert"

CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(ValueError):
    """A TLS file cannot be used; the message names the setting and the file."""


def check_tls(tls: TlsSettings, forward_ca_file: Path | None = None) -> None:
    """Load the configured files once (``forward_ca_file``: ``consumers.forward_ca_file``), so that a bad
    path or key fails at startup with a clear message rather than at the first connection or forward."""
    if forward_ca_file is not None:
        try:
            ssl.create_default_context(cafile=str(forward_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"cannot use consumers.forward_ca_file {forward_ca_file}: {exc}; give a readable PEM file"
            ) from None
    if tls.cert_file is None or tls.key_file is None:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"cannot use tls.cert_file {tls.cert_file} with tls.key_file {tls.key_file}: {exc}; both must "
            "be readable PEM files and the key must match the certificate"
        ) from None
    if tls.client_ca_file is not None:
        try:
            context.load_verify_locations(cafile=tls.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"cannot use tls.client_ca_file {tls.client_ca_file}: {exc}; give a readable PEM file of CAs"
            ) from None


def uvicorn_tls_options(tls: TlsSettings) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.Config`` for these settings (empty without TLS)."""
    if tls.cert_file is None:
        return {}
    options: dict[str, Any] = {
        "ssl_certfile": str(tls.cert_file),
        "ssl_keyfile": str(tls.key_file),
        "ssl_cert_reqs": CERT_REQS[tls.client_auth],
    }
    if tls.client_ca_file is not None and tls.client_auth != "none":
        options["ssl_ca_certs"] = str(tls.client_ca_file)
    return options


def grpc_server_credentials(tls: TlsSettings) -> grpc.ServerCredentials | None:
    """gRPC server credentials for these settings (None without TLS: an insecure port)."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    roots = _read(tls.client_ca_file) if tls.client_auth != "none" and tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(_read(tls.key_file), _read(tls.cert_file))],
        root_certificates=roots,
        require_client_auth=tls.client_auth == "required",
    )


def forwarding_ssl_context(tls: TlsSettings, ca_file: Path | None) -> ssl.SSLContext:
    """The client context forwarding uses towards other replicas over https: their certificates verified
    against ``ca_file`` (``consumers.forward_ca_file``; default the system's CAs), and, when the listeners
    ask for client certificates, this replica's own certificate presented (replicas share it, so the
    client CA must accept it)."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
    if tls.client_auth != "none" and tls.cert_file is not None and tls.key_file is not None:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {path}: {exc}") from None
