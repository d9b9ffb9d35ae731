"""A REST publish's answer: its status, headers and JSON body, from the outcome of each message.

Every message stored: 200 and ``{"topic": ..., "results": [...]}``, written by :func:`render_stored` (the
C loop of ``gateway/api/_publish_render.c`` where it is built, chosen once at import, which hands anything but
plain ASCII text and int64 numbers to :func:`render_stored_py`, its reference). Some message not stored:
207 with each result's status and error; every message failed alike (the topic unknown, no broker):
that error's status, with the batch's error beside the results. The answer of a refused request (a
:class:`~gateway.service.errors.ServiceError` or an unsupported media type) is :func:`refused_answer`:
the body the app's exception handlers give (``gateway/api/errors.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from fastapi.responses import JSONResponse, Response

from gateway.api.auth import Answer
from gateway.api.errors import STATUS_BY_KIND, error_response
from gateway.api.media_types import UnsupportedMediaType
from gateway.service.errors import ServiceError
from gateway.service.idempotency import Replay
from gateway.service.publish import PublishOutcome, failed_alike
from gateway.tubemq.wire import compiled_or

__all__ = [
    "REPLAYED",
    "publish_answer_of",
    "refused_answer",
    "render_stored",
    "render_stored_py",
    "replayed_answer",
]

#: the answer header marking an answer given again for a repeated Idempotency-Key
REPLAYED = "Idempotent-Replayed"
_JSON_TYPE = (b"content-type", b"application/json")


def _json_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def render_stored_py(topic: str, outcomes: Sequence[PublishOutcome]) -> bytes | None:
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


class PublishRenderLoops(Protocol):
    """What gateway/api/_publish_render.c holds, and its twin :class:`_Python`."""

    def render_stored(self, topic_json: bytes, outcomes: Sequence[Any], /) -> bytes | None:
        """:func:`render_stored_py`'s bytes for ``topic_json`` (the topic as JSON text), or None when an
        outcome holds no result or holds what the reference writes differently (it then writes it)."""


class _Python:
    """The reference of the C loop: :func:`render_stored_py`, given the topic back from its JSON."""

    @staticmethod
    def render_stored(topic_json: bytes, outcomes: Sequence[Any], /) -> bytes | None:
        return render_stored_py(json.loads(topic_json), outcomes)


if TYPE_CHECKING:
    import gateway.api._publish_render as _publish_render

    _stub: PublishRenderLoops = _publish_render

_loops: PublishRenderLoops = compiled_or("gateway.api._publish_render", _Python())


def render_stored(topic: str, outcomes: Sequence[PublishOutcome]) -> bytes | None:
    """The 200 body when every message was stored, else None (:func:`render_stored_py`): in one call of the
    loops chosen at import for a plain ASCII topic, by the reference for what the C loop hands back."""
    if topic.isascii():
        stored = _loops.render_stored(_json_str(topic).encode(), outcomes)
        if stored is not None:
            return stored
    return render_stored_py(topic, outcomes)


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
        "status": STATUS_BY_KIND[outcome.error.kind],
        "error": outcome.error.to_dict(),
    }


def _whole(response: Response) -> Answer:
    """What a (whole, not streamed) response sends."""
    return response.status_code, response.raw_headers, bytes(response.body)


def publish_answer_of(topic: str, outcomes: Sequence[PublishOutcome]) -> Answer:
    """The answer to a publish to ``topic`` whose messages had ``outcomes`` (see the module docstring)."""
    stored = render_stored(topic, outcomes)
    if stored is not None:
        # What Response(stored, media_type="application/json") sends, in the same header order.
        return 200, [(b"content-length", str(len(stored)).encode("latin-1")), _JSON_TYPE], stored
    results = [_result(o) for o in outcomes]
    first = failed_alike(outcomes)
    if first is not None:
        status = STATUS_BY_KIND[first.kind]
        headers = (
            {"Retry-After": str(max(1, round(getattr(first, "retry_after", 1))))} if status == 503 else {}
        )
        return _whole(
            JSONResponse({"topic": topic, "results": results, "error": first.to_dict()}, status, headers)
        )
    failed = any(not o.ok for o in outcomes)
    return _whole(JSONResponse({"topic": topic, "results": results}, status_code=207 if failed else 200))


def refused_answer(exc: ServiceError | UnsupportedMediaType) -> Answer:
    """The answer to a publish refused with ``exc``."""
    if isinstance(exc, UnsupportedMediaType):
        return _whole(exc.response())
    return _whole(error_response(exc))


def replayed_answer(replay: Replay) -> Answer:
    """A kept answer given again for a repeated Idempotency-Key, marked ``Idempotent-Replayed: true``."""
    return _whole(Response(replay.body, replay.status, {REPLAYED: "true"}, media_type="application/json"))
