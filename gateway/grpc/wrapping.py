"""How a server interceptor wraps a method handler: by its kind, once per handler object.

An interceptor hands :func:`wrapped` its wrapper of a unary-answer behaviour (``unary``) and of a streaming
one (``streaming``); :func:`cached` keeps the handler it made as long as grpc hands over the same handler
object, so a call costs one dictionary look-up. :func:`reading_first` makes the *stream-request* form of a
unary-request handler: its one message is read by the wrapped behaviour, when it asks (``first``).

An answer a behaviour hands over as ``bytes`` is taken as already serialized (the consumer answers are
encoded by hand in ``gateway/grpc/consumed_wire.py``); any other answer goes through the method's serializer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from gateway.observability.grpc_events import BIDI_STREAM, CLIENT_STREAM, SERVER_STREAM, UNARY

__all__ = [
    "BIDI_STREAM",
    "CLIENT_STREAM",
    "SERVER_STREAM",
    "UNARY",
    "Continuation",
    "Handlers",
    "Wrapper",
    "cached",
    "method_codec",
    "reading_first",
    "wrapped",
]

# the gRPC method kinds handed to the wrappers are the metrics' ``grpc_type`` names

#: what grpc hands an interceptor's ``intercept_service``: the next step, which answers the method's handler
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]

#: ``wrapper(method, kind, behavior)``: the behaviour grpc runs in place of ``behavior``
Wrapper = Callable[[str, str, Callable[..., Any]], Callable[..., Any]]

#: method -> (the handler grpc handed over, the handler made from it)
Handlers = dict[str, tuple[Any, Any]]

#: ``first(context)``: a call's one request message, read when the call is admitted
First = Callable[[grpc.aio.ServicerContext], Awaitable[Any]]


def cached(cache: Handlers, method: str, handler: Any, make: Callable[[str, Any], Any]) -> Any:
    """``make(method, handler)``, made once while grpc hands over the same handler object."""
    made = cache.get(method)
    if made is not None and made[0] is handler:
        return made[1]
    made_now = make(method, handler)
    cache[method] = (handler, made_now)
    return made_now


def wrapped(method: str, handler: Any, codec: dict[str, Any], unary: Wrapper, streaming: Wrapper) -> Any:
    """``handler`` wrapped by its kind, with ``codec`` (its serializers, see :func:`method_codec`)."""
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary(method, UNARY, handler.unary_unary), **codec)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            unary(method, CLIENT_STREAM, handler.stream_unary), **codec
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            streaming(method, SERVER_STREAM, handler.unary_stream), **codec
        )
    return grpc.stream_stream_rpc_method_handler(
        streaming(method, BIDI_STREAM, handler.stream_stream), **codec
    )


def reading_first(
    method: str, handler: Any, codec: dict[str, Any], first: First, unary: Wrapper, streaming: Wrapper
) -> Any:
    """The stream-request form of a unary-request ``handler``, wrapped: its one message is read by
    ``first`` inside the wrapped behaviour (grpc.aio makes the C core receive, decompress and parse a unary
    request before a unary handler runs; a stream-request handler reads only when asked)."""
    if handler.unary_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            unary(method, UNARY, _after_first(handler.unary_unary, first)), **codec
        )
    return grpc.stream_stream_rpc_method_handler(
        streaming(method, SERVER_STREAM, _stream_after_first(handler.unary_stream, first)), **codec
    )


def _after_first(behavior: Callable[..., Awaitable[Any]], first: First) -> Callable[..., Awaitable[Any]]:
    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        return await behavior(await first(context), context)

    return call


def _stream_after_first(behavior: Callable[..., Any], first: First) -> Callable[..., AsyncIterator[Any]]:
    async def call(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        result = behavior(await first(context), context)
        if hasattr(result, "__aiter__"):
            async for item in result:
                yield item
        else:
            await result

    return call


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
