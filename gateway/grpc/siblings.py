"""Consumer calls for a sibling worker process's instance (``serve --workers N``), relayed to its gRPC server.

A consumer instance lives in the worker that created it, and its id names that worker. A Poll, Commit,
DeleteConsumer or Subscribe that lands on another worker (a channel's connection goes to whichever worker the
kernel picks) is sent on to the owner's private gRPC listener, a unix socket in the replica's private
directory (mode 0700: only this user reaches it), and the owner's answer (or status, with its trailers) is
passed back; a stream is relayed message by message. The socket's path comes from the worker's context, the
worker index from the verified instance id: never an address a client chose. A sibling that does not
answer died with its instances: the call fails FAILED_PRECONDITION (REST's 410), not UNAVAILABLE.

The relayed call carries the caller's ``authorization``, ``x-api-key`` and ``x-request-id`` (the owner
authenticates and authorizes it again), ``x-tubemq-worker-hop`` (it is never relayed again), and, for a
caller authenticated by a verified client certificate, its subject in ``x-tubemq-client-cert`` (base64url),
which the interceptor believes only on a unix-socket connection (:func:`forwarded_subject`).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from gateway.grpc.errors import DETAILS_TRAILER
from gateway.service.errors import Gone
from gateway.workers.context import WorkerContext

__all__ = [
    "CLIENT_CERT_KEY",
    "HOP_KEY",
    "GrpcSiblings",
    "Relay",
    "forwarded_subject",
    "passed_metadata",
]

HOP_KEY = "x-tubemq-worker-hop"
CLIENT_CERT_KEY = "x-tubemq-client-cert"
_PASSED = ("authorization", "x-api-key", "x-request-id")

_R = TypeVar("_R", bound=Message)


def forwarded_subject(peer: str, metadata: Mapping[str, str | bytes]) -> str | None:
    """The client certificate subject a sibling worker relayed, believed only from a unix-socket peer (the
    private listener); None otherwise."""
    value = metadata.get(CLIENT_CERT_KEY)
    if not peer.startswith("unix:") or not isinstance(value, str) or not value:
        return None
    try:
        subject = base64.urlsafe_b64decode(value.encode("ascii")).decode("utf-8")
    except (ValueError, UnicodeError):
        return None
    return subject or None


class GrpcSiblings:
    """Channels to the sibling workers' private gRPC listeners (opened on first use)."""

    def __init__(self, worker: WorkerContext, service: str) -> None:
        self.worker = worker
        self.service = service
        self._channels: dict[int, grpc.aio.Channel] = {}

    def __repr__(self) -> str:
        return f"<GrpcSiblings worker={self.worker.index}/{self.worker.count} open={sorted(self._channels)}>"

    @staticmethod
    def hopped(metadata: Mapping[str, str | bytes]) -> bool:
        """Whether a sibling relayed this call here."""
        return HOP_KEY in metadata

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()

    def relay(self, worker: int, context: grpc.aio.ServicerContext, subject: str | None) -> Relay:
        """The relay of the call in ``context`` to sibling ``worker`` (with the caller's verified subject)."""
        # A sibling that does not answer died (or is being started again): its instances died with it
        # (its successor releases their partitions), as REST's forwarding tells with a 410.
        unreachable = (
            f"worker {worker} of this gateway, which owns this consumer instance, cannot be reached; the "
            "instance is lost with it: create a new instance with CreateConsumer"
        )
        return Relay(
            self._channel(worker),
            self.service,
            context,
            self._metadata(context, subject),
            unreachable,
            private=True,
        )

    def _channel(self, worker: int) -> grpc.aio.Channel:
        if worker == self.worker.index or not 0 <= worker < self.worker.count:
            raise ValueError(f"worker {worker} is not a sibling of worker {self.worker.index}")
        channel = self._channels.get(worker)
        if channel is None:
            channel = grpc.aio.insecure_channel(f"unix:{self.worker.grpc_socket(worker)}")
            self._channels[worker] = channel
        return channel

    def _metadata(
        self, context: grpc.aio.ServicerContext, subject: str | None
    ) -> tuple[tuple[str, str], ...]:
        passed = list(passed_metadata(context))
        passed.append((HOP_KEY, str(self.worker.index)))
        if subject is not None:
            passed.append((CLIENT_CERT_KEY, base64.urlsafe_b64encode(subject.encode()).decode("ascii")))
        return tuple(passed)


def passed_metadata(context: grpc.aio.ServicerContext) -> tuple[tuple[str, str], ...]:
    """The caller's metadata a relayed call carries: its credentials and request id."""
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata() or ()
        if key in _PASSED and isinstance(value, str)
    )


@dataclass(frozen=True, slots=True)
class Relay:
    """One call (``context``) relayed over ``channel`` to the ``service`` of its owner, with ``metadata``.
    ``unreachable``: the Gone message when the owner cannot be reached (another replica: the instance is
    lost with it); None to pass the owner's UNAVAILABLE on as it is. ``private``: the owner is reached over
    the replica's private directory, whose paths the Gone message does not show. ``bound``: metadata made for
    the relayed method's full name (a subject signed for that call), added to ``metadata``."""

    channel: grpc.aio.Channel
    service: str
    context: grpc.aio.ServicerContext
    metadata: tuple[tuple[str, str], ...]
    unreachable: str | None = None
    private: bool = False
    bound: Callable[[str], tuple[tuple[str, str], ...]] | None = None

    def _path(self, method: str) -> str:
        return f"/{self.service}/{method}"

    def _options(self, path: str) -> dict[str, Any]:
        metadata = self.metadata if self.bound is None else (*self.metadata, *self.bound(path))
        return {"metadata": metadata, "timeout": self.context.time_remaining()}

    async def unary(self, method: str, request: Message, response_type: type[_R]) -> _R:
        """Relay a unary call; the owner's status (and trailers) become this call's on failure."""
        path = self._path(method)
        call: Callable[..., Any] = self.channel.unary_unary(
            path, request_serializer=_serialize, response_deserializer=response_type.FromString
        )
        try:
            answer: _R = await call(request, **self._options(path))
        except grpc.aio.AioRpcError as err:
            await self._abort_as(err)
        return answer

    async def stream(self, method: str, request: Message, response_type: type[_R]) -> AsyncIterator[_R]:
        """Relay a server-streaming call, message by message; cancelled with this call."""
        path = self._path(method)
        call = self.channel.unary_stream(
            path, request_serializer=_serialize, response_deserializer=response_type.FromString
        )(request, **self._options(path))
        try:
            async for message in call:
                yield message
        except grpc.aio.AioRpcError as err:
            await self._abort_as(err)
        finally:
            call.cancel()

    async def _abort_as(self, err: grpc.aio.AioRpcError) -> None:
        """End this call with the owner's status, message and trailers (raises grpc's AbortError); Gone
        when the owner could not be reached (an UNAVAILABLE no gateway answered: no status details)."""
        trailers = tuple((key, value) for key, value in err.trailing_metadata() or ())
        answered = any(key == DETAILS_TRAILER for key, _ in trailers)
        if self.unreachable is not None and err.code() == grpc.StatusCode.UNAVAILABLE and not answered:
            cause = "no answer on its private listener" if self.private else err.details() or "unreachable"
            raise Gone(f"{self.unreachable} ({cause})")
        await self.context.abort(err.code(), err.details() or "", trailers)


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()
