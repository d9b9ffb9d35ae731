"""The ``tubemq.gateway.v1.GatewayService`` servicer: thin adapters from protobuf to the runtime's services.

Each method converts its request, calls one service function and converts the answer; service errors
propagate to :mod:`gateway.grpc.interceptors`, which turns them into statuses through
:mod:`gateway.grpc.errors`. Services are looked up on the runtime at call time, so a call that arrives
while the runtime starts or stops gets UNAVAILABLE instead of a crash.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import grpc

from gateway.grpc import convert
from gateway.grpc.call_outcome import forget_failures
from gateway.grpc.consuming import ConsumerRpcs
from gateway.grpc.idempotent import (
    KEY_METADATA,
    REPLAYED_METADATA,
    batch_fingerprint,
    kept,
    metadata_key,
    no_stream_key,
)
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.publish_stream import publish_batch, publish_stream
from gateway.grpc.publish_wire import PublishBatch, publish_handlers, publish_response
from gateway.grpc.replicas import GrpcReplicas
from gateway.grpc.siblings import GrpcSiblings
from gateway.grpc.subscriptions import SubscriptionRpcs
from gateway.runtime import Runtime
from gateway.service.errors import renamed_fields
from gateway.service.idempotency import Replay
from gateway.service.publish import PublishService, failed_alike

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GatewayService"].full_name


def add_to_server(servicer: GatewayServicer, server: grpc.aio.Server) -> None:
    """Serve ``servicer`` on ``server``: the generated registration, with Publish and PublishStream requests
    read by :func:`~gateway.grpc.publish_wire.decode_publish` (the servicer takes them as
    :class:`~gateway.grpc.publish_wire.PublishBatch`)."""
    generated = _Handlers()
    gateway_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, generated)  # type: ignore[no-untyped-call]
    if generated.handlers is None:
        raise RuntimeError("the generated gateway_pb2_grpc registered no method handlers: regenerate it")
    handlers = publish_handlers(generated.handlers)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


class _Handlers:
    """Stands for the server in the generated ``add_GatewayServiceServicer_to_server``: keeps its handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] | None = None

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        if service == SERVICE_NAME:
            self.handlers = handlers


class GatewayServicer(ConsumerRpcs):
    """Implements every RPC of the GatewayService over one shared :class:`Runtime` (the consumer RPCs
    live in :mod:`gateway.grpc.consuming`).

    ``stream_window`` bounds the messages in flight (read, not yet acknowledged) per PublishStream;
    ``subscribe_step`` (seconds) is the longest a Subscribe waits for messages before it looks again at
    whether it was superseded or the server is stopping. ``siblings`` (``serve --workers N``) relays consumer
    calls for a sibling worker's instance to it, ``replicas`` those for another replica's instance.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        stream_window: int = 1000,
        subscribe_step: float = 1.0,
        siblings: GrpcSiblings | None = None,
        replicas: GrpcReplicas | None = None,
    ) -> None:
        if stream_window < 1:
            raise ValueError("stream_window must be >= 1")
        if subscribe_step <= 0:
            raise ValueError("subscribe_step must be > 0 seconds")
        self._runtime = runtime
        self._window = stream_window
        self._step = subscribe_step
        self._stopping = False
        self._siblings = siblings
        self._replicas = replicas
        self._subscriptions = SubscriptionRpcs(runtime.subscriptions)

    def __repr__(self) -> str:
        state = " stopping" if self._stopping else ""
        return f"<GatewayServicer window={self._window} step={self._step}s{state}>"

    def stop(self) -> None:
        """The server is stopping: Subscribe streams end (UNAVAILABLE) at their next step."""
        self._stopping = True

    def _publisher(self) -> PublishService:
        return self._runtime.publisher()

    # --- publishing ---------------------------------------------------------------------------------

    async def Publish(
        self, request: PublishBatch, context: grpc.aio.ServicerContext
    ) -> pb.PublishResponse | bytes:
        try:
            key = metadata_key(context)
            if key is None:
                return await self._publish(request)
            with renamed_fields({"idempotency_key": KEY_METADATA}):
                answer = await self._runtime.idempotent().run(
                    request.topic, key, batch_fingerprint(request), lambda: self._publish(request), kept
                )
        finally:
            request.release()
        if isinstance(answer, Replay):
            context.set_trailing_metadata((*(context.trailing_metadata() or ()), (REPLAYED_METADATA, "true")))
            return answer.body
        return answer

    async def _publish(self, request: PublishBatch) -> pb.PublishResponse | bytes:
        try:
            outcomes = await publish_batch(self._publisher(), request.topic, request.messages)
        finally:
            request.release()
        forget_failures(outcomes)
        failure = failed_alike(outcomes)
        if failure is not None:
            raise failure
        return publish_response(request.topic, outcomes)

    async def PublishStream(
        self, requests: AsyncIterable[PublishBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        no_stream_key(context)
        async for response in publish_stream(
            self._publisher(), requests, self._window, self._runtime.idempotent
        ):
            yield response

    async def GetTopic(
        self, request: pb.GetTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTopicResponse:
        return convert.topic(await self._publisher().topic(request.topic))

    # --- push subscriptions (gateway/grpc/subscriptions.py) ---------------------------------------------

    async def ListSubscriptions(
        self, request: pb.ListSubscriptionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSubscriptionsResponse:
        return await self._subscriptions.list(request)

    async def GetSubscription(
        self, request: pb.GetSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSubscriptionResponse:
        return await self._subscriptions.get(request)

    async def CreateSubscription(
        self, request: pb.CreateSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateSubscriptionResponse:
        return await self._subscriptions.create(request)

    async def ReplaceSubscription(
        self, request: pb.ReplaceSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReplaceSubscriptionResponse:
        return await self._subscriptions.replace(request)

    async def DeleteSubscription(
        self, request: pb.DeleteSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSubscriptionResponse:
        return await self._subscriptions.delete(request)

    async def PauseSubscription(
        self, request: pb.PauseSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.PauseSubscriptionResponse:
        return await self._subscriptions.pause(request)

    async def ResumeSubscription(
        self, request: pb.ResumeSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResumeSubscriptionResponse:
        return await self._subscriptions.resume(request)
