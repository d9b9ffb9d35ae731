"""``python -m gateway.healthcheck``: the container image's HEALTHCHECK (liveness). Exits 0 when the gateway
of this machine answers ``GET /healthz`` with 200, else 1 with the reason on standard error.

It reads the settings as ``serve`` does from the environment (the image configures ``serve`` that way) and
asks the listener they describe: the admin listener when ``admin.port`` is set (it asks for no client
certificate), else the HTTP listener; over TLS when ``tls.cert_file`` is set, without checking the
certificate (the check talks to its own machine over loopback, and a pod's certificate rarely names
127.0.0.1); with ``tls.client_auth`` ``required`` and no admin listener it presents the server's own
certificate, which the client CAs must then accept (else set ``admin.port``). A wildcard listen address is
reached at the loopback address of its family.
"""

from __future__ import annotations

import ssl
import sys
import urllib.error
import urllib.request

from gateway.config import Settings

TIMEOUT = 2.0


def health_url(settings: Settings) -> str:
    """The /healthz URL of the listener ``settings`` describe, as reached from the same machine."""
    admin = settings.admin.port is not None
    host = (settings.admin.host or settings.http_host) if admin else settings.http_host
    port = settings.admin.port if settings.admin.port is not None else settings.http_port
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if settings.tls.enabled else 'http'}://{host}:{port}/healthz"


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """The client side of the check's TLS (None without TLS)."""
    tls = settings.tls
    if not tls.enabled:
        return None
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if tls.client_auth == "required" and settings.admin.port is None and tls.cert_file is not None:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


def main() -> int:
    try:
        settings = Settings()
        url = health_url(settings)
        context = tls_context(settings)
    except (ValueError, OSError, ssl.SSLError) as exc:
        print(f"healthcheck: the settings cannot be read: {exc}", file=sys.stderr)
        return 1
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT, context=context) as answer:
            status: int = answer.status
    except (urllib.error.URLError, OSError) as exc:
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"healthcheck: {url} answered {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
