"""Forwarding requests for consumer instances owned by another gateway replica.

An instance lives in one replica (its id names the replica's advertised URL). A request that lands elsewhere
is sent on to the owner with httpx and the owner's answer is passed back; a stream (SSE) is relayed chunk by
chunk as it comes.

This is not a general proxy, and a client must not be able to use it as one:

* the owner's URL comes from an id signed with the replicas' shared secret, and must pass the configured
  :class:`~gateway.service.peers.PeerPolicy` (scheme, port, host allowlist) before anything connects; the
  service layer checks both when it locates the owner, and :meth:`Forwarder._build` checks the policy again;
* only the caller's credentials (``Authorization``, ``x-api-key``) and the API's own request headers go out
  (the owner authenticates and authorizes the call like any other); never ``Cookie``, never the caller's
  own ``Forwarded``/``X-Forwarded-*``: this replica sends the public URL it worked out itself
  (``gateway/api/proxy.py``), which the owner believes only from a trusted proxy;
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

Worker processes (``serve --workers N``): an instance may also live in a sibling worker of this replica (the
id, signed like any other, names the worker; the service bounds its index by the worker count). Such a
request takes one hop to the sibling's private listener, a unix socket in a directory only this user can
enter whose path comes from the process's own configuration, never from the request; the hop carries
``X-TubeMQ-Worker-Hop`` and is never forwarded again. A request forwarded by another replica may still take
that one hop. The sibling authenticates and authorizes the request like any other; the subject of a verified
client certificate (mTLS principal), which a plain socket cannot carry, travels in ``X-TubeMQ-Client-Cert``,
set only by the forwarder from the connection's TLS state (a client's own such header is dropped) and read
only by the private listener (:mod:`gateway.api.worker_listener`). To another replica it travels signed with
the replicas' shared secret for that request, that owner and this replica's certificate, once
(:mod:`gateway.security.replica_subject`), believed by the owner's authentication.
"""

from __future__ import annotations

import base64
import http.cookiejar
import ssl
from collections.abc import AsyncIterator, Mapping

import anyio
import httpx
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from gateway.api.proxy import forwarded_headers
from gateway.security.replica_subject import REPLICA_CERT_KEY, ReplicaSubjects
from gateway.service.consumers import Owner
from gateway.service.errors import Gone, InvalidInput, Unavailable, UpstreamError
from gateway.service.peers import PeerPolicy

__all__ = [
    "CLIENT_CERT_HEADER",
    "FORWARDED_HEADER",
    "PASSED_ANSWER_HEADERS",
    "PASSED_REQUEST_HEADERS",
    "PRIVATE_LISTENER",
    "WORKER_HOP_HEADER",
    "Forwarder",
    "check_passable",
]

FORWARDED_HEADER = "x-tubemq-forwarded-by"
#: the ASGI scope key the private listener of a worker sets (``gateway/api/worker_listener.py``)
PRIVATE_LISTENER = "gateway.private_listener"
#: set on the hop to a sibling worker process (its value: the sending worker's index)
WORKER_HOP_HEADER = "x-tubemq-worker-hop"
#: on the hop to a sibling: the verified client certificate's subject (base64url of its UTF-8 text)
CLIENT_CERT_HEADER = "x-tubemq-client-cert"

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
#: how the API's documentation spells the passed headers (for error messages)
_SPELLED = {"last-event-id": "Last-Event-ID", "x-api-key": "X-API-Key", "x-request-id": "X-Request-ID"}
#: answer media types the API produces; an answer with a body of another type did not come from a gateway
_API_MEDIA_TYPES = ("application/json", "text/event-stream")
_UNREACHABLE = (httpx.ConnectError, httpx.ConnectTimeout)
_BROKEN = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def _passed(name: str) -> bool:
    return (name in PASSED_REQUEST_HEADERS or name.startswith(_OWN_PREFIX)) and name not in _SET_HERE


#: headers only the forwarder sets (from the connection's verified certificate); a client's own are dropped
_SET_HERE = frozenset({CLIENT_CERT_HEADER, REPLICA_CERT_KEY})


