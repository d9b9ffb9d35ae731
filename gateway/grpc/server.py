"""The gRPC adapter: a ``grpc.aio`` server on its own port, in the caller's event loop, over the one Runtime.

It serves ``tubemq.gateway.v1.GatewayService``, the standard health service (SERVING only while
``runtime.readiness()`` says ready) and server reflection, v1 and v1alpha (so ``grpcurl`` needs no .proto
files). Create
and start it inside the running loop that also runs the HTTP app; ``stop`` reports NOT_SERVING, refuses
new calls, and gives the calls in progress ``grace`` seconds before cancelling them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import grpc
from grpc_health.v1 import health_pb2_grpc

from gateway.config import Settings
from gateway.grpc.call_admission import DEFAULT_MAX_MESSAGE_BYTES, OPEN_READS
from gateway.grpc.health import HEALTH_SERVICE_NAME, ReadinessHealth
from gateway.grpc.interceptors import GatewayInterceptor
from gateway.grpc.late_auth import Authorizer
from gateway.grpc.reflection import enable_reflection
from gateway.grpc.replicas import GrpcReplicas
from gateway.grpc.servicer import SERVICE_NAME, GatewayServicer, add_to_server
from gateway.grpc.siblings import GrpcSiblings
from gateway.grpc.tracing import TracingInterceptor
from gateway.observability import tracing
from gateway.runtime import Runtime
from gateway.tls import grpc_server_credentials

log = logging.getLogger("gateway.grpc")


class GrpcServer:
    """One gRPC server bound to ``host:port`` (port 0 picks a free one; see :attr:`port` after start).

    ``grace`` (seconds) is what :meth:`stop` gives calls in progress; ``stream_window`` bounds the
    in-flight messages of each PublishStream; ``subscribe_step`` (seconds) is how long a Subscribe waits
    for messages before it checks whether it must end; ``max_message_bytes`` bounds one request message
    (larger ones fail with RESOURCE_EXHAUSTED, refused by the C core from their length prefix before they
    are received; a compressed one also once inflated); ``health_interval`` (seconds) is how often health
    Watch streams look at readiness. Every call is authenticated and admitted by ``runtime.security`` (see
    :mod:`gateway.grpc.interceptors`); ``authorize`` is an extra hook; ``credentials`` make the port a TLS
    one (None: plaintext); ``reuse_port`` lets the sibling worker processes of ``serve --workers N`` bind
    the same port (``SO_REUSEPORT``).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        grace: float = 10.0,
        stream_window: int = 1000,
        subscribe_step: float = 1.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        health_interval: float = 1.0,
        authorize: Authorizer | None = None,
        credentials: grpc.ServerCredentials | None = None,
        reuse_port: bool = False,
    ) -> None:
        self.runtime = runtime
        self.reuse_port = reuse_port
        self.credentials = credentials
        self.host = host
        self.grace = grace
        self._requested_port = port
        self._max_message_bytes = max_message_bytes
        worker = runtime.worker
        # serve --workers N: consumer calls for a sibling worker's instance are relayed to it
        self.siblings = GrpcSiblings(worker, SERVICE_NAME) if worker is not None else None
        # consumer calls for another replica's instance are relayed to it
        self.replicas = GrpcReplicas.from_settings(
            runtime.settings, SERVICE_NAME, lambda: runtime.replica_subjects
        )
        self.servicer = GatewayServicer(
            runtime,
            stream_window=stream_window,
            subscribe_step=subscribe_step,
            siblings=self.siblings,
            replicas=self.replicas,
        )
        self.health = ReadinessHealth(
            lambda: runtime.readiness()[0], [SERVICE_NAME], watch_interval=health_interval
        )
        self.interceptor = GatewayInterceptor(
            events=runtime.events,
            authorize=authorize,
            security=runtime.security,
            admission=runtime.admission,
            limits=lambda: runtime.settings.limits,
            max_health_watches=runtime.settings.grpc.max_health_watches,
            max_message_bytes=max_message_bytes,
            replica_subjects=lambda: runtime.replica_subjects,
        )
        self._server: Any = None
        self._port: int | None = None

    def __repr__(self) -> str:
        state = "stopped" if self._server is None else f"listening on {self.address}"
        return f"<GrpcServer {state} grace={self.grace}s>"

    @property
    def port(self) -> int:
        """The bound port; only valid after :meth:`start`."""
        if self._port is None:
            raise RuntimeError("the gRPC server is not started")
        return self._port

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def _tracing(self) -> list[TracingInterceptor]:
        """A SERVER span per call when tracing is configured (gateway/grpc/tracing.py)."""
        on = self.runtime.settings.tracing.enabled or tracing.enabled()
        return [TracingInterceptor()] if on else []

    async def start(self) -> None:
        """Bind and start serving; raises OSError when the port cannot be bound."""
        if self._server is not None:
            raise RuntimeError("the gRPC server is already started")
        s = self.runtime.settings
        server = grpc.aio.server(
            interceptors=[*self._tracing(), self.interceptor],
            **core_options(s, max_message_bytes=self._max_message_bytes, reuse_port=self.reuse_port),
        )
        add_to_server(self.servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        enable_reflection((SERVICE_NAME, HEALTH_SERVICE_NAME), server)
        try:
            address = f"{self.host}:{self._requested_port}"
            if self.credentials is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, self.credentials)
            worker = self.runtime.worker
            if worker is not None:
                # the private listener siblings relay consumer calls to (a unix socket in a 0700 directory)
                private = worker.grpc_socket(worker.index)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(private)  # left by a worker that died
                address = f"unix:{private}"
                server.add_insecure_port(address)
        except RuntimeError as exc:
            # grpc.aio's stop() does nothing on a server that never started, so the core server (and the
            # event engine threads it keeps alive) would leak; those threads make any later fork() of
            # this process abort the child. Starting it bound to no port, then stopping, frees it all.
            await server.start()
            await server.stop(0)
            raise OSError(f"cannot bind the gRPC address {address}: {exc}") from exc
        await server.start()
        self._server, self._port = server, port
        # the ids of this replica's consumer instances name the port, where other replicas relay to
        if self.runtime.consumers is not None:
            self.runtime.consumers.grpc_port = port
        if self.replicas is not None:
            self.replicas.allow_port(port)
        log.info(
            "gRPC server listening", extra={"address": self.address, "tls": self.credentials is not None}
        )
        cap = s.limits.max_inflight_publish_bytes
        if cap and cap < self._max_message_bytes:
            # a publish message is received only once the most it may weigh fits (gateway/grpc/read_room.py)
            log.warning(
                "gRPC publish messages are received one at a time: this process's share of "
                "limits.max_inflight_publish_bytes is below the largest message (grpc.max_message_bytes), "
                "so a message is received only when no other publish bytes are held; raise the cap or lower "
                "grpc.max_message_bytes",
                extra={"max_inflight_publish_bytes": cap, "max_message_bytes": self._max_message_bytes},
            )

    async def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, refuse new calls, give running calls ``grace`` seconds (default: the
        constructor's), then cancel them. Safe to call twice or before start."""
        server, self._server = self._server, None
        self.health.shutdown()
        self.servicer.stop()
        if server is None:
            return
        await server.stop(self.grace if grace is None else grace)
        if self.siblings is not None:
            await self.siblings.close()
        if self.replicas is not None:
            await self.replicas.close()
        log.info("gRPC server stopped")


def core_options(settings: Settings, *, max_message_bytes: int, reuse_port: bool) -> dict[str, Any]:
    """The ``grpc.aio.server`` arguments of the gateway's server but its interceptors: the core's own bounds,
    behind the interceptor's finer ones (gateway/grpc/interceptors.py): calls in progress (those counted in
    ``limits.max_concurrent_requests``, the health Watch streams, the open reads, and a margin for refusals
    being answered), streams per connection, connections, a request message's size."""
    calls = settings.limits.max_concurrent_requests
    grpc_settings = settings.grpc
    most = calls + grpc_settings.max_health_watches + OPEN_READS + 64 if calls else None
    return {
        "maximum_concurrent_rpcs": most,
        "options": [
            ("grpc.max_concurrent_streams", grpc_settings.max_streams_per_connection),
            ("grpc.max_allowed_incoming_connections", grpc_settings.max_connections),
            # refused from its length prefix, before it is received
            ("grpc.max_receive_message_length", max_message_bytes),
            # Compressed messages are inflated by the request deserializers, within the method's bound and
            # after the call holds room for them (gateway/grpc/inflate.py): the core would inflate each
            # whole, and copy it twice, before any of the gateway's bounds could look at it.
            ("grpc.per_message_decompression", 0),
            # Without BDP probing the core's HTTP/2 windows stay at their initial size, so a stream the
            # gateway is not reading (a call waiting for admission or for room in the in-flight publish
            # bytes) cannot push more than that into memory; a message being read gets a window for its
            # whole announced size.
            ("grpc.http2.bdp_probe", 0),
            # grpc shares a port between processes by default; a second gateway on the same port must fail
            # to start instead of silently receiving half of the calls. Worker processes of one gateway
            # (serve --workers N) share it on purpose (reuse_port).
            ("grpc.so_reuseport", 1 if reuse_port else 0),
        ],
    }


def create_grpc_server(runtime: Runtime, *, grace: float = 10.0) -> GrpcServer:
    """The gRPC server as ``runtime.settings`` describes it (``grpc`` group, whose ``max_message_bytes``
    bounds a request message; TLS from the ``tls`` group)."""
    s = runtime.settings
    return GrpcServer(
        runtime,
        host=s.grpc.host or s.http_host,
        port=s.grpc.port,
        grace=grace,
        stream_window=s.grpc.stream_window,
        subscribe_step=s.grpc.subscribe_step,
        max_message_bytes=s.grpc.max_message_bytes,
        health_interval=s.grpc.health_interval,
        credentials=grpc_server_credentials(s.tls),
        reuse_port=runtime.worker is not None,
    )
