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
    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, method: str, handler: Any) -> Any:
        codec = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        name = method.lstrip("/")
        attributes = _attributes(method)
        if handler.unary_unary is not None or handler.stream_unary is not None:
            behavior = handler.unary_unary or handler.stream_unary
            factory = (
                grpc.unary_unary_rpc_method_handler
                if handler.unary_unary is not None
                else grpc.stream_unary_rpc_method_handler
            )

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                with tracing.server_span(name, _carrier(context), attributes) as span:
                    failed: BaseException | None = None
                    try:
                        return await behavior(request, context)
                    except BaseException as exc:
                        failed = exc
                        raise
                    finally:
                        _finish(span, context, failed)

            return factory(unary, **codec)
        streaming_behavior = handler.unary_stream or handler.stream_stream
        stream_factory = (
            grpc.unary_stream_rpc_method_handler
            if handler.unary_stream is not None
            else grpc.stream_stream_rpc_method_handler
        )

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            with tracing.server_span(name, _carrier(context), attributes) as span:
                failed: BaseException | None = None
                try:
                    result = streaming_behavior(request, context)
                    if hasattr(result, "__aiter__"):
                        async for item in result:
                            yield item
                    else:
                        await result
                except BaseException as exc:
                    failed = exc
                    raise
                finally:
                    _finish(span, context, failed)

        return stream_factory(streaming, **codec)
