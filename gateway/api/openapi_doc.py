"""What FastAPI's generated OpenAPI document leaves out: completed here so that it says what the app does.

* the schemas referenced only from hand-written request bodies (``PublishRequest``,
  ``SubscriptionDefinition``);
* FastAPI's default 422 answers dropped (validation errors are answered 400 with ``ErrorResponse`` by
  ``errors.py``), and the security of every operation (``auth.document_security``);
* every header the API reads or sends: ``X-Request-ID`` both ways on every operation and answer,
  ``Retry-After`` on every 503, ``WWW-Authenticate`` on every 401, the answers of the request limits
  (413 and 408 where a body is read, 503 on every operation but the probes), and the headers of single
  operations (``X-TubeMQ-*`` of a raw publish, ``Location`` of a new consumer, ``Last-Event-ID``, the SSE
  answer's cache headers, the proxy headers of the operations whose answers carry URLs; ``X-Forwarded-For``,
  read on every request, is under ``components.parameters``). Answers the server gives to any path outside
  the operations (405 with ``Allow``, 431, 408 for a slow request head) are under ``components.responses``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from fastapi import FastAPI

from gateway.api.auth import document_security
from gateway.api.openapi_examples import add_examples
from gateway.api.schemas import PublishRequest
from gateway.api.subscription_schemas import SubscriptionDefinition

__all__ = ["complete_openapi"]

_ERROR_CONTENT: dict[str, Any] = {
    "application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}
}
_STRING = {"type": "string"}

HEADERS: dict[str, dict[str, Any]] = {
    "X-Request-ID": {
        "description": "the request's id: the caller's X-Request-ID when it is 1-128 characters of "
        "[A-Za-z0-9._:+/=-], else one the gateway made; also `requestId` of an error body",
        "schema": _STRING,
    },
    "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}},
    "WWW-Authenticate": {
        "description": 'the credentials the gateway takes: `Bearer realm="tubemq-gateway"`',
        "schema": _STRING,
    },
    "Location": {"description": "the new consumer instance's URL (as `baseUrl`)", "schema": _STRING},
    "SubscriptionLocation": {"description": "the new push subscription's URL", "schema": _STRING},
    "Allow": {"description": "the methods the path takes", "schema": _STRING},
    "Cache-Control": {"description": "`no-cache`: the stream is live", "schema": _STRING},
    "X-Accel-Buffering": {"description": "`no`: tells nginx not to buffer the stream", "schema": _STRING},
}


def _header_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/headers/{name}"}


#: request headers besides the security schemes' (Authorization, x-api-key)
PARAMETERS: dict[str, dict[str, Any]] = {
    "RequestId": {
        "name": "X-Request-ID",
        "in": "header",
        "required": False,
        "description": "an id to correlate the request with the gateway's logs (kept when it is 1-128 "
        "characters of [A-Za-z0-9._:+/=-]); answered in X-Request-ID",
        "schema": _STRING,
    },
}

_PROXY_NOTE = "believed only from a peer in http.trusted_proxies"
#: proxy headers: the URL the client used (consumer URLs) and the client's address (every operation)
PROXY_PARAMETERS: dict[str, tuple[str, str]] = {
    "Forwarded": ("Forwarded", "RFC 7239; proto= and host= of the last element name the URL the client used"),
    "XForwardedProto": ("X-Forwarded-Proto", "the scheme the client used (last entry)"),
    "XForwardedHost": ("X-Forwarded-Host", "host[:port] the client used (last entry)"),
    "XForwardedPort": ("X-Forwarded-Port", "the port the client used, when X-Forwarded-Host names none"),
    "XForwardedPrefix": ("X-Forwarded-Prefix", "the path prefix the proxy serves the gateway under"),
    "XForwardedFor": ("X-Forwarded-For", "the client's address (uvicorn's rules), for anonymous quotas"),
}
#: W3C trace context, read on every request when tracing is on (gateway/api/tracing.py)
PARAMETERS["Traceparent"] = {
    "name": "traceparent",
    "in": "header",
    "required": False,
    "description": "W3C trace context: the request's span continues this trace (tracing on)",
    "schema": _STRING,
}
PARAMETERS["Tracestate"] = {
    "name": "tracestate",
    "in": "header",
    "required": False,
    "description": "W3C trace state, carried with traceparent (tracing on)",
    "schema": _STRING,
}
for _key, (_name, _what) in PROXY_PARAMETERS.items():
    PARAMETERS[_key] = {
        "name": _name,
        "in": "header",
        "required": False,
        "description": f"{_what}; {_PROXY_NOTE}",
        "schema": _STRING,
    }
#: the operations whose answers carry URLs (baseUrl, Location)
_URL_OPERATIONS = frozenset({"createConsumer", "describeConsumer"})

#: the X-TubeMQ-* headers of a raw (application/octet-stream) publish
RAW_PUBLISH_HEADERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("X-TubeMQ-Key", "messages with one key go to one partition, in order", _STRING),
    ("X-TubeMQ-Partition", "index into GET /v1/topics/{topic} partitions", {"type": "integer", "minimum": 0}),
    ("X-TubeMQ-Attributes", "string attributes k=v,k2=v2 (',' and '=' are reserved)", _STRING),
    ("X-TubeMQ-Stream-Id", "TubeMQ stream id ($msgType$), used by consumer filters", _STRING),
    ("X-TubeMQ-Msg-Time", "message time yyyyMMddHHmm (producer local time)", _STRING),
)

#: answers the server may give to any request, outside every operation
SERVER_RESPONSES: dict[str, dict[str, Any]] = {
    "MethodNotAllowed": {
        "description": "405: the path does not take the method; Allow names those it takes",
        "headers": {"Allow": _header_ref("Allow"), "X-Request-ID": _header_ref("X-Request-ID")},
        "content": _ERROR_CONTENT,
    },
    "HeadersTooLarge": {
        "description": "431: the request head has too many or too large header fields "
        "(limits.max_header_bytes, limits.max_headers); the connection is closed",
    },
    "RequestHeadTimeout": {
        "description": "408: the request head did not arrive within limits.header_timeout; the connection is "
        "closed",
    },
}

#: where the API is: the gateway that serves the document (relative: Swagger UI at /docs calls the host it
#: was loaded from, as without servers), the one ./scripts/run.sh serves, and any other by scheme and host
SERVERS: list[dict[str, Any]] = [
    {"url": "/", "description": "the gateway serving this document"},
    {"url": "http://localhost:8080", "description": "the gateway ./scripts/run.sh serves"},
    {
        "url": "{scheme}://{host}",
        "description": "a deployed gateway, or the ingress in front of it",
        "variables": {
            "scheme": {"enum": ["http", "https"], "default": "https"},
            "host": {"default": "tubemq-gateway.example.com", "description": "host[:port]"},
        },
    },
]

_PROBES = frozenset({"liveness", "readiness"})
_BODY_METHODS = frozenset({"post", "put", "patch"})


def complete_openapi(app: FastAPI) -> None:
    """Replace ``app.openapi`` by one that completes FastAPI's document (see the module docstring)."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = base()
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for model in (PublishRequest, SubscriptionDefinition):
            extra = model.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(extra.pop("$defs", {}))
            schemas[model.__name__] = extra
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        for component in schemas.values():
            _defaults_in_words(component)
        schema["servers"] = copy.deepcopy(SERVERS)
        document_security(schema)
        components["headers"] = copy.deepcopy(HEADERS)
        components["parameters"] = copy.deepcopy(PARAMETERS)
        components["responses"] = copy.deepcopy(SERVER_RESPONSES)
        for item in schema.get("paths", {}).values():
            for method, operation in item.items():
                _complete_operation(method, operation)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _defaults_in_words(component: dict[str, Any]) -> None:
    """A property's default goes into its description instead of a ``default`` keyword.

    Generators read ``default`` as "always present": openapi-typescript (defaultNonNullable, on unless
    told otherwise) types such a property of a named schema as required, so a request body without it
    does not compile. The gateway applies the defaults it names, so a client may always leave them out;
    a ``default: null`` says nothing beyond "optional" and goes. Property titles go too."""
    for prop in component.get("properties", {}).values():
        prop.pop("title", None)  # pydantic's "Sessionkey": generators name inline types after it
        if "default" not in prop:
            continue
        default = prop.pop("default")
        if default is not None:
            described = prop.get("description", "").rstrip(".")
            literal = json.dumps(default)
            prop["description"] = f"{described} (default {literal})" if described else f"default {literal}"


