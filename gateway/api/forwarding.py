"""Forwarding requests for consumer instances owned by another gateway replica.

An instance lives in one replica (its id names the replica's advertised URL). A request that lands elsewhere
is sent on to the owner with httpx and the owner's answer is passed back unchanged: status, body and the
headers that matter (hop-by-hop headers are dropped); a stream (SSE) is relayed chunk by chunk as it comes.

Failures, seen from the client:

* the owner cannot be reached (refused, reset, unknown host, connect timeout) -> 410 Gone, with the error body
  of every other 410: the instance is lost with its replica, create a new one;
* the owner accepted the request but did not answer in time -> 503 with Retry-After (the owner is alive, the
  instance may be too).

A forwarded request carries ``X-TubeMQ-Forwarded-By``; a replica never forwards such a request again, so two
replicas that disagree about an owner cannot bounce a request between them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from gateway.service.errors import Gone, Unavailable

__all__ = ["FORWARDED_HEADER", "Forwarder"]

FORWARDED_HEADER = "x-tubemq-forwarded-by"

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_NOT_RETURNED = _HOP_BY_HOP | {"date", "server"}
_UNREACHABLE = (httpx.ConnectError, httpx.ConnectTimeout)
_BROKEN = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class Forwarder:
    """Sends requests on to owner replicas over one shared httpx client.

    ``timeout`` (seconds) bounds connecting to the owner and, added to ``extra_wait`` of a call (a long
    poll's own timeout), waiting for its answer.
    """

    def __init__(self, self_url: str, timeout: float = 2.0, client: httpx.AsyncClient | None = None) -> None:
        self.self_url = self_url
        self.timeout = timeout
        self._client = client or httpx.AsyncClient(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64), trust_env=False
        )

    def __repr__(self) -> str:
        return f"<Forwarder from {self.self_url} timeout={self.timeout:g}s>"

    async def close(self) -> None:
        await self._client.aclose()

    @staticmethod
    def was_forwarded(request: Request) -> bool:
        return FORWARDED_HEADER in request.headers

    async def forward(self, request: Request, owner_url: str, *, extra_wait: float = 0.0) -> Response:
        """Relay ``request`` to the same path on ``owner_url`` and return the owner's answer."""
        limits = httpx.Timeout(self.timeout + extra_wait, connect=self.timeout)
        answer = await self._send(request, owner_url, limits, stream=False)
        return Response(answer.content, answer.status_code, headers=_returned_headers(answer))

    async def stream(self, request: Request, owner_url: str) -> Response:
        """Relay a streaming request (SSE): the owner's body is passed on as it arrives, without a read
        timeout; the owner's connection closes when the client goes away."""
        answer = await self._send(request, owner_url, httpx.Timeout(None, connect=self.timeout), stream=True)

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            except httpx.TransportError:
                # The owner went away mid-stream: end the client's stream; its reconnect gets the 410.
                return
            finally:
                with anyio.CancelScope(shield=True):
                    await answer.aclose()

        return StreamingResponse(relay(), answer.status_code, headers=_returned_headers(answer))

    async def _send(
        self, request: Request, owner_url: str, limits: httpx.Timeout, *, stream: bool
    ) -> httpx.Response:
        outgoing = await self._build(request, owner_url, limits)
        for attempt in (1, 2):
            try:
                return await self._client.send(outgoing, stream=stream)
            except _BROKEN as exc:
                # A kept-alive link the owner closed while idle breaks on reuse: one retry on a new link
                # tells that apart from an owner that is gone.
                if attempt == 2:
                    raise _gone(request, owner_url, exc) from None
            except _UNREACHABLE as exc:
                raise _gone(request, owner_url, exc) from None
            except httpx.TimeoutException as exc:
                raise Unavailable(
                    f"the gateway at {owner_url} owning this instance did not answer in time ({exc!r})"
                ) from None
        raise AssertionError("unreachable")

    async def _build(self, request: Request, owner_url: str, limits: httpx.Timeout) -> httpx.Request:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers[FORWARDED_HEADER] = self.self_url
        url = owner_url + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        body = await request.body()
        return self._client.build_request(
            request.method, url, headers=headers, content=body or None, timeout=limits
        )


def _returned_headers(answer: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in answer.headers.items() if k.lower() not in _NOT_RETURNED}


def _gone(request: Request, owner_url: str, exc: Exception) -> Gone:
    group = request.path_params.get("group", "{group}")
    return Gone(
        f"the gateway at {owner_url} that owns this consumer instance cannot be reached "
        f"({type(exc).__name__}); the instance is lost with it: create a new instance with "
        f"POST /v1/consumers/{group}"
    )
