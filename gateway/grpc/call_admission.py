"""Admission of gRPC calls before their request message is read, and into the process's budgets.

:class:`CallAdmission` is the collaborator of :class:`~gateway.grpc.interceptors.GatewayInterceptor` that
holds the process's budgets (see the interceptor's module docstring, step 2). :meth:`CallAdmission.start`
runs when a call's headers are in and before grpc receives its message: it authenticates the call from its
metadata into the call's :class:`~gateway.grpc.call_budget.CallState` and says whether the handler must be
the *stream-request* form (a call that is refused, of an open method, to be authenticated from its client
certificate, or a Publish), which reads the one request message itself once the call is admitted
(:meth:`CallAdmission.first_reader`), so that a refused call never has it read (grpc.aio has the C core
receive, decompress and parse a unary request before a unary handler runs). :meth:`CallAdmission.enter`
counts an admitted call into the budgets (the process's :class:`~gateway.service.admission.Admission`, or
the health Watch bound). A publish message (Publish, PublishStream) is read only once the call holds room for
it in the in-flight publish bytes (:meth:`CallAdmission.publish_messages`, ``gateway/grpc/read_room.py``): a
message costs memory only after it is admitted into the budget, whatever it weighs on the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from gateway.config import GrpcSettings, LimitSettings
from gateway.grpc import errors
from gateway.grpc.call_budget import CALL, CallState, bounded, budgeted, checked
from gateway.grpc.inflate import compressed_head
from gateway.grpc.publish_wire import leading_topic
from gateway.grpc.read_room import ReadRoom
from gateway.grpc.wrapping import method_codec
from gateway.security.credentials import Credentials, credential_headers, from_headers
from gateway.security.operations import grpc_operation
from gateway.security.setup import Security
from gateway.service.access import PUBLISH
from gateway.service.admission import Admission, caller_bytes, caller_share
from gateway.service.errors import InvalidInput, ServiceError, Unavailable
from gateway.service.principal import current_caller

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "OPEN_READS", "CallAdmission", "TooManyCalls", "metadata_text"]

#: Request messages of open methods (health: no credentials) read at once, and the seconds one may take:
#: each read may make the C core decompress up to ``grpc.max_message_bytes`` before the method's bound
#: refuses it, so unauthenticated reads are few at a time.
OPEN_READS = 4

#: inflated bytes looked at for a compressed Publish's topic (its tag, length and name)
_TOPIC_HEAD = 512
OPEN_READ_TIMEOUT = 2.0

#: copies of a message grpc-python holds while it is received (the core's frames, a bytearray, bytes, the
#: parsed message): a caller's reads in progress may hold room for this part of its share of the in-flight
#: publish bytes, so that what they cost in memory stays within the share
READ_COPIES = 4

#: the most a publish message may weigh when the server names no bound
DEFAULT_MAX_MESSAGE_BYTES = GrpcSettings().max_message_bytes

_WATCH = "/grpc.health.v1.Health/Watch"


class TooManyCalls(errors.AdapterError):
    """More calls of a kind than the server takes at once."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class CallAdmission:
    """See the module docstring."""

    def __init__(
        self,
        *,
        security: Security | None = None,
        admission: Admission | None = None,
        limits: Callable[[], LimitSettings] | None = None,
        max_health_watches: int = 64,
        max_message_bytes: int | None = None,
    ) -> None:
        self._security = security
        self._admission = admission if admission is not None else Admission()
        #: room for publish messages about to be read
        self._room = ReadRoom(self._admission)
        defaults = LimitSettings()
        #: the limits, read per call (the runtime's settings; tests may swap them)
        self._limits = limits if limits is not None else lambda: defaults
        self._max_watches = max_health_watches
        #: the most a publish message may weigh once received and inflated (the server's
        #: grpc.max_receive_message_length); None: grpc.max_message_bytes's default
        self._max_message_bytes = max_message_bytes
        self._watches = 0
        self._open_reads = asyncio.Semaphore(OPEN_READS)

    def __repr__(self) -> str:
        return f"<CallAdmission watches={self._watches}/{self._max_watches} admission={self._admission!r}>"

    def start(self, method: str, metadata: Any) -> bool | None:
        """Open the call's :class:`CallState` (for the handler and the deserializer of this call, which run
        in this task: see call_budget); whether its handler must be the stream-request form, or None when
        its credentials are to be checked first (:meth:`verdict`)."""
        call = CallState(self._admission, metadata)
        CALL.set(call)
        operation = grpc_operation(method)
        if operation.open:
            return True
        security = self._security
        if security is None or security.mode == "open":
            # a publish message is read only once the call holds room for it (publish_messages)
            return operation.action == PUBLISH
        return None

    async def verdict(self, method: str, metadata: Any) -> bool:
        """Authenticate the call from its metadata into its :class:`CallState`; True when its handler must
        be the stream-request form (refused, to be authenticated from its client certificate, or a
        Publish)."""
        call = CALL.get()
        assert call is not None  # start opened it
        operation = grpc_operation(method)
        security = self._security
        assert security is not None  # start answers every call without security
        authenticator = security.authenticator
        try:
            credentials = from_headers(*credential_headers(metadata or ()))
            if credentials.empty:
                if authenticator.mtls:
                    return True  # the handler authenticates it from the connection's certificate
                await authenticator.authenticate(Credentials())  # raises: no credentials
            call.principal = await authenticator.authenticate(credentials)  # logged, admitted or not
            security.admit(operation, call.principal)
        except ServiceError as exc:
            call.error = exc
            return True
        return operation.action == PUBLISH

    def first_reader(self, method: str) -> Callable[[grpc.aio.ServicerContext], Awaitable[Any]]:
        """How the stream-request form of ``method``'s handler reads its one message."""
        operation = grpc_operation(method)
        if operation.open:
            return self._first_open
        if operation.action == PUBLISH:
            return self._first_publish
        return self._first

    async def _first(self, context: grpc.aio.ServicerContext) -> Any:
        return checked(await _one(context), self.bounds)

    async def _first_publish(self, context: grpc.aio.ServicerContext) -> Any:
        """A Publish's message, received once the call holds room for it (:meth:`_take_room`)."""
        call = CALL.get()
        await self._take_room(call, queue=False)
        try:
            request = await _one(context)
        finally:
            if call is not None:
                call.give_back_room()  # what the message did not take (the deserializer took its own)
        return checked(request, self.bounds)

    async def publish_messages(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """``requests`` (a PublishStream's), each message received only once the call holds room for it
        (waiting for it even when messages being published hold the budget: the stream's own may)."""
        call = CALL.get()
        while True:
            await self._take_room(call, queue=True)
            try:
                request = await anext(requests)
            except StopAsyncIteration:
                return
            finally:
                if call is not None:
                    call.give_back_room()
            yield request

    async def _take_room(self, call: CallState | None, *, queue: bool) -> None:
        """Room in the in-flight publish bytes for the call's next message, before it is received: the most
        a message can weigh (or the whole budget when smaller), waiting up to ``limits.body_timeout``
        seconds for it (see gateway/grpc/read_room.py for ``queue``); the deserializer keeps what the
        message takes (gateway/grpc/call_budget.py)."""
        if call is None:
            return
        limits = self._limits()
        cap = limits.max_inflight_publish_bytes
        if cap:
            room = min(self._publish_bound(), cap)
            total = limits.max_concurrent_requests
            share = caller_bytes(cap, total, caller_share(total, limits.max_concurrent_per_caller))
            if share:  # room for a message being received costs about READ_COPIES times it in memory
                share = max(1, share // READ_COPIES)
            caller = current_caller().key
            await self._room.take(room, cap, limits.body_timeout, queue=queue, caller=caller, share=share)
            call.reads, call.room, call.caller = self._room, room, caller

    def _screen(self, raw: bytes) -> ServiceError | None:
        """Why a compressed Publish message is refused from its first inflated bytes: its topic (the
        request's first field) is one the call's principal may not publish on. None: read it."""
        security = self._security
        call = CALL.get()
        if security is None or not security.policy.enforcing or call is None or call.principal is None:
            return None
        head = compressed_head(raw, _TOPIC_HEAD)
        topic = leading_topic(head) if head is not None else None
        if topic is None:
            return None
        try:
            security.policy.check(call.principal, PUBLISH, topic=topic)
        except ServiceError as exc:
            return exc
        return None

    def _publish_bound(self) -> int:
        """The most a publish message may weigh, inflated."""
        return self._max_message_bytes or DEFAULT_MAX_MESSAGE_BYTES

    async def _first_open(self, context: grpc.aio.ServicerContext) -> Any:
        """An open method's message: a few at a time, each within OPEN_READ_TIMEOUT."""
        try:
            async with self._open_reads, asyncio.timeout(OPEN_READ_TIMEOUT):
                return await self._first(context)
        except TimeoutError:
            raise InvalidInput(
                f"the request message did not come within {OPEN_READ_TIMEOUT:g} s", field="request"
            ) from None

    def bounds(self) -> tuple[int, int]:
        limits = self._limits()
        return limits.max_inflight_publish_bytes, limits.max_control_body_bytes

    def codec(self, method: str, handler: Any) -> dict[str, Any]:
        """The method's serializers, with its request messages budgeted (publish) or bounded (the rest)."""
        codec = method_codec(handler)
        deserialize = codec["request_deserializer"]
        if deserialize is not None:
            if grpc_operation(method).action == PUBLISH:
                # a Publish to a topic its caller may not use is refused before its message is inflated (a
                # PublishStream's requests are answered by their acks instead, the stream going on)
                screen = self._screen if method.endswith("/Publish") else None
                codec["request_deserializer"] = budgeted(
                    deserialize,
                    lambda: self._limits().max_inflight_publish_bytes,
                    self._publish_bound,
                    screen,
                )
            else:
                codec["request_deserializer"] = bounded(
                    deserialize, lambda: self._limits().max_control_body_bytes
                )
        return codec

    # --- in the handler: admission into the budgets ----------------------------------------------------

    def enter(self, method: str, context: grpc.aio.ServicerContext) -> Callable[[], None] | None:
        """Count the call into its budget (raises when it holds no place); the function that gives the
        place back."""
        if grpc_operation(method).open:
            if method != _WATCH:
                return None
            if self._watches >= self._max_watches:
                raise TooManyCalls(
                    f"this server has its maximum of {self._max_watches} health Watch streams open "
                    "(grpc.max_health_watches); use Check, or retry later"
                )
            self._watches += 1
            return self._watch_ended
        limits = self._limits()
        caller = current_caller().key  # entered before the call is counted (gateway/grpc/interceptors.py)
        share = caller_share(limits.max_concurrent_requests, limits.max_concurrent_per_caller)
        refusal = self._admission.enter(caller, limits.max_concurrent_requests, share)
        if refusal is not None:
            raise Unavailable(refusal.message("requests and calls"), retry_after=1.0)
        admission = self._admission
        return lambda: admission.leave(caller)

    def _watch_ended(self) -> None:
        self._watches -= 1


async def _one(context: grpc.aio.ServicerContext) -> Any:
    """A unary-request call's message, read through the context (grpc.aio's request iterator is an async
    generator that, left unfinished after its one message, is closed later in a task of its own: a task and
    a wake-up of the loop per call)."""
    request = await context.read()
    if request is grpc.aio.EOF:
        raise InvalidInput("the call carried no request message", field="request")
    return request


def metadata_text(value: str | bytes | None) -> str | None:
    """A metadata value as text (a ``-bin`` value decoded as Latin-1)."""
    return value.decode("latin-1") if isinstance(value, bytes) else value