def check_passable(request: Request) -> None:
    """Refuse (InvalidInput, 400, naming the header) a request whose headers could not cross a hop to a
    sibling worker or another replica: a value passed on that is not visible ASCII text (a header value
    outside it, such as a UTF-8 ``Last-Event-ID``, cannot be sent again). Called before the owner is looked
    up, so that the answer is the same wherever the instance lives."""
    for key, value in request.headers.items():
        name = key.lower()
        if _passed(name) and not all(" " <= ch <= "~" or ch == "\t" for ch in value):
            spelled = _SPELLED.get(name, name)
            raise InvalidInput(
                f"header {spelled} must be printable ASCII text; no value the API gives has other "
                "characters (send it back exactly as it was received)",
                field=spelled,
            )


class Forwarder:
    """Sends requests on to owner replicas over one shared httpx client.

    ``timeout`` (seconds) bounds connecting to the owner and, added to ``extra_wait`` of a call (a long
    poll's own timeout), waiting for its answer; ``verify`` checks owners' certificates over https.
    ``siblings`` maps this replica's other worker processes (by index) to their private listeners' unix
    socket paths; ``worker`` is this process's index; ``subjects`` signs a client certificate's subject for
    another replica, bound to the request and the owner (:mod:`gateway.security.replica_subject`).
    """

    def __init__(
        self,
        self_url: str,
        peers: PeerPolicy,
        timeout: float = 2.0,
        verify: ssl.SSLContext | bool = True,
        *,
        siblings: Mapping[int, str] | None = None,
        worker: int | None = None,
        subjects: ReplicaSubjects | None = None,
    ) -> None:
        self.self_url = self_url
        self._subjects = subjects
        self.peers = peers
        self.timeout = timeout
        self.worker = worker
        self._client = _hardened_client(verify=verify)
        self._sibling_paths = dict(siblings or {})
        self._sibling_clients: dict[int, httpx.AsyncClient] = {}

    def __repr__(self) -> str:
        return (
            f"<Forwarder from {self.self_url} timeout={self.timeout:g}s siblings={len(self._sibling_paths)}>"
        )

    async def close(self) -> None:
        clients, self._sibling_clients = list(self._sibling_clients.values()), {}
        for client in (self._client, *clients):
            await client.aclose()

    @staticmethod
    def was_forwarded(request: Request) -> bool:
        return FORWARDED_HEADER in request.headers

    @staticmethod
    def was_hopped(request: Request) -> bool:
        """Whether a sibling worker process sent this request here: the hop header on the private listener
        (only siblings reach it). On a public listener a client's own hop header means nothing: the request
        is served (or takes the hop) like any other, so a spoofed header answers exactly as without it, for
        a genuine id of another principal as for an unknown one (404)."""
        return bool(request.scope.get(PRIVATE_LISTENER)) and WORKER_HOP_HEADER in request.headers

    async def forward(self, request: Request, owner: Owner, *, extra_wait: float = 0.0) -> Response:
        """Relay ``request`` to the same path on ``owner`` and return the owner's answer."""
        limits = httpx.Timeout(self.timeout + extra_wait, connect=self.timeout)
        answer = await self._send(request, owner, limits, stream=False)
        _check_answer(answer, owner)
        return Response(answer.content, answer.status_code, headers=_returned_headers(answer))

    async def stream(self, request: Request, owner: Owner) -> Response:
        """Relay a streaming request (SSE): the owner's body is passed on as it arrives, without a read
        timeout; the owner's connection closes when the client goes away."""
        answer = await self._send(request, owner, httpx.Timeout(None, connect=self.timeout), stream=True)
        try:
            _check_answer(answer, owner)
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
        self, request: Request, owner: Owner, limits: httpx.Timeout, *, stream: bool
    ) -> httpx.Response:
        client, outgoing = await self._build(request, owner, limits)
        where = (
            f"the gateway at {owner.url}"
            if owner.worker is None
            else f"worker {owner.worker} of this gateway"
        )
        for attempt in (1, 2):
            try:
                return await client.send(outgoing, stream=stream)
            except _BROKEN as exc:
                # A kept-alive link the owner closed while idle breaks on reuse: one retry on a new link
                # tells that apart from an owner that is gone.
                if attempt == 2:
                    raise _gone(request, where, exc) from None
            except _UNREACHABLE as exc:
                raise _gone(request, where, exc) from None
            except httpx.TimeoutException as exc:
                raise Unavailable(f"{where} owning this instance did not answer in time ({exc!r})") from None
        raise AssertionError("unreachable")

    async def _build(
        self, request: Request, owner: Owner, limits: httpx.Timeout
    ) -> tuple[httpx.AsyncClient, httpx.Request]:
        check_passable(request)
        headers = {k: v for k, v in request.headers.items() if _passed(k.lower())}
        if owner.worker is None:
            if not self.peers.allows(owner.url):  # the service checked already; this is the last line
                raise Gone(
                    f"the gateway at {owner.url} owning this consumer instance is not one this gateway may "
                    "forward to (consumers.forward_allow, consumers.forward_ports); create a new instance"
                )
            client, base = self._client, owner.url
            headers[FORWARDED_HEADER] = self.self_url
            subject = _client_cert_name(request.scope)
            if subject is not None and self._subjects is not None:
                signed = self._subjects.sign(
                    subject, audience=owner.url, request=f"{request.method} {request.url.path}"
                )
                if signed is not None:
                    headers[REPLICA_CERT_KEY] = signed
        else:
            client, base = self._sibling(owner.worker), f"http://worker-{owner.worker}"
            headers[WORKER_HOP_HEADER] = str(self.worker)
            # the Host the client sent, for the URLs in the sibling's answer (a lone replica's baseUrl)
            if "host" in request.headers:
                headers["host"] = request.headers["host"]
            subject = _client_cert_name(request.scope)
            if subject is not None:
                headers[CLIENT_CERT_HEADER] = base64.urlsafe_b64encode(subject.encode()).decode("ascii")
        # The URL the client reached the gateway at (when this replica believes its proxy), for the URLs in
        # the owner's answer; the owner believes it only when this replica is one of its trusted proxies.
        headers.update(forwarded_headers(request.scope))
        # The raw body of a stream is relayed as is, so it must not be compressed.
        headers["accept-encoding"] = "identity"
        url = base + request.url.path
        if request.url.query:
            url += "?" + request.url.query
        body = await request.body()
        return client, client.build_request(
            request.method, url, headers=headers, content=body or None, timeout=limits
        )

    def _sibling(self, worker: int) -> httpx.AsyncClient:
        """The client of sibling worker ``worker``'s private listener; Gone when this process has none."""
        client = self._sibling_clients.get(worker)
        if client is None:
            path = self._sibling_paths.get(worker)
            if path is None or worker == self.worker:
                raise Gone(
                    f"this consumer instance belongs to worker {worker}, which this gateway process cannot "
                    "reach; create a new instance"
                )
            client = _hardened_client(transport=httpx.AsyncHTTPTransport(uds=path))
            self._sibling_clients[worker] = client
        return client


