"""What the consumer routes share: the consumer service and the one forwarding client as dependencies, where
an instance lives (served here, or forwarded to its owner), the base URL of the URLs in an answer, and the
JSON answer.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.responses import Response

from gateway.api.consumer_render import to_json
from gateway.api.deps import get_runtime
from gateway.api.forwarding import Forwarder, check_passable
from gateway.api.proxy import public_base_url, request_base_url
from gateway.service.consumers import ConsumerService, Owner
from gateway.tls import forwarding_ssl_context

#: The service's parameter names -> this API's query parameter and header names.
FIELDS = {
    "timeout": "timeout_ms",
    "resume_after": "Last-Event-ID",
    "delay": "delayMs",
    "extension": "extendMs",
    "time_zone": "timeZone",
}

# The dependencies are ``async def``: FastAPI runs a plain ``def`` one in its thread pool, and 20 streams
# opening at once then started 20 threads (each with a malloc arena of its own) that all built a Forwarder
# (an SSL context with the system CAs) at once: about 15 MB of peak RSS.


def _consumers(request: Request) -> ConsumerService:
    return get_runtime(request).consumer_service()


async def get_consumers(request: Request) -> ConsumerService:
    return _consumers(request)


async def get_forwarder(request: Request) -> Forwarder:
    """The app's one forwarding client, built on first use (no await in between: built once)."""
    forwarder: Forwarder | None = getattr(request.app.state, "forwarder", None)
    if forwarder is None:
        service = _consumers(request)
        runtime = get_runtime(request)
        settings = runtime.settings
        forwarder = Forwarder(
            service.advertised_url,
            service.peers,
            settings.consumers.forward_timeout,
            verify=forwarding_ssl_context(settings.tls, settings.consumers.forward_ca_file),
            siblings=runtime.worker.siblings() if runtime.worker is not None else None,
            worker=service.worker,
            subjects=runtime.replica_subjects,
        )
        request.app.state.forwarder = forwarder
    return forwarder


async def close_forwarder(app: FastAPI) -> None:
    """Close the forwarding client (the app's lifespan calls this on shutdown)."""
    forwarder: Forwarder | None = getattr(app.state, "forwarder", None)
    app.state.forwarder = None
    if forwarder is not None:
        await forwarder.close()


ConsumersDep = Annotated[ConsumerService, Depends(get_consumers)]
ForwarderDep = Annotated[Forwarder, Depends(get_forwarder)]
InstanceId = Annotated[str, Path(description="the instanceId that createConsumer returned")]


def locate_owner(
    service: ConsumerService, forwarder: Forwarder, request: Request, group: str, instance_id: str
) -> Owner | None:
    """The owner to forward to, or None to serve here. A request forwarded by another replica is served here
    or takes one hop to a sibling worker; one that came from a sibling is served here. Else: 410. Headers
    that could not be passed on are refused (400) first, wherever the instance lives."""
    check_passable(request)
    owner = service.locate(group, instance_id)
    if owner is not None and (
        forwarder.was_hopped(request) or (not owner.sibling and forwarder.was_forwarded(request))
    ):
        service.instance(group, instance_id)  # raises Gone
    return owner


def public_base(request: Request) -> str | None:
    """The base URL of the URLs in an answer (``baseUrl``, ``Location``): the one a trusted proxy names; else,
    for a lone replica with no advertised URL configured, the request's own (the URL the client reached it
    at: the replica's derived address may be one a client behind ``docker run -p`` or a port-forward cannot
    reach); else None: the owner's advertised URL."""
    public = public_base_url(request.scope)
    if public is None and get_runtime(request).settings.consumers.lone_replica:
        public = request_base_url(request.scope)
    return public


def json_response(payload: Any, status_code: int = 200) -> Response:
    return Response(to_json(payload), status_code, media_type="application/json")
