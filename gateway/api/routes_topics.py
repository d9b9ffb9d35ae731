"""REST routes for topics: publish messages and read the topic's routing metadata."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from gateway.api.deps import PublishDep, get_runtime
from gateway.api.errors import RATE_LIMITED_DOC, STATUS_BY_KIND
from gateway.api.media_types import JSON, OCTETS, body_kind, refusal
from gateway.api.publish_parse import parse_json_batch, parse_raw_message, stored_parts, usual_batch
from gateway.api.schemas import ErrorResponse, PublishRequest, PublishResponse, TopicResponse
from gateway.service.errors import ErrorKind, InvalidInput, PayloadTooLarge, renamed_fields
from gateway.service.idempotency import Replay, fingerprint, parse_key
from gateway.service.publish import PublishOutcome, PublishService, failed_alike
from gateway.tubemq.wire import load_speedups

#: gateway/api/_routes_topics.c where the compiled loops are built and not switched off, else None
_compiled = load_speedups("gateway.api._routes_topics")

router = APIRouter(prefix="/v1/topics", tags=["topics"])


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "a field is invalid; `error.field` names it"},
    404: {"model": ErrorResponse, "description": "the topic has no publishable partitions"},
    413: {"model": ErrorResponse, "description": "a message or the body is too large; `error.limit`"},
    503: {"model": ErrorResponse, "description": "no broker can take the topic now; see Retry-After"},
}

_PUBLISH_BODY: dict[str, Any] = {
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "a key of 1 to 255 visible ASCII characters (a UUID), optionally in double "
            "quotes: a retry with the same key (same principal, topic and request) within "
            "idempotency.window_seconds gets the first answer again, with Idempotent-Replayed: true, and "
            "stores nothing; see docs/idempotency.md",
            "schema": {"type": "string", "minLength": 1, "maxLength": 257},
        }
    ],
    "requestBody": {
        "required": True,
        # A Media Type Object has no `description` in OpenAPI 3.1: the octet-stream options are described
        # on the Request Body Object.
        "description": "application/json: a batch (PublishRequest). application/octet-stream: one raw "
        "message; options in X-TubeMQ-Key, X-TubeMQ-Partition, X-TubeMQ-Attributes (k=v,k2=v2), "
        "X-TubeMQ-Stream-Id, X-TubeMQ-Msg-Time",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/PublishRequest"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    },
}


#: the header of an answer given again for a repeated Idempotency-Key
_REPLAYED_DOC: dict[str, Any] = {
    "Idempotent-Replayed": {
        "description": "true: the first answer to this Idempotency-Key, given again; nothing was published",
        "schema": {"type": "string"},
    }
}

_SUPPORTED_TYPES = f"{JSON} (a batch) or {OCTETS} (one raw message)"
_MEDIA_DOC = f"Content-Type missing or not {JSON} (UTF-8) or {OCTETS}"


def status_of(kind: ErrorKind) -> int:
    return STATUS_BY_KIND[kind]


def _json_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def render_all_stored(topic: str, outcomes: Sequence[PublishOutcome]) -> bytes | None:
    """The 200 body when every message was stored, else None (:func:`render_all_stored_py`): written in one
    C call where the extension is built (gateway/api/_routes_topics.c), which hands back anything but plain
    ASCII text and int64 numbers to the reference."""
    if _compiled is not None and topic.isascii():
        stored: bytes | None = _compiled.render_stored(_json_str(topic).encode(), outcomes)
        if stored is not None:
            return stored
    return render_all_stored_py(topic, outcomes)


def render_all_stored_py(topic: str, outcomes: Sequence[PublishOutcome]) -> bytes | None:
    """The 200 body when every message was stored, else None: the bytes JSONResponse would send for
    ``{"topic": ..., "results": [_result(o), ...]}``, from f-strings instead of dicts and json.dumps
    (which cost a few microseconds per message). A batch spreads over a few partitions: the part of a result
    its partition decides (status to the offset's name) is written once per partition."""
    heads: dict[tuple[str, int, int, int], str] = {}
    parts: list[str] = []
    for outcome in outcomes:
        r = outcome.result
        if r is None:
            return None
        place = (r.partition_key, r.partition_index, r.broker_id, r.partition_id)
        head = heads.get(place)
        if head is None:
            head = heads[place] = (
                f',"status":200,"partition":{r.partition_index},"partitionKey":{_json_str(r.partition_key)},'
                f'"brokerId":{r.broker_id},"partitionId":{r.partition_id},"offset":'
            )
        parts.append(
            f'{{"index":{outcome.index}{head}{r.append_offset},"messageId":"{r.message_id}",'
            f'"appendTime":{r.append_time_ms}}}'
        )
    return f'{{"topic":{_json_str(topic)},"results":[{",".join(parts)}]}}'.encode()


def _result(outcome: PublishOutcome) -> dict[str, Any]:
    if outcome.result is not None:
        r = outcome.result
        return {
            "index": outcome.index,
            "status": 200,
            "partition": r.partition_index,
            "partitionKey": r.partition_key,
            "brokerId": r.broker_id,
            "partitionId": r.partition_id,
            "offset": r.append_offset,
            "messageId": str(r.message_id),
            "appendTime": r.append_time_ms,
        }
    assert outcome.error is not None
    return {
        "index": outcome.index,
        "status": status_of(outcome.error.kind),
        "error": outcome.error.to_dict(),
    }


@router.post(
    "/{topic}/messages",
    operation_id="publishMessages",
    summary="Publish a batch (JSON) or one raw message (octet-stream)",
    response_model=PublishResponse,
    responses={
        200: {"headers": _REPLAYED_DOC},
        207: {"model": PublishResponse, "description": "some messages failed", "headers": _REPLAYED_DOC},
        **_ERRORS,
        409: {
            "model": ErrorResponse,
            "description": "a request with this Idempotency-Key is still being published; see Retry-After",
            "headers": {
                "Retry-After": {
                    "description": "seconds to wait before retrying",
                    "schema": {"type": "integer"},
                }
            },
        },
        415: {"model": ErrorResponse, "description": _MEDIA_DOC},
        422: {
            "model": ErrorResponse,
            "description": "this Idempotency-Key was used for a request with another body or other options",
        },
        429: RATE_LIMITED_DOC,
    },
    openapi_extra=_PUBLISH_BODY,
)
async def publish_messages(topic: str, request: Request) -> Response:
    """200: every message was stored by a broker. 207: `results[i].status` says which were not. An answer
    replayed for a repeated `Idempotency-Key` carries `Idempotent-Replayed: true`."""
    answer = await publish_answer(topic, request)
    if isinstance(answer, bytes):
        return Response(answer, media_type="application/json")
    return answer


async def _read_body(receive: Receive) -> bytes:
    """The request's body, as Starlette's ``Request.body()`` reads it (``ClientDisconnect`` when the client
    leaves first), without its async generator: a third of the cost (microbenchmark: 5.1 -> 2.1 us with
    the Request built). The body is read once, here; nothing reads it again."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return b"".join(chunks)
        elif kind == "http.disconnect":
            raise ClientDisconnect()


#: the request header carrying an idempotency key, and the answer header marking a replayed answer
IDEMPOTENCY_KEY = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"


async def publish_answer(topic: str, request: Request) -> bytes | Response:
    """The publish route's answer: the 200 body when every message was stored (the hot path sends it
    without a Response object: gateway/api/hot_path.py), else the whole response. With an
    ``Idempotency-Key``, the steps of :mod:`gateway.service.idempotency` around the publish."""
    # The services are looked up here rather than declared as dependencies: FastAPI's dependency
    # resolution was ~5% of the gateway's CPU on a one-message publish.
    runtime = get_runtime(request)
    service, settings = runtime.publisher(), runtime.settings
    content_type = request.headers.get("content-type")
    kind = body_kind(content_type)  # never JSON by default: see gateway/api/media_types.py
    if kind is None:
        raise refusal(content_type, _SUPPORTED_TYPES)
    key = _idempotency_key(request)
    limit = settings.limits.max_request_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body above {limit} bytes; split the batch", limit=limit, field="body")
    body = await _read_body(request.receive)
    if len(body) > limit:
        raise PayloadTooLarge(f"request body above {limit} bytes; split the batch", limit=limit, field="body")
    if key is None:
        return await _published(topic, service, kind, body, request)
    keys = runtime.idempotent()
    with renamed_fields({"idempotency_key": IDEMPOTENCY_KEY}):
        answer = await keys.run(
            topic,
            key,
            fingerprint(stored_parts(kind, body, request.headers)),
            lambda: _published(topic, service, kind, body, request),
            _kept,
        )
    if isinstance(answer, Replay):
        return Response(answer.body, answer.status, {REPLAYED: "true"}, media_type="application/json")
    return answer


def _kept(answer: bytes | Response) -> tuple[int, bytes] | None:
    """What an idempotency key keeps of a publish's answer: its status and body when some message was
    stored (200, 207), else nothing (the key is freed for a retry)."""
    if isinstance(answer, bytes):
        return 200, answer
    return (answer.status_code, bytes(answer.body)) if answer.status_code in (200, 207) else None


def _idempotency_key(request: Request) -> str | None:
    """The request's idempotency key, checked; None without one."""
    sent = request.headers.getlist(IDEMPOTENCY_KEY)
    if len(sent) > 1:
        raise InvalidInput(f"send one {IDEMPOTENCY_KEY} header, not {len(sent)}", field=IDEMPOTENCY_KEY)
    return parse_key(sent[0] if sent else None, field=IDEMPOTENCY_KEY)


