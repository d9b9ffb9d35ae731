"""Forwarding requests for consumer instances owned by another gateway replica.

An instance lives in one replica (its id names the replica's advertised URL). A request that lands elsewhere
is sent on to the owner with httpx and the owner's answer is passed back; a stream (SSE) is relayed chunk by
chunk as it comes.

This is not a general proxy, and a client must not be able to use it as one:

* the owner's URL comes from an id signed with the replicas' shared secret, and must pass the configured
  :class:`~gateway.service.peers.PeerPolicy` (scheme, port, host allowlist) before anything connects; the
  service layer checks both when it locates the owner, and :meth:`Forwarder._build` checks the policy again;
* only the caller's credentials (``Authorization``, ``x-api-key``) and the API's own request headers go out
  (the owner authenticates and authorizes the call like any other); never ``Cookie``;
* redirects are not followed, no cookie is ever stored or sent;
* only the API's own answer headers come back (never ``Set-Cookie``), and only an answer that looks like the
  API's (JSON, an event stream or no body; no redirect): anything else is answered 502.

Failures, seen from the client:

* the owner cannot be reached (refused, reset, unknown host, connect timeout) -> 410 Gone, with the error body
  of every other 410: the instance is lost with its replica, create a new one;
* the owner accepted the request but did not answer in time -> 503 with Retry-After (the owner is alive, the
  instance may be too);
* the owner answered something that is not the API's -> 502.

A forwarded request carries ``X-TubeMQ-Forwarded-By``; a replica never forwards such a request again, so two
replicas that disagree about an owner cannot bounce a request between them.
"""

from __future__ import annotations

import http.cookiejar
import ssl
from collections.abc import AsyncIterator

import anyio
import httpx
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from gateway.service.errors import Gone, Unavailable, UpstreamError
from gateway.service.peers import PeerPolicy

__all__ = ["FORWARDED_HEADER", "PASSED_ANSWER_HEADERS", "PASSED_REQUEST_HEADERS", "Forwarder"]

FORWARDED_HEADER = "x-tubemq-forwarded-by"

#: request headers sent on to the owner: the caller's credentials and the API's own headers (plus any
#: ``x-tubemq-*``); everything else (Cookie, Host, Forwarded, proxy headers...) stays here
PASSED_REQUEST_HEADERS = frozenset(
    {"authorization", "x-api-key", "content-type", "accept", "last-event-id", "x-request-id"}
)
#: answer headers passed back to the caller (plus any ``ratelimit*`` and ``x-tubemq-*``)
PASSED_ANSWER_HEADERS = frozenset(
    {
        "content-type",
        "retry-after",
        "location",
        "x-request-id",
        "www-authenticate",
        "allow",
        "cache-control",
        "x-accel-buffering",
    }
)
_OWN_PREFIX = "x-tubemq-"
#: answer media types the API produces; an answer with a body of another type did not come from a gateway
_API_MEDIA_TYPES = ("application/json", "text/event-stream")
_UNREACHABLE = (httpx.ConnectError, httpx.ConnectTimeout)
_BROKEN = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class Forwarder:
    """Sends requests on to owner replicas over one shared httpx client.

    ``timeout`` (seconds) bounds connecting to the owner and, added to ``extra_wait`` of a call (a long
    poll's own timeout), waiting for its answer; ``verify`` checks owners' certificates over https.
    """

    def __init__(
        self, self_url: str, peers: PeerPolicy, timeout: float = 2.0, verify: ssl.SSLContext | bool = True
    ) -> None:
        self.self_url = self_url
        self.peers = peers
        self.timeout = timeout
        self._client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            trust_env=False,  # no proxy or netrc from the environment
            follow_redirects=False,
            cookies=_no_cookies(),
            verify=verify,
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
        _check_answer(answer, owner_url)
        return Response(answer.content, answer.status_code, headers=_returned_headers(answer))

    async def stream(self, request: Request, owner_url: str) -> Response:
        """Relay a streaming request (SSE): the owner's body is passed on as it arrives, without a read
        timeout; the owner's connection closes when the client goes away."""
        answer = await self._send(request, owner_url, httpx.Timeout(None, connect=self.timeout), stream=True)
        try:
            _check_answer(answer, owner_url)
        except UpstreamError:
            await answer.aclose()
            raise

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
        if not self.peers.allows(owner_url):  # the service checked already; this is the last line
            raise Gone(
                f"the gateway at {owner_url} owning this consumer instance is not one this gateway may "
                "forward to (consumers.forward_allow, consumers.forward_ports); create a new instance"
            )
        headers = {
            k: v
            for k, v in request.headers.items()
            if (name := k.lower()) in PASSED_REQUEST_HEADERS or name.startswith(_OWN_PREFIX)
        }
        headers[FORWARDED_HEADER] = self.self_url
        # The raw body of a stream is relayed as is, so it must not be compressed.
        headers["accept-encoding"] = "identity"
        url = owner_url + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        body = await request.body()
        return self._client.build_request(
            request.method, url, headers=headers, content=body or None, timeout=limits
        )


def _returned_headers(answer: httpx.Response) -> dict[str, str]:
    return {
        k: v
        for k, v in answer.headers.items()
        if (name := k.lower()) in PASSED_ANSWER_HEADERS or name.startswith((_OWN_PREFIX, "ratelimit"))
    }


def _check_answer(answer: httpx.Response, owner_url: str) -> None:
    """Refuse an answer no gateway gives: a redirect, or a body that is neither JSON nor an event stream."""
    media_type = answer.headers.get("content-type", "").split(";")[0].strip().lower()
    has_body = answer.headers.get("content-length", "") != "0" and answer.status_code not in (204, 304)
    if answer.is_redirect or (has_body and media_type not in _API_MEDIA_TYPES):
        raise UpstreamError(
            f"the gateway at {owner_url} owning this consumer instance gave an answer that is not the "
            f"API's (status {answer.status_code}, {media_type or 'no content type'}); check that "
            "consumers.advertised_url of every replica names a gateway"
        )


class _RefuseAll(http.cookiejar.DefaultCookiePolicy):
    """A cookie policy that never stores a cookie and never sends one."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False


def _no_cookies() -> http.cookiejar.CookieJar:
    return http.cookiejar.CookieJar(policy=_RefuseAll())


def _gone(request: Request, owner_url: str, exc: Exception) -> Gone:
    group = request.path_params.get("group", "{group}")
    return Gone(
        f"the gateway at {owner_url} that owns this consumer instance cannot be reached "
        f"({type(exc).__name__}); the instance is lost with it: create a new instance with "
        f"POST /v1/consumers/{group}"
    )
