"""REST routes of push subscriptions (docs/push.md, API): list, get, create, replace, delete, pause, resume.

Thin over :class:`gateway.service.push_admin.SubscriptionAdmin`, which gRPC calls the same way. A definition's
body is read only after the caller was authenticated (the middleware), at most
:data:`~gateway.service.push_admin.MAX_DEFINITION_BYTES` of it, and checked by the service.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from gateway.api.deps import RuntimeDep
from gateway.api.errors import RATE_LIMITED_DOC
from gateway.api.media_types import require_json_body
from gateway.api.schemas import ErrorResponse
from gateway.api.subscription_schemas import Subscription, SubscriptionList
from gateway.service.errors import InvalidInput
from gateway.service.push_admin import MAX_DEFINITION_BYTES, definition_too_large

__all__ = ["router"]

router = APIRouter(prefix="/v1/subscriptions", tags=["subscriptions"])


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


_READ_ERRORS: dict[int | str, dict[str, Any]] = {
    403: _error("no rule gives the caller manage_subscriptions on the subscription's group and topics"),
    503: _error("the gateway is starting or stopping; see Retry-After"),
}
_NAMED: dict[int | str, dict[str, Any]] = {404: _error("no subscription of that name")}
_WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **_READ_ERRORS,
    409: _error(
        "the name or the group is taken, the subscription is defined in push.subscriptions_file (change it "
        "there), or another change came first"
    ),
    503: _error(
        "no shared store is set (idempotency.redis_url), or it does not answer: nothing was changed, the "
        "running subscriptions go on; see Retry-After"
    ),
}
_BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: _error("the definition is invalid; `error.field` names the field"),
    413: _error(f"the definition is above {MAX_DEFINITION_BYTES} bytes"),
    415: _error("a body that is not application/json"),
    429: {
        **RATE_LIMITED_DOC,
        "description": "push.max_subscriptions subscriptions are defined: delete one first",
    },
}
_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubscriptionDefinition"}}},
    }
}


async def _definition(request: Request) -> tuple[object, int]:
    """The JSON body, at most MAX_DEFINITION_BYTES of it read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_DEFINITION_BYTES:
        raise definition_too_large()
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_DEFINITION_BYTES:
            raise definition_too_large()
    try:
        return json.loads(body), len(body)
    except (ValueError, RecursionError):
        raise InvalidInput(
            "the body is not a JSON object of a subscription's fields (docs/push.md)"
        ) from None


async def list_subscriptions(runtime: RuntimeDep) -> dict[str, Any]:
    """Every push subscription the caller may manage, with its state in the gateway process that answers."""
    return {"subscriptions": runtime.subscriptions().list()}


async def get_subscription(name: str, runtime: RuntimeDep) -> dict[str, Any]:
    return runtime.subscriptions().get(name)


async def create_subscription(request: Request, runtime: RuntimeDep) -> JSONResponse:
    """Define a subscription; every process of every replica runs it within push.reload_interval seconds."""
    data, size = await _definition(request)
    view = await runtime.subscriptions().create(data, size)
    location = f"{request.url.path.rstrip('/')}/{view['name']}"
    return JSONResponse(view, status_code=201, headers={"Location": location})


async def replace_subscription(name: str, request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    """Replace a subscription made through the API (its runners restart: what they delivered and did not
    settle goes back to the group first)."""
    data, size = await _definition(request)
    return await runtime.subscriptions().replace(name, data, size)


async def delete_subscription(name: str, runtime: RuntimeDep) -> Response:
    await runtime.subscriptions().delete(name)
    return Response(status_code=204)


async def pause_subscription(name: str, runtime: RuntimeDep) -> dict[str, Any]:
    """Stop delivering on every gateway (what was delivered and not settled goes back to the group)."""
    return await runtime.subscriptions().set_paused(name, True)


async def resume_subscription(name: str, runtime: RuntimeDep) -> dict[str, Any]:
    return await runtime.subscriptions().set_paused(name, False)


router.add_api_route(
    "",
    list_subscriptions,
    methods=["GET"],
    operation_id="listSubscriptions",
    summary="List push subscriptions with their state",
    response_model=SubscriptionList,
    response_model_exclude_none=True,
    responses=_READ_ERRORS,
)
router.add_api_route(
    "",
    create_subscription,
    methods=["POST"],
    status_code=201,
    operation_id="createSubscription",
    summary="Define a push subscription (kept in the shared store)",
    response_model=Subscription,
    responses={**_WRITE_ERRORS, **_BODY_ERRORS},
    dependencies=[Depends(require_json_body)],
    openapi_extra=_BODY_DOC,
)
router.add_api_route(
    "/{name}",
    get_subscription,
    methods=["GET"],
    operation_id="getSubscription",
    summary="A push subscription with its state",
    response_model=Subscription,
    response_model_exclude_none=True,
    responses={**_READ_ERRORS, **_NAMED},
)
router.add_api_route(
    "/{name}",
    replace_subscription,
    methods=["PUT"],
    operation_id="replaceSubscription",
    summary="Replace a push subscription made through the API",
    response_model=Subscription,
    response_model_exclude_none=True,
    responses={**_WRITE_ERRORS, **_BODY_ERRORS, **_NAMED},
    dependencies=[Depends(require_json_body)],
    openapi_extra=_BODY_DOC,
)
router.add_api_route(
    "/{name}",
    delete_subscription,
    methods=["DELETE"],
    status_code=204,
    operation_id="deleteSubscription",
    summary="Delete a push subscription made through the API",
    response_class=Response,
    responses={**_WRITE_ERRORS, **_NAMED},
)
router.add_api_route(
    "/{name}/pause",
    pause_subscription,
    methods=["POST"],
    operation_id="pauseSubscription",
    summary="Pause a push subscription made through the API",
    response_model=Subscription,
    response_model_exclude_none=True,
    responses={**_WRITE_ERRORS, **_NAMED},
)
router.add_api_route(
    "/{name}/resume",
    resume_subscription,
    methods=["POST"],
    operation_id="resumeSubscription",
    summary="Resume a paused push subscription made through the API",
    response_model=Subscription,
    response_model_exclude_none=True,
    responses={**_WRITE_ERRORS, **_NAMED},
)
