"""A SERVER span per gRPC call, continuing the caller's W3C ``traceparent`` metadata.

Added in front of the gateway's own interceptor only while tracing is on
(:mod:`gateway.observability.tracing`), so the span covers authentication and the whole call (a stream's
whole life). Named after the full method (``package.Service/Method``) with ``rpc.system``, ``rpc.service``,
``rpc.method`` and ``rpc.grpc.status_code``; any status but OK (a client's cancel included) sets it to error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from gateway.grpc.wrapping import Continuation, Handlers, cached, method_codec, wrapped
from gateway.observability import tracing

__all__ = ["TracingInterceptor"]

_PROPAGATED = ("traceparent", "tracestate")


def _carrier(context: grpc.aio.ServicerContext) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if key in _PROPAGATED and isinstance(value, str):
            out[key] = value
    return out


def _attributes(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


def _finish(span: Any, context: grpc.aio.ServicerContext, failed: BaseException | None) -> None:
    if span is None:
        return
    code = context.code()
    if code is None:
        if failed is None:
            code = grpc.StatusCode.OK
        elif isinstance(failed, asyncio.CancelledError):
            code = grpc.StatusCode.CANCELLED
        else:
            code = grpc.StatusCode.UNKNOWN
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code is not grpc.StatusCode.OK:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, code.name))


class TracingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type hints
    """Wraps each method handler in a span (made once per handler object, :mod:`gateway.grpc.wrapping`)."""

    def __init__(self) -> None:
        self._wrapped: Handlers = {}

    def __repr__(self) -> str:
        return f"<TracingInterceptor methods={len(self._wrapped)}>"

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return cached(self._wrapped, handler_call_details.method, handler, self._wrap)

    def _wrap(self, method: str, handler: Any) -> Any:
        return wrapped(method, handler, method_codec(handler), self._unary, self._streaming)

    def _unary(self, method: str, kind: str, behavior: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        name, attributes = method.lstrip("/"), _attributes(method)

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with tracing.server_span(name, _carrier(context), attributes) as span:
                failed: BaseException | None = None
                try:
                    return await behavior(request, context)
                except BaseException as exc:
                    failed = exc
                    raise
                finally:
                    _finish(span, context, failed)

        return call

    def _streaming(
        self, method: str, kind: str, behavior: Callable[..., Any]
    ) -> Callable[..., AsyncIterator[Any]]:
        name, attributes = method.lstrip("/"), _attributes(method)

        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            with tracing.server_span(name, _carrier(context), attributes) as span:
                failed: BaseException | None = None
                try:
                    result = behavior(request, context)
                    if hasattr(result, "__aiter__"):
                        async for item in result:
                            yield item
                    else:  # a coroutine that answers through context.write()
                        await result
                except BaseException as exc:
                    failed = exc
                    raise
                finally:
                    _finish(span, context, failed)

        return call
