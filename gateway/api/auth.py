"""Authentication and per-operation admission of the REST adapter: one pure ASGI middleware.

For every HTTP request, :class:`AuthMiddleware` finds the operation (method + path) in
:data:`gateway.security.operations.REST_OPERATIONS`:

* an open operation (the health probes) runs without looking at credentials;
* any other request must authenticate (401 with ``WWW-Authenticate`` and the API's error body otherwise);
  then a path that is no operation of the app is answered 404 here, and an operation that no rule allows
  the caller (its action on some resource) 403; the rest of the app runs in a
  :func:`~gateway.service.principal.enter_caller` scope of the caller (its principal and address), and the
  services check the exact resource (topic, group, consumer instance owner).

An operation missing from the table is refused (its action is one no rule grants). The operations are
read from the app's OpenAPI document (plus FastAPI's own docs routes) the first time a request needs them;
:func:`rest_operations` gives the same list to tests, which check that every one is in the table. In open
mode (and for open operations) every request runs as the anonymous caller from its client address.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.errors import STATUS_BY_KIND, error_headers
from gateway.api.schemas import error_document
from gateway.observability.access_log import PRINCIPAL_SCOPE_KEY
from gateway.security.credentials import credential_headers, from_headers
from gateway.security.operations import Operation, rest_operation
from gateway.security.replica_subject import REPLICA_CERT_KEY, ReplicaSubjects
from gateway.security.setup import Security
from gateway.service.errors import NotFound, ServiceError, Unauthenticated
from gateway.service.principal import ANONYMOUS, Principal, enter_caller, leave_caller

__all__ = [
    "Answer",
    "AuthMiddleware",
    "RestOperation",
    "authenticate",
    "caller_address",
    "document_security",
    "error_answer",
    "rest_operations",
    "send_error",
]

#: a whole answer: status, headers (ASGI: lower-case names), body
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


def error_answer(exc: ServiceError) -> Answer:
    """``exc`` as the API's error answer (the same as ``gateway/api/errors.py`` renders)."""
    body = json.dumps(error_document(exc.to_dict()), ensure_ascii=False).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error_headers(exc).items()]
    return STATUS_BY_KIND[exc.kind], headers, body


async def send_error(send: Send, exc: ServiceError) -> None:
    """Answer with ``exc`` as the API's error body (:func:`error_answer`)."""
    status, headers, body = error_answer(exc)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True, slots=True)
class RestOperation:
    """One operation of the app: HTTP method, path template, and its key in REST_OPERATIONS."""

    method: str
    path: str
    key: str


def rest_operations(app: FastAPI) -> list[RestOperation]:
    """Every operation the app serves: those of its OpenAPI document, and every other route of the app (the
    OpenAPI document itself, the docs pages and their assets), keyed by its path."""
    found = [
        RestOperation(method.upper(), path, str(spec.get("operationId", f"{method.upper()} {path}")))
        for path, methods in app.openapi().get("paths", {}).items()
        for method, spec in methods.items()
    ]
    documented = {(op.method, op.path) for op in found}
    for route in app.routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if not isinstance(path, str) or not methods:
            continue
        for method in sorted(methods - {"HEAD"}):
            if (method, path) not in documented:
                found.append(RestOperation(method, path, path))
    return found


#: (path regex, {method: operation}) of every path of the app
_Routes = list[tuple[re.Pattern[str], dict[str, Operation]]]


def _compile(app: FastAPI) -> tuple[dict[str, dict[str, Operation]], _Routes]:
    static: dict[str, dict[str, Operation]] = {}
    templated: dict[str, dict[str, Operation]] = {}
    for op in rest_operations(app):
        table = static if "{" not in op.path else templated
        methods = table.setdefault(op.path, {})
        methods[op.method] = rest_operation(op.key)
        if op.method == "GET":
            methods.setdefault("HEAD", methods["GET"])
    return static, [(compile_path(path)[0], methods) for path, methods in templated.items()]


def _believe_replica_cert(scope: Scope, subjects: ReplicaSubjects | None) -> None:
    """On a request another replica forwarded, the client certificate subject it verified and signed
    (:mod:`gateway.security.replica_subject`) replaces the connection's (the forwarding replica's own): in
    the TLS extension, where authentication and a further hop to a sibling worker read it. A signed subject
    that is not believed (not signed for this replica, this request and this connection's certificate, too
    old, or used before) is refused: Unauthenticated, saying why."""
    signed = None
    for name, value in scope["headers"]:
        if name == _REPLICA_CERT:
            signed = value.decode("latin-1")
    if signed is None:
        return
    if subjects is None:
        raise Unauthenticated(f"{REPLICA_CERT_KEY} cannot be checked before this gateway has started")
    extensions = dict(scope.get("extensions") or {})
    tls = extensions.get("tls") or {}
    chain = tls.get("client_cert_chain") if isinstance(tls, dict) else None
    subject = subjects.believe(
        signed,
        request=f"{scope['method']} {scope['path']}",
        peer_certificate=chain[0] if chain else None,
        client=caller_address(scope),
    )
    extensions["tls"] = {**tls, "client_cert_name": subject}
    scope["extensions"] = extensions