def _error(description: str, **headers: str) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "content": copy.deepcopy(_ERROR_CONTENT)}
    if headers:
        answer["headers"] = {name: _header_ref(ref) for name, ref in headers.items()}
    return answer


def _is_validation_default(answer: dict[str, Any] | None) -> bool:
    """FastAPI's own 422 (its validation error schema), not a 422 an operation declares itself."""
    if answer is None:
        return False
    schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref", "").endswith("/HTTPValidationError"))


def _complete_operation(method: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    if _is_validation_default(responses.get("422")):
        del responses["422"]
        if "400" not in responses:
            responses["400"] = _error("a request field is invalid; `error.field` names it")
    op_id = operation.get("operationId", "")
    parameters: list[dict[str, Any]] = operation.setdefault("parameters", [])
    parameters.append({"$ref": "#/components/parameters/RequestId"})
    if op_id not in _PROBES:
        # RequestLimitsMiddleware: requests in progress above limits.max_concurrent_requests
        responses.setdefault("503", _error("the gateway is overloaded or cannot serve now; see Retry-After"))
    if op_id not in _PROBES and op_id != "metrics":
        responses.setdefault(
            "502",
            _error(
                "TubeMQ refused the request (`error.tubemqErrorCode`), or the replica owning the consumer "
                "instance gave an answer that is not the API's"
            ),
        )
    if method in _BODY_METHODS:
        responses.setdefault("413", _error("the request body is above its limit; `error.limit`"))
        responses.setdefault("408", _error("the request body stalled for limits.body_timeout seconds"))
    if op_id == "publishMessages":
        for name, description, schema in RAW_PUBLISH_HEADERS:
            parameters.append(
                {
                    "name": name,
                    "in": "header",
                    "required": False,
                    "description": f"application/octet-stream only: {description}",
                    "schema": schema,
                }
            )
    if op_id == "streamMessages":
        parameters.append(
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "description": "resume after this event id (sent by browsers when they reconnect)",
                "schema": _STRING,
            }
        )
        ok = responses.get("200", {})
        ok.setdefault("headers", {}).update(
            {
                "Cache-Control": _header_ref("Cache-Control"),
                "X-Accel-Buffering": _header_ref("X-Accel-Buffering"),
            }
        )
    if op_id == "readiness":
        responses.setdefault(
            "503",
            {
                "description": "not ready: `checks` says what is missing",
                "content": {"application/json": {"schema": {}}},
            },
        )
    if op_id in _URL_OPERATIONS:
        parameters += [
            {"$ref": f"#/components/parameters/{key}"} for key in PROXY_PARAMETERS if key != "XForwardedFor"
        ]
    if op_id == "createConsumer":
        responses["201"].setdefault("headers", {})["Location"] = _header_ref("Location")
    if op_id == "createSubscription":
        responses["201"].setdefault("headers", {})["Location"] = _header_ref("SubscriptionLocation")
    add_examples(operation)
    for status, answer in responses.items():
        headers = answer.setdefault("headers", {})
        if status in ("503", "429"):
            headers.setdefault("Retry-After", _header_ref("Retry-After"))
        if status == "401":
            headers["WWW-Authenticate"] = _header_ref("WWW-Authenticate")
        headers["X-Request-ID"] = _header_ref("X-Request-ID")
