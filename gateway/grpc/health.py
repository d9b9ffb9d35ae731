"""The standard ``grpc.health.v1.Health`` service, answered from the runtime's readiness.

Unlike grpc's stock servicer, which reports what it was last told, this one asks ``ready()`` on every
Check, so SERVING means exactly what ``GET /readyz`` 200 means. Watch streams poll every
``watch_interval`` seconds and send a status only when it changes. After :meth:`shutdown` every service
reports NOT_SERVING and Watch streams end, so they never hold up a graceful stop. A Check of an unknown
service is NOT_FOUND (as the health protocol says), with the gateway's error details like any error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable

import grpc
from grpc_health.v1 import health_pb2

from gateway.service.errors import NotFound

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
HEALTH_SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name


class ReadinessHealth:
    """Health of ``services`` (plus ``""``, the whole server): SERVING while ``ready()`` is true."""

    def __init__(
        self, ready: Callable[[], bool], services: Iterable[str], *, watch_interval: float = 1.0
    ) -> None:
        if watch_interval <= 0:
            raise ValueError("watch_interval must be > 0 seconds")
        self._ready = ready
        self._services = frozenset({"", *services})
        self._interval = watch_interval
        self._stopping = asyncio.Event()

    def __repr__(self) -> str:
        state = "stopping" if self._stopping.is_set() else "running"
        return f"<ReadinessHealth services={sorted(self._services)} {state} every {self._interval}s>"

    def shutdown(self) -> None:
        """Report NOT_SERVING from now on and end the Watch streams."""
        self._stopping.set()

    def status(self, service: str) -> int:
        if service not in self._services:
            return int(SERVICE_UNKNOWN)
        if self._stopping.is_set() or not self._ready():
            return int(NOT_SERVING)
        return int(SERVING)

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        status = self.status(request.service)
        if status == SERVICE_UNKNOWN:
            known = ", ".join(repr(name) for name in sorted(self._services))
            raise NotFound(
                f"unknown service {request.service!r}; this server reports on {known}",
                field="service",
                resource_name=request.service,
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def List(
        self, request: health_pb2.HealthListRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthListResponse:
        statuses = {name: health_pb2.HealthCheckResponse(status=self.status(name)) for name in self._services}
        return health_pb2.HealthListResponse(statuses=statuses)

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        last: int | None = None
        while True:
            status = self.status(request.service)
            if status != last:
                yield health_pb2.HealthCheckResponse(status=status)
                last = status
            if self._stopping.is_set():
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._interval)