_REPLICA_CERT = REPLICA_CERT_KEY.encode()


def _client_cert(scope: Scope) -> str | None:
    tls = (scope.get("extensions") or {}).get("tls")
    name = tls.get("client_cert_name") if isinstance(tls, dict) else None
    return name if isinstance(name, str) and name else None


class AuthMiddleware:
    """See the module docstring. ``security`` returns the process's :class:`Security`; ``app_of`` the
    FastAPI app whose operations are served (read once, when first needed)."""

    def __init__(self, app: ASGIApp, *, security: Callable[[], Security], fastapi: Callable[[], FastAPI]):
        self.app = app
        self._security = security
        self._fastapi = fastapi
        self._routes: tuple[dict[str, dict[str, Operation]], _Routes] | None = None

    def _replica_subjects(self) -> ReplicaSubjects | None:
        """What verifies a client certificate subject another replica relayed (None: not started)."""
        runtime = getattr(self._fastapi().state, "runtime", None)
        return runtime.replica_subjects if runtime is not None else None

    def _methods(self, path: str) -> dict[str, Operation] | None:
        if self._routes is None:
            self._routes = _compile(self._fastapi())
        static, templated = self._routes
        found = static.get(path)
        if found is not None:
            return found
        for regex, methods in templated:
            if regex.match(path) is not None:
                return methods
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":  # lifespan
            await self.app(scope, receive, send)
            return
        if kind == "websocket" and self._security().mode != "open":
            # the API has no WebSocket operation: refuse rather than pass one unchecked
            await send({"type": "websocket.close", "code": 1008, "reason": "no WebSocket operations"})
            return
        try:
            principal = await self.authenticate(scope)
        except ServiceError as exc:
            await send_error(send, exc)  # refused
            return
        # The one place a REST request's caller is set (gateway.service.principal.enter_caller), for every
        # request, open ones included: anonymous callers' limits and quotas are keyed by this address.
        token = enter_caller(principal, caller_address(scope))
        try:
            await self.app(scope, receive, send)
        finally:
            leave_caller(token)

    async def authenticate(self, scope: Scope) -> Principal:
        """The caller's principal for the request of ``scope`` (:func:`authenticate`, with this app's
        operations)."""
        return await authenticate(scope, self._security(), self._methods, self._replica_subjects)


async def authenticate(
    scope: Scope,
    security: Security,
    operations: Callable[[str], dict[str, Operation] | None],
    subjects: Callable[[], ReplicaSubjects | None],
) -> Principal:
    """The caller's principal (ANONYMOUS in open mode and on open operations) for the request of ``scope``;
    raises the ServiceError to answer instead (401, 403, 404). ``operations`` gives the operations a path
    serves by method (None: no operation of the app); ``subjects`` gives what verifies a client certificate
    subject another replica relayed (None: not started)."""
    if security.mode == "open":
        return ANONYMOUS
    methods = operations(scope["path"])
    operation = methods.get(scope["method"]) if methods is not None else None
    if operation is not None and operation.open:
        return ANONYMOUS
    authorization, api_key = credential_headers(scope["headers"])
    authenticator = security.authenticator
    client_cert = None
    if authenticator.mtls:
        _believe_replica_cert(scope, subjects())
        client_cert = _client_cert(scope)
    principal = await authenticator.authenticate(from_headers(authorization, api_key, client_cert))
    if not principal.anonymous:  # the access line names who made the request, refused or not
        scope[PRINCIPAL_SCOPE_KEY] = principal.label
    if methods is None:
        raise NotFound(f"no route {scope['method']} {scope['path']}; see /openapi.json", field="path")
    if operation is not None:  # None: a method the path does not serve (the app answers 405)
        security.admit(operation, principal)
    return principal


def caller_address(scope: Scope) -> str | None:
    """The network address a request's caller is keyed by (anonymous callers' limits and quotas)."""
    client = scope.get("client")
    return client[0] if client else None


SECURITY_SCHEMES: dict[str, dict[str, str]] = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "an API key (from `tubemq-gateway keys new`) or a JWT of the configured OIDC issuer; "
        "needed when auth.mode=required",
    },
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "an API key, as an alternative to the bearer header",
    },
}


def _error_content() -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}


def document_security(schema: dict[str, Any]) -> None:
    """Declare the security schemes, and on every operation what it needs: open operations no security,
    the others a bearer token or an x-api-key with their 401 and 403 answers and the action
    (``x-required-action``) a rule must grant."""
    schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    for methods in schema.get("paths", {}).values():
        for spec in methods.values():
            operation = rest_operation(str(spec.get("operationId", "")))
            if operation.open:
                spec["security"] = []
                continue
            spec["security"] = [{"bearer": []}, {"apiKey": []}]
            spec["x-required-action"] = operation.action
            responses = spec.setdefault("responses", {})
            responses["401"] = {
                "description": "no valid credentials (auth.mode=required); see WWW-Authenticate",
                "content": _error_content(),
            }
            responses["403"] = {
                "description": f"no rule allows the caller `{operation.action}` on this resource; "
                "`error.action` and `error.resource` name it",
                "content": _error_content(),
            }
