"""The steps of a REST publish (``POST /v1/topics/{topic}/messages``), in their order, for both ways through
HTTP.

A publish comes in one of two ways: below ASGI, in the httptools protocol, for the usual request
(``gateway/api/direct_publish.py``), or through FastAPI's router for everything else
(:func:`gateway.api.routes_topics.publish_messages`). Both take these steps and no other:

1. :func:`authenticate`: the caller's principal, or the refusal (401, 403) before any body is read;
2. :func:`gateway.api.request_limits.admit`: the request's bounds and budgets (413 by Content-Length, 503
   above the concurrency budgets) and its body reader, given back with
   :func:`~gateway.api.request_limits.leave` (taken for every request answered below ASGI by
   ``gateway/api/direct_steps.py``);
3. :func:`read`: the body, whole (413 past ``limits.max_request_bytes``);
4. :func:`prepare`: the messages of the body (:mod:`gateway.api.publish_parse`);
5. :func:`publish`: the messages sent (:class:`~gateway.service.publish.PublishService`), with
   ``Idempotency-Key`` the steps of :mod:`gateway.service.idempotency` around it;
6. the answer (:mod:`gateway.api.publish_render`).

Through FastAPI, steps 1 and 2 are the authentication and request-limits middlewares, which call the same
functions (``gateway/api/auth.py``, ``gateway/api/request_limits.py``) for every route; :func:`respond`
takes steps 3 to 6 on either way.
"""

from __future__ import annotations

from typing import NamedTuple

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope

from gateway.api import auth
from gateway.api.auth import Answer
from gateway.api.media_types import JSON, OCTETS, UnsupportedMediaType, body_kind, refusal
from gateway.api.publish_parse import parse_json_batch_py, parse_raw_message, stored_parts, usual_batch
from gateway.api.publish_render import publish_answer_of, refused_answer, replayed_answer
from gateway.runtime import Runtime
from gateway.security.operations import Operation, rest_operation
from gateway.security.replica_subject import ReplicaSubjects
from gateway.security.setup import Security
from gateway.service.errors import InvalidInput, PayloadTooLarge, ServiceError, renamed_fields
from gateway.service.idempotency import Replay, fingerprint, parse_key
from gateway.service.principal import Principal
from gateway.service.publish import OutgoingMessage, PreparedMessage, PublishOutcome, PublishService

__all__ = [
    "IDEMPOTENCY_KEY",
    "PUBLISH_OPERATION_ID",
    "PUBLISH_PATH",
    "Messages",
    "authenticate",
    "prepare",
    "publish",
    "read",
    "respond",
]

#: the publish route's path template, and its operation (``gateway/security/operations.py``)
PUBLISH_PATH = "/v1/topics/{topic}/messages"
PUBLISH_OPERATION_ID = "publishMessages"
#: the request header carrying an idempotency key
IDEMPOTENCY_KEY = "Idempotency-Key"
_SUPPORTED_TYPES = f"{JSON} (a batch) or {OCTETS} (one raw message)"
_OPERATIONS: dict[str, Operation] = {"POST": rest_operation(PUBLISH_OPERATION_ID)}


def _publish_operations(path: str) -> dict[str, Operation]:
    return _OPERATIONS


async def authenticate(scope: Scope, security: Security, subjects: ReplicaSubjects | None) -> Principal:
    """Step 1: the caller's principal; raises the ServiceError to answer instead (401, 403).
    ``subjects`` verifies a client certificate subject another replica relayed (None: not started)."""
    return await auth.authenticate(scope, security, _publish_operations, lambda: subjects)


async def read(headers: Headers, receive: Receive, limit: int) -> bytes:
    """Step 3: the request's body (PayloadTooLarge past ``limit`` bytes, ``ClientDisconnect`` when the
    client leaves first). Read once, here, without Starlette's async generator (a third of its cost)."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body above {limit} bytes; split the batch", limit=limit, field="body")
    chunks: list[bytes] = []
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        elif kind == "http.disconnect":
            raise ClientDisconnect()
    body = b"".join(chunks)
    if len(body) > limit:
        raise PayloadTooLarge(f"request body above {limit} bytes; split the batch", limit=limit, field="body")
    return body


class Messages(NamedTuple):
    """The messages of a body: ``prepared`` by the publish rules already (the usual batch), else
    ``outgoing`` for the service to prepare (``raw``: one message without a batch envelope)."""

    prepared: list[PreparedMessage] | None
    outgoing: list[OutgoingMessage]
    raw: bool


def prepare(kind: str, body: bytes, headers: Headers, max_messages: int) -> Messages:
    """Step 4: the messages of ``body`` (of ``kind``: ``json`` or ``octets``); raises InvalidInput naming
    the field. The usual batch is read and prepared at once (:func:`usual_batch`); any other body is read by
    the reference, which answers it or names what is wrong."""
    if kind == "octets":
        return Messages(None, [parse_raw_message(body, headers)], True)
    prepared = usual_batch(body, max_messages)
    if prepared is not None:
        return Messages(prepared, [], False)
    return Messages(None, parse_json_batch_py(body), False)


async def publish(service: PublishService, topic: str, messages: Messages) -> list[PublishOutcome]:
    """Step 5: send the messages; the outcome of each."""
    if messages.prepared is not None:
        return await service.publish_prepared(topic, messages.prepared)
    return await service.publish(topic, messages.outgoing, raw=messages.raw)


async def respond(topic: str, scope: Scope, receive: Receive, runtime: Runtime) -> Answer:
    """Steps 3 to 6 for the authenticated, admitted publish of ``scope`` to ``topic`` (``receive``: its body
    reader): the answer, a refusal included. Any other exception is raised."""
    headers = Headers(scope=scope)
    try:
        return await _answer(topic, headers, receive, runtime)
    except (ServiceError, UnsupportedMediaType) as exc:
        return refused_answer(exc)


async def _answer(topic: str, headers: Headers, receive: Receive, runtime: Runtime) -> Answer:
    service, settings = runtime.publisher(), runtime.settings
    content_type = headers.get("content-type")
    kind = body_kind(content_type)  # never JSON by default: see gateway/api/media_types.py
    if kind is None:
        raise refusal(content_type, _SUPPORTED_TYPES)
    key = _idempotency_key(headers)
    body = await read(headers, receive, settings.limits.max_request_bytes)

    async def published() -> Answer:
        messages = prepare(kind, body, headers, service.max_batch_messages)
        return publish_answer_of(topic, await publish(service, topic, messages))

    if key is None:
        return await published()
    with renamed_fields({"idempotency_key": IDEMPOTENCY_KEY}):
        answer = await runtime.idempotent().run(
            topic, key, fingerprint(stored_parts(kind, body, headers)), published, _kept
        )
    return replayed_answer(answer) if isinstance(answer, Replay) else answer


def _kept(answer: Answer) -> tuple[int, bytes] | None:
    """What an idempotency key keeps of a publish's answer: its status and body when some message was
    stored (200, 207), else nothing (the key is freed for a retry)."""
    status, _, body = answer
    return (status, body) if status in (200, 207) else None


def _idempotency_key(headers: Headers) -> str | None:
    """The request's idempotency key, checked; None without one."""
    sent = headers.getlist(IDEMPOTENCY_KEY)
    if len(sent) > 1:
        raise InvalidInput(f"send one {IDEMPOTENCY_KEY} header, not {len(sent)}", field=IDEMPOTENCY_KEY)
    return parse_key(sent[0] if sent else None, field=IDEMPOTENCY_KEY)