async def _published(
    topic: str, service: PublishService, kind: str, body: bytes, request: Request
) -> bytes | Response:
    """Publish the messages of ``body`` (of ``kind``): the 200 body when every one was stored, else the
    whole response."""
    if kind == "octets":
        outcomes = await service.publish(topic, [parse_raw_message(body, request.headers)], raw=True)
    else:
        # the usual batch read and prepared in one C call; any other body (or the pure path): the reference
        prepared = usual_batch(body, service.max_batch_messages)
        if prepared is not None:
            outcomes = await service.publish_prepared(topic, prepared)
        else:
            outcomes = await service.publish(topic, parse_json_batch(body))
    stored = render_all_stored(topic, outcomes)
    if stored is not None:
        return stored
    results = [_result(o) for o in outcomes]
    first = failed_alike(outcomes)
    if first is not None:
        status = status_of(first.kind)
        headers = (
            {"Retry-After": str(max(1, round(getattr(first, "retry_after", 1))))} if status == 503 else {}
        )
        return JSONResponse({"topic": topic, "results": results, "error": first.to_dict()}, status, headers)
    failed = any(not o.ok for o in outcomes)
    return JSONResponse({"topic": topic, "results": results}, status_code=207 if failed else 200)


@router.get(
    "/{topic}",
    operation_id="getTopic",
    summary="Partitions and brokers of a topic as the gateway sees them",
    response_model=TopicResponse,
    responses=_ERRORS,
)
async def get_topic(topic: str, service: PublishDep) -> dict[str, Any]:
    view = await service.topic(topic)
    return {
        "topic": view.topic,
        "maxMessageSize": view.max_message_size,
        "partitions": [
            {
                "index": p.index,
                "brokerId": p.broker_id,
                "broker": p.broker,
                "partitionId": p.partition_id,
                "partitionKey": p.key,
            }
            for p in view.partitions
        ],
        "shieldedBrokers": view.shielded_brokers,
    }


__all__ = ["PublishRequest", "router", "status_of"]
