"""The gRPC server interceptor: request ids, the auth hook, error translation and a call event for metrics.

One interceptor does all four because each layer of Python interceptor costs every call; the jobs stay
separate functions. Per call, in order:

1. **Request id**: the client's ``x-request-id`` when it is a sane token, else a fresh one; sent back in
   the response trailers of every call (and also in the headers of streaming calls), and visible to logs
   through :func:`gateway.observability.request_id.current_request_id`.
2. **Authentication and admission**, before any request message is received
   (``intercept_service``, run when the call's headers are in; the message is read only by the handler
   grpc is given back): the credentials of the call's metadata are checked there
   (:class:`~gateway.grpc.call_admission.CallAdmission`). A call they do not authenticate (or no rule
   allows), and every call of an open method (health), gets its method's handler in the *stream-request*
   form (:func:`gateway.grpc.wrapping.reading_first`): grpc.aio makes the C core receive, decompress and
   parse a unary request before a unary handler runs, while a stream-request handler reads only when asked.
   The refused call is answered without ever reading its message (a 20 MiB gzip-compressed Publish without
   credentials costs its headers, not 20 MiB); a call without metadata credentials on an mTLS listener is
   authenticated from its certificate and then reads its one message; open methods read theirs a few at a
   time (:data:`~gateway.grpc.call_admission.OPEN_READS`). Then, with a
   :class:`~gateway.security.setup.Security`, the method is
   looked up in :data:`gateway.security.operations.GRPC_METHODS` (health checks are open; a method
   missing from the table is refused), the caller is authenticated from the ``authorization`` /
   ``x-api-key`` metadata or (``auth.mtls_principal``) the verified client certificate's subject
   (``auth_context()["x509_subject"]``), and some rule must allow the method's action; the principal is
   then the :func:`~gateway.service.principal.current_principal` of the call. Refusals are UNAUTHENTICATED or
   PERMISSION_DENIED. An extra ``authorize(method, metadata)`` hook may raise
   :class:`~gateway.grpc.errors.AuthError` to refuse a call. What the headers could not settle (a
   certificate's subject, the hook) is settled when the handler runs, in the call's task
   (:class:`~gateway.grpc.late_auth.CallerAuthentication`).

   **Budgets** (with an ``admission``): every call but the open ones counts into the process's
   :class:`~gateway.service.admission.Admission`, the one the REST limits middleware counts into: calls and
   requests in progress (``limits.max_concurrent_requests``) and each caller's share of them
   (``limits.max_concurrent_per_caller``), answered UNAVAILABLE above; publish messages' bytes count into
   ``limits.max_inflight_publish_bytes``, room for each taken before it is received
   (``gateway/grpc/read_room.py``), and every other method's messages are bounded by
   ``limits.max_control_body_bytes`` (``gateway/grpc/call_budget.py``); compressed messages are inflated
   within those bounds (``gateway/grpc/inflate.py``). Health Watch streams are bounded by
   ``max_health_watches`` (RESOURCE_EXHAUSTED above).
3. **Errors** (:mod:`gateway.grpc.call_outcome`): a :class:`~gateway.service.errors.ServiceError` (or
   ``AdapterError``) leaving the servicer ends the call through :func:`gateway.grpc.errors.abort`, and its
   cause is logged (a ``gRPC call refused`` line); any other exception is logged with the request id and
   ends the call with INTERNAL.
4. **Metrics** (events of :mod:`gateway.observability.grpc_events`): a :class:`GrpcCallStarted` event
   when a call starts and a :class:`GrpcCallFinished` event when it ends (method, type, code, seconds) on
   the runtime's event bus. A call the client cancelled (or left) ends with CANCELLED. Streams count the
   messages they receive and send (an integer step per message) and report them in
   :class:`GrpcStreamMessages` events, at most once per :data:`REPORT_INTERVAL` and when they end, so a
   stream's traffic shows while it lasts.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from gateway.config import LimitSettings
from gateway.grpc import call_outcome
from gateway.grpc.call_admission import CallAdmission
from gateway.grpc.call_budget import CALL, checked
from gateway.grpc.call_outcome import REQUEST_ID_HEADER
from gateway.grpc.late_auth import Authorizer, CallerAuthentication
from gateway.grpc.wrapping import Continuation, Handlers, cached, reading_first, wrapped
from gateway.observability.grpc_events import (
    BIDI_STREAM,
    CLIENT_STREAM,
    GrpcCallFinished,
    GrpcCallStarted,
    GrpcStreamMessages,
)
from gateway.observability.request_id import accepted, bind, new_request_id
from gateway.security.operations import grpc_operation
from gateway.security.replica_subject import ReplicaSubjects
from gateway.security.setup import Security
from gateway.service.access import PUBLISH
from gateway.service.admission import Admission
from gateway.service.principal import current_principal
from gateway.tubemq.events import EventBus

#: Seconds between two GrpcStreamMessages reports of one stream (while messages flow).
REPORT_INTERVAL = 1.0


class _Flow:
    """The messages of one stream not reported yet, and when the next report is due."""

    __slots__ = ("due", "received", "sent")

    def __init__(self, due: float) -> None:
        self.received = 0
        self.sent = 0
        self.due = due


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str | bytes]:
    """The call's request headers: those the interceptor was handed for it, else (a handler run without
    it) the context's."""
    call = CALL.get()
    headers = (
        call.metadata if call is not None and call.metadata is not None else context.invocation_metadata()
    )
    return dict(headers or ())


class GatewayInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no type hints
    """Wraps every method handler of the server; see the module docstring. Admission into the budgets is
    its :class:`~gateway.grpc.call_admission.CallAdmission`, the caller settled in the call's task its
    :class:`~gateway.grpc.late_auth.CallerAuthentication`; the handlers it wraps are made once per handler
    object (:mod:`gateway.grpc.wrapping`)."""

    def __init__(
        self,
        *,
        events: EventBus | None = None,
        authorize: Authorizer | None = None,
        security: Security | None = None,
        admission: Admission | None = None,
        limits: Callable[[], LimitSettings] | None = None,
        max_health_watches: int = 64,
        max_message_bytes: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        replica_subjects: Callable[[], ReplicaSubjects | None] = lambda: None,
    ) -> None:
        self._events = events
        self._authorize = authorize
        self._clock = clock
        self._security = security
        self._callers = CallerAuthentication(
            security=security, authorize=authorize, replica_subjects=replica_subjects
        )
        self._calls = CallAdmission(
            security=security,
            admission=admission,
            limits=limits,
            max_health_watches=max_health_watches,
            max_message_bytes=max_message_bytes,
        )
        #: the handlers made for the methods: wrapped, and wrapped in their stream-request form
        self._wrapped: Handlers = {}
        self._lazy_handlers: Handlers = {}

    def __repr__(self) -> str:
        auth = self._security.mode if self._security is not None else "off"
        if self._authorize is not None:
            auth += "+hook"
        return f"<GatewayInterceptor methods={len(self._wrapped)} auth={auth} events={self._events!r}>"

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        """Runs when the call's headers are in and its message is not read: the call is opened in its
        admission, and its credentials checked there from the metadata where they are to be."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        metadata = handler_call_details.invocation_metadata
        lazy = self._calls.start(method, metadata)
        if lazy is None:
            lazy = await self._calls.verdict(method, metadata)
        if not lazy or (handler.unary_unary is None and handler.unary_stream is None):
            # a stream-request method reads its messages only when the (admitted) handler asks for them
            return cached(self._wrapped, method, handler, self._wrap)
        return cached(self._lazy_handlers, method, handler, self._lazy)

    def _wrap(self, method: str, handler: Any) -> Any:
        return wrapped(method, handler, self._calls.codec(method, handler), self._unary, self._streaming)

    def _lazy(self, method: str, handler: Any) -> Any:
        """The stream-request form of a unary-request ``handler``: its one message is read by the handler,
        after the call is admitted (a refused call never reads it)."""
        codec = self._calls.codec(method, handler)
        first = self._calls.first_reader(method)
        return reading_first(method, handler, codec, first, self._unary, self._streaming)

    def _unary(self, method: str, kind: str, behavior: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        begun = GrpcCallStarted(method, kind)  # one event per method: it is frozen

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = self._clock()
            request_id, metadata = self._begin(context, begun)
            code = grpc.StatusCode.OK
            flow = _Flow(started + REPORT_INTERVAL) if kind == CLIENT_STREAM else None
            leave = None
            try:
                pending = self._callers.admit(method, metadata, context)
                if pending is not None:
                    await pending
                leave = self._calls.enter(method, context)
                if flow is not None:
                    request = self._counted(request, flow, method, kind)
                else:  # a message (a refused one raises), or the lazy form's request iterator
                    request = checked(request, self._calls.bounds)
                return await behavior(request, context)
            except BaseException as exc:
                code = call_outcome.code_of(exc, context)
                await call_outcome.answer(exc, context, request_id, method)
                raise
            finally:
                if leave is not None:
                    leave()
                _close_call()
                if flow is not None:
                    self._report(method, kind, flow)
                self._finished(method, kind, code, started, request_id)

        return call

    def _streaming(
        self, method: str, kind: str, behavior: Callable[..., Any]
    ) -> Callable[..., AsyncIterator[Any]]:
        begun = GrpcCallStarted(method, kind)

        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            started = self._clock()
            request_id, metadata = self._begin(context, begun)
            code = grpc.StatusCode.OK
            flow = _Flow(started + REPORT_INTERVAL)
            leave = None
            try:
                pending = self._callers.admit(method, metadata, context)
                if pending is not None:
                    await pending
                leave = self._calls.enter(method, context)
                # Headers only once the call is admitted: a refusal is a clean trailers-only answer (headers
                # sent before an immediate abort made grpc clients now and then see INTERNAL instead).
                await context.send_initial_metadata(((REQUEST_ID_HEADER, request_id),))
                if kind == BIDI_STREAM:
                    request = self._counted(request, flow, method, kind)
                else:
                    request = checked(request, self._calls.bounds)
                result = behavior(request, context)
                if hasattr(result, "__aiter__"):
                    async for item in result:
                        flow.sent += 1
                        if self._clock() >= flow.due:
                            self._report(method, kind, flow)
                        yield item
                else:  # a coroutine that answers through context.write() (its writes are not counted)
                    await result
            except BaseException as exc:
                code = call_outcome.code_of(exc, context)
                await call_outcome.answer(exc, context, request_id, method)
                raise
            finally:
                if leave is not None:
                    leave()
                _close_call()
                self._report(method, kind, flow)
                self._finished(method, kind, code, started, request_id)

        return call

    async def _counted(
        self, requests: AsyncIterator[Any], flow: _Flow, method: str, kind: str
    ) -> AsyncIterator[Any]:
        """The client's stream of requests, counted into ``flow`` (publish messages: each received once the
        call holds room for it)."""
        if grpc_operation(method).action == PUBLISH:
            requests = self._calls.publish_messages(requests)
        async for request in requests:
            flow.received += 1
            if self._clock() >= flow.due:
                self._report(method, kind, flow)
            yield checked(request, self._calls.bounds)

    def _report(self, method: str, kind: str, flow: _Flow) -> None:
        """Report (and reset) the messages counted in ``flow``; the next report is due in an interval."""
        flow.due = self._clock() + REPORT_INTERVAL
        received, sent = flow.received, flow.sent
        if not received and not sent:
            return
        flow.received = flow.sent = 0
        events = self._events
        if events is not None and events.has_subscribers:
            events.emit(GrpcStreamMessages(method, kind, received, sent))

    def _begin(
        self, context: grpc.aio.ServicerContext, begun: GrpcCallStarted
    ) -> tuple[str, dict[str, str | bytes]]:
        events = self._events
        if events is not None and events.has_subscribers:
            events.emit(begun)
        metadata = _metadata(context)
        given = metadata.get(REQUEST_ID_HEADER)
        request_id = (accepted(given) if isinstance(given, str) else None) or new_request_id()
        bind(request_id)  # each call runs in its own task, so this never leaks across calls
        tag = ((REQUEST_ID_HEADER, request_id),)
        # Trailers ride along with the status for free; sending headers early costs a unary call about a
        # third of its throughput, so only streams (where it matters to see the id early) get them, once
        # admitted (see _streaming).
        context.set_trailing_metadata(tag)
        return request_id, metadata

    def _finished(
        self, method: str, kind: str, code: grpc.StatusCode, started: float, request_id: str
    ) -> None:
        events = self._events
        if events is not None and events.has_subscribers:
            principal = current_principal()
            label = None if principal.anonymous else principal.label
            events.emit(GrpcCallFinished(method, code.name, self._clock() - started, request_id, kind, label))


def _close_call() -> None:
    call = CALL.get()
    if call is not None:
        call.close()
