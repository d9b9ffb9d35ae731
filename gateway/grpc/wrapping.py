"""The base of the gateway's server interceptors: each method handler is wrapped once, by its kind.

A subclass says how to wrap a unary-answer behaviour (``_unary``) and a streaming one (``_streaming``); the
handler of every method is wrapped on its first call and the wrapper is kept as long as grpc hands over the
same handler object, so a call costs one dictionary look-up here.

An answer a behaviour hands over as ``bytes`` is taken as already serialized (the consumer answers are
encoded by hand in ``gateway/grpc/consumed_wire.py``); any other answer goes through the method's serializer.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from gateway.observability.grpc_events import BIDI_STREAM, CLIENT_STREAM, SERVER_STREAM, UNARY

__all__ = ["BIDI_STREAM", "CLIENT_STREAM", "SERVER_STREAM", "UNARY", "WrappingInterceptor", "method_codec"]

# the gRPC method kinds handed to ``_unary`` / ``_streaming`` are the metrics' ``grpc_type`` names


class WrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type hints
    #: method -> (the handler we were given, our wrapper)
    _wrapped: dict[str, tuple[Any, Any]]

    def __init__(self) -> None:
        self._wrapped = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return await self._handler(handler_call_details, handler)

    async def _handler(self, details: grpc.HandlerCallDetails, handler: Any) -> Any:
        """The handler grpc gets for this call (by default: ``handler`` wrapped)."""
        return self._cached(self._wrapped, details.method, handler, self._wrap)

    @staticmethod
    def _cached(
        cache: dict[str, tuple[Any, Any]], method: str, handler: Any, make: Callable[[str, Any], Any]
    ) -> Any:
        """``make(method, handler)``, made once while grpc hands over the same handler object."""
        cached = cache.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        made = make(method, handler)
        cache[method] = (handler, made)
        return made

    def _wrap(self, method: str, handler: Any) -> Any:
        return self._wrap_with(method, handler, method_codec(handler))

    def _wrap_with(self, method: str, handler: Any, codec: dict[str, Any]) -> Any:
        """``handler`` wrapped by its kind, with ``codec`` (its serializers, see :func:`method_codec`)."""
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, UNARY, handler.unary_unary), **codec
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(method, CLIENT_STREAM, handler.stream_unary), **codec
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(method, SERVER_STREAM, handler.unary_stream), **codec
            )
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(method, BIDI_STREAM, handler.stream_stream), **codec
        )

    @abstractmethod
    def _unary(self, method: str, kind: str, behavior: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        """The wrapper of a behaviour that answers once (unary and client-streaming methods)."""

    @abstractmethod
    def _streaming(
        self, method: str, kind: str, behavior: Callable[..., Any]
    ) -> Callable[..., AsyncIterator[Any]]:
        """The wrapper of a behaviour that answers with a stream (server-streaming and bidi methods)."""


def method_codec(handler: Any) -> dict[str, Any]:
    """The keyword arguments of grpc's ``*_rpc_method_handler`` for ``handler``'s serializers."""
    return {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": _bytes_or(handler.response_serializer),
    }


def _bytes_or(serialize: Callable[[Any], bytes] | None) -> Callable[[Any], bytes] | None:
    """The method's serializer, taking ``bytes`` answers as already serialized."""
    if serialize is None:
        return None
    serializer = serialize  # bound for the closure, typed as not None

    def serialize_or_pass(message: Any) -> bytes:
        return message if type(message) is bytes else serializer(message)

    return serialize_or_pass