def _client_cert_name(scope: Mapping[str, object]) -> str | None:
    """The verified client certificate's subject from the ASGI TLS extension, if any."""
    extensions = scope.get("extensions")
    tls = extensions.get("tls") if isinstance(extensions, dict) else None
    name = tls.get("client_cert_name") if isinstance(tls, dict) else None
    return name if isinstance(name, str) and name else None


def _hardened_client(
    *, verify: ssl.SSLContext | bool = True, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """An HTTP client that takes nothing from the environment, follows no redirect and keeps no cookie."""
    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        trust_env=False,  # no proxy or netrc from the environment
        follow_redirects=False,
        cookies=_no_cookies(),
        verify=verify,
        transport=transport,
    )


def _returned_headers(answer: httpx.Response) -> dict[str, str]:
    return {
        k: v
        for k, v in answer.headers.items()
        if (name := k.lower()) in PASSED_ANSWER_HEADERS or name.startswith((_OWN_PREFIX, "ratelimit"))
    }


def _check_answer(answer: httpx.Response, owner: Owner) -> None:
    """Refuse an answer no gateway gives: a redirect, or a body that is neither JSON nor an event stream."""
    media_type = answer.headers.get("content-type", "").split(";")[0].strip().lower()
    has_body = answer.headers.get("content-length", "") != "0" and answer.status_code not in (204, 304)
    if answer.is_redirect or (has_body and media_type not in _API_MEDIA_TYPES):
        raise UpstreamError(
            f"the gateway at {owner.url} owning this consumer instance gave an answer that is not the "
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


def _gone(request: Request, where: str, exc: Exception) -> Gone:
    group = request.path_params.get("group", "{group}")
    return Gone(
        f"{where}, which owns this consumer instance, cannot be reached "
        f"({type(exc).__name__}); the instance is lost with it: create a new instance with "
        f"POST /v1/consumers/{group}"
    )
