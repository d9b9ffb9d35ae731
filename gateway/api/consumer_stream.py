"""The consumer route that pushes messages as Server-Sent Events (streamMessages).

Registered on the consumers router, in its order, by ``gateway/api/routes_consumers.py``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Header, Query, Request
from fastapi.responses import Response

from gateway.api.consumer_deps import (
    FIELDS,
    ConsumersDep,
    ForwarderDep,
    InstanceId,
    locate_owner,
)
from gateway.api.consumer_render import render_events, to_json
from gateway.api.consumer_schemas import ValueFormat
from gateway.api.deps import get_runtime
from gateway.api.sse import EventStreamResponse
from gateway.service.errors import Gone, ServiceError, renamed_fields

#: SSE ``retry:`` hint, milliseconds a browser waits before reconnecting
SSE_RETRY_MS = 1000


async def stream_messages(
    group: str,
    instance_id: InstanceId,
    request: Request,
    service: ConsumersDep,
    forwarder: ForwarderDep,
    max_messages: Annotated[int | None, Query(ge=1, description="messages fetched per step")] = None,
    max_bytes: Annotated[int | None, Query(ge=1, description="value bytes fetched per step")] = None,
    format: Annotated[ValueFormat, Query(description="how values are shown")] = "base64",
    last_event_id: Annotated[
        str | None, Query(description="resume after this event id (the Last-Event-ID header wins)")
    ] = None,
    last_event_header: Annotated[str | None, Header(alias="Last-Event-ID", include_in_schema=False)] = None,
) -> Response:
    """Each event is one message; its id is its commit token. Reconnecting with `Last-Event-ID` first sends
    again every message delivered after that id and not committed; without it, every delivered message not
    committed yet. With autoCommit, a message counts as committed once the stream moves past it; otherwise
    commit tokens with commitMessages (uncommitted messages hold their partition)."""
    owner = locate_owner(service, forwarder, request, group, instance_id)
    if owner is not None:
        return await forwarder.stream(request, owner)
    with renamed_fields(FIELDS):
        cursor = service.open_stream(group, instance_id, last_event_header or last_event_id)
        bounds = service.limits.step(max_messages, max_bytes, cursor.instance.max_bytes)
    count = bounds.max_messages
    runtime = get_runtime(request)
    # One step's batch is what a client that stops reading can leave unsent (besides the send buffer).
    size = min(bounds.max_bytes, runtime.settings.consumers.sse_max_unsent_bytes)
    keepalive = runtime.settings.consumers.sse_keepalive
    step = min(keepalive, 1.0)

    async def events() -> AsyncIterator[bytes]:
        async with service.using(cursor.instance):
            yield f"retry: {SSE_RETRY_MS}\n\n".encode()
            quiet_since = time.monotonic()
            told_until = 0.0  # an outage was told; told again once its retry delay has passed
            # A draining gateway ends its streams (clients reconnect, after ``retry``) so that shutdown
            # does not wait for them.
            while not cursor.superseded and not runtime.draining:
                try:
                    messages = await cursor.next(count, size, step)
                except Gone as exc:
                    yield _error_event("gone", exc)
                    return
                if messages:
                    yield render_events(messages, format)
                    quiet_since = time.monotonic()
                    told_until = 0.0
                    continue
                if time.monotonic() >= told_until:
                    outage = await service.outage(cursor.instance)
                    if outage is not None:
                        # what a poll answers with a 503; the stream stays open and resumes by itself
                        yield _error_event("unavailable", outage)
                        quiet_since = time.monotonic()
                        told_until = quiet_since + outage.retry_after
                        continue
                if time.monotonic() - quiet_since >= keepalive:
                    yield b": keep-alive\n\n"
                    quiet_since = time.monotonic()

    return EventStreamResponse(
        events(),
        write_timeout=runtime.settings.consumers.sse_write_timeout,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _error_event(name: str, exc: ServiceError) -> bytes:
    """An event named ``name`` whose data is the error body the same failure of a poll answers."""
    return f"event: {name}\ndata: ".encode() + to_json({"error": exc.to_dict()}) + b"\n\n"
