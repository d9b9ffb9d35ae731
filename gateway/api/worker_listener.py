"""A worker process's private listener (``serve --workers N``) and the replica-wide ``/metrics``.

Each worker also serves the app on a unix socket of its own in the replica's private directory (mode 0700, so
only this user reaches it): siblings forward consumer requests there (``gateway/api/forwarding.py``) and read
the worker's own metrics from :data:`OWN_METRICS_PATH`, which only this listener serves, and only to a
request carrying the replica's worker token (:func:`worker_token`, derived from the instance id secret the
workers share; without it the path is answered as any unknown one, after authentication). A forwarded
request's ``X-TubeMQ-Client-Cert`` (the verified client certificate's subject, set by the sibling's
forwarder) becomes the ASGI TLS extension here, as if the client's certificate had been verified on this
connection; nothing on the public listeners reads that header. ``/metrics`` on any worker merges every
worker's metrics (:mod:`gateway.observability.worker_merge`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging

import httpx
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from gateway.api.forwarding import CLIENT_CERT_HEADER, PRIVATE_LISTENER
from gateway.api.proxy import TRUSTED_PEER
from gateway.observability.metrics import CONTENT_TYPE_LATEST, GatewayMetrics
from gateway.observability.worker_merge import merge_worker_metrics
from gateway.workers.context import WorkerContext

__all__ = [
    "OWN_METRICS_PATH",
    "WORKER_TOKEN_HEADER",
    "PrivateApp",
    "private_app",
    "replica_metrics",
    "worker_token",
]

log = logging.getLogger("gateway.workers")

#: this worker's own metrics, on its private listener only
OWN_METRICS_PATH = "/_worker/metrics"
#: seconds a scrape waits for a sibling's metrics
SIBLING_SCRAPE_TIMEOUT = 5.0
#: the header a sibling's metrics scrape carries :func:`worker_token` in
WORKER_TOKEN_HEADER = "x-tubemq-worker-token"


def worker_token(secret: str) -> str:
    """The token sibling workers show each other for :data:`OWN_METRICS_PATH`: an HMAC of the instance id
    secret the replica's workers share (``consumers.id_secret``, filled in by the supervisor when empty)."""
    return hmac.new(secret.encode(), b"tubemq-gateway worker metrics", hashlib.sha256).hexdigest()


def _token_ok(scope: Scope, expected: bytes) -> bool:
    given = [value for name, value in scope["headers"] if name == WORKER_TOKEN_HEADER.encode()]
    return len(given) == 1 and hmac.compare_digest(given[0], expected)


class PrivateApp:
    """The private listener's app: ``app``, plus this worker's own metrics at :data:`OWN_METRICS_PATH` for
    requests with the worker token. A request answered below ASGI (``gateway/api/direct_protocol.py``) takes
    the scope of :meth:`prepare` into ``app``'s direct way."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def _expected(self) -> bytes:
        return worker_token(self.app.state.runtime.settings.consumers.id_secret).encode()

    @staticmethod
    def prepare(scope: Scope) -> Scope:
        """An HTTP request's scope as ``app`` sees it on this listener."""
        scope = _with_forwarded_cert(scope)
        # Only sibling workers reach this listener: the public URL a sibling worked out and sends on
        # (X-Forwarded-*, gateway/api/proxy.py) is believed like a trusted proxy's, and so is the worker hop
        # header (gateway/api/forwarding.py).
        scope[TRUSTED_PEER] = True
        scope[PRIVATE_LISTENER] = True
        return scope

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = self.prepare(scope)
            if scope["path"] == OWN_METRICS_PATH and _token_ok(scope, self._expected()):
                metrics: GatewayMetrics = self.app.state.metrics
                body = metrics.render()
                headers = [
                    (b"content-type", CONTENT_TYPE_LATEST.encode()),
                    (b"content-length", b"%d" % len(body)),
                ]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def private_app(app: FastAPI) -> PrivateApp:
    """The private listener's app (:class:`PrivateApp`) around ``app``."""
    return PrivateApp(app)


def _with_forwarded_cert(scope: Scope) -> Scope:
    """``scope`` without the forwarded certificate header, with the TLS extension it describes (if valid)."""
    header = CLIENT_CERT_HEADER.encode()
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    if not any(name == header for name, _ in raw):
        return scope
    values = [value for name, value in raw if name == header]
    scope = {**scope, "headers": [(name, value) for name, value in raw if name != header]}
    try:
        subject = base64.urlsafe_b64decode(values[0]).decode("utf-8") if len(values) == 1 else ""
    except (ValueError, UnicodeDecodeError):
        subject = ""
    if subject:
        extensions = dict(scope.get("extensions") or {})
        extensions["tls"] = {**(extensions.get("tls") or {}), "client_cert_name": subject}
        scope["extensions"] = extensions
    return scope


async def replica_metrics(own: GatewayMetrics, worker: WorkerContext, secret: str) -> bytes:
    """Every worker's metrics (this one's and its siblings', each labelled ``worker``), merged; ``secret``:
    the instance id secret the workers share (see :func:`worker_token`)."""
    siblings = worker.siblings()
    token = worker_token(secret)
    texts = await asyncio.gather(*(_scrape(i, path, token) for i, path in siblings.items()))
    expositions = [(worker.index, own.render().decode()), *zip(siblings, texts, strict=True)]
    expositions.sort(key=lambda item: item[0])
    return await asyncio.to_thread(merge_worker_metrics, expositions)


async def _scrape(index: int, path: str, token: str) -> str | None:
    transport = httpx.AsyncHTTPTransport(uds=path)
    try:
        async with httpx.AsyncClient(
            transport=transport, trust_env=False, timeout=SIBLING_SCRAPE_TIMEOUT
        ) as c:
            answer = await c.get(
                f"http://worker-{index}{OWN_METRICS_PATH}", headers={WORKER_TOKEN_HEADER: token}
            )
            answer.raise_for_status()
            return answer.text
    except httpx.HTTPError as exc:
        log.warning(
            "a worker process did not answer the metrics scrape", extra={"worker": index, "error": repr(exc)}
        )
        return None
