"""The events of gRPC calls: the gRPC adapter's interceptor emits them on the runtime's event bus, the
metrics (:mod:`gateway.observability.metrics_grpc`) and the event logger read them. They live here, below
the adapter, so that observability imports no adapter."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.tubemq.events import Event

__all__ = [
    "BIDI_STREAM",
    "CLIENT_STREAM",
    "SERVER_STREAM",
    "UNARY",
    "GrpcCallFinished",
    "GrpcCallStarted",
    "GrpcStreamMessages",
]

#: the gRPC method kinds (the metrics' ``grpc_type``), named as go-grpc-prometheus names them
UNARY, CLIENT_STREAM, SERVER_STREAM, BIDI_STREAM = "unary", "client_stream", "server_stream", "bidi_stream"


@dataclass(frozen=True, slots=True)
class GrpcCallStarted(Event):
    """A gRPC call started. ``method`` is the full name (``/tubemq.gateway.v1.GatewayService/Publish``),
    ``grpc_type`` one of ``unary``, ``client_stream``, ``server_stream``, ``bidi_stream``."""

    method: str
    grpc_type: str


@dataclass(frozen=True, slots=True)
class GrpcStreamMessages(Event):
    """Messages a stream received from the client (client and bidi streams) and sent to it (server and
    bidi streams) since its last report. Unary requests and responses are not reported here: a unary
    call receives one message, and sends one when it ends OK."""

    method: str
    grpc_type: str
    received: int
    sent: int


@dataclass(frozen=True, slots=True)
class GrpcCallFinished(Event):
    """One gRPC call ended. ``code`` is the status code name (``OK``, ``INVALID_ARGUMENT``, ``CANCELLED``
    when the client cancelled or went away...)."""

    method: str
    code: str
    duration: float  # seconds
    request_id: str
    grpc_type: str = UNARY
    principal: str | None = None  # the caller's label (api_key:alice...) once authenticated, admitted or not
