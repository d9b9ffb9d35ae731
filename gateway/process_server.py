"""HTTP and gRPC in one process and one event loop, over one Runtime, with one graceful shutdown.

:class:`ProcessServer` is the :class:`~gateway.shutdown.GracefulServer` that ``tubemq-gateway serve`` runs
(the whole process's server, not the gRPC adapter's: that is :class:`gateway.grpc.server.GrpcServer`),
extended with the runtime's lifecycle and the gRPC server:

* start: the runtime, then the gRPC server, then the admin listener (when configured), then a worker
  process's private listener (``serve --workers N``), then uvicorn's startup (the HTTP listener); a failure
  stops what was started and the process exits 1;
* shutdown (after the drain of :mod:`gateway.shutdown`): the gRPC server's graceful stop and the private
  listener's run alongside uvicorn's, with the same grace (``plan.requests_timeout``); the runtime stops only
  after them, so calls finishing in their grace still have the producer and the consumers; the admin
  listener (metrics) closes last, so the drain can be watched.

In a worker process, the HTTP, gRPC and admin ports are shared with the sibling workers through
``SO_REUSEPORT`` (``reuse_port``): the kernel spreads new connections over the workers listening.

Once serving, the process with ``announce`` set (the single process, or a replica's first worker) logs the
URLs a person opens: the API, the web console and the API docs (:func:`served_urls`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable

import uvicorn

from gateway.config import Settings
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime
from gateway.shutdown import GracefulServer, ShutdownPlan

log = logging.getLogger("gateway.serve")


class ProcessServer(GracefulServer):
    """Owns ``runtime`` (build the app with ``owns_runtime=False``) and ``grpc_server`` (None: HTTP only)."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        runtime: Runtime,
        grpc_server: GrpcServer | None,
        on_drain: Callable[[], None],
        plan: ShutdownPlan,
        admin_config: uvicorn.Config | None = None,
        private: tuple[uvicorn.Config, socket.socket] | None = None,
        reuse_port: bool = False,
        announce: bool = True,
    ) -> None:
        super().__init__(config, on_drain=on_drain, plan=plan)
        self.runtime = runtime
        self.grpc_server = grpc_server
        self.admin_config = admin_config
        self.admin: uvicorn.Server | None = None
        self.private_config = private
        self.private: uvicorn.Server | None = None
        self.reuse_port = reuse_port
        self.announce = announce

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]} grpc={self.grpc_server!r}>"

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await self.runtime.start()
            if self.grpc_server is not None:
                await self.grpc_server.start()
            if self.admin_config is not None:
                self.admin = await _start_admin(self.admin_config, reuse_port=self.reuse_port)
            if self.private_config is not None:
                config, sock = self.private_config
                self.private = await _start_side_listener(config, sock)
        except Exception:
            log.exception("the gateway could not start")
            await self.release()
            self.should_exit = True  # uvicorn then skips its main loop; started stays False: exit 1
            return
        await super().startup(sockets)
        if self.started and self.announce and self.servers:
            port: int = self.servers[0].sockets[0].getsockname()[1]
            urls = served_urls(self.runtime.settings, port, self.admin_port)
            shown = [f"web console {urls['console_url']}"] if "console_url" in urls else []
            shown.append(f"API docs {urls['docs_url']}")
            log.info(f"serving {urls['url']}: {', '.join(shown)}", extra=urls)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        stops = [super().shutdown(sockets)]
        if self.grpc_server is not None:
            stops.append(self.grpc_server.stop(self.plan.requests_timeout))
        private, self.private = self.private, None
        if private is not None:
            stops.append(private.shutdown())
        await asyncio.gather(*stops)

    @property
    def admin_port(self) -> int | None:
        """The admin listener's bound port (None without one, or before startup)."""
        if self.admin is None or not self.admin.servers:
            return None
        port: int = self.admin.servers[0].sockets[0].getsockname()[1]
        return port

    async def release(self) -> None:
        if self.grpc_server is not None:
            await self.grpc_server.stop(0)
        private, self.private = self.private, None
        if private is not None:  # a failed startup: nothing has shut it down yet
            await private.shutdown()
        await self.runtime.stop()
        admin, self.admin = self.admin, None
        if admin is not None:
            await admin.shutdown()


def served_urls(settings: Settings, http_port: int, admin_port: int | None) -> dict[str, str]:
    """The URLs a person opens once the gateway serves: ``url`` (the API), ``console_url`` (the web
    console, absent when it is off) and ``docs_url`` (Swagger UI: on the admin listener when there is one).
    A wildcard listen address is shown as ``localhost``, which reaches it from this machine."""
    scheme = "https" if settings.tls.enabled else "http"

    def base(host: str, port: int) -> str:
        if host in ("0.0.0.0", "::", ""):
            host = "localhost"
        elif ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{port}"

    api = base(settings.http_host, http_port)
    admin = api if admin_port is None else base(settings.admin.host or settings.http_host, admin_port)
    urls = {"url": api, "docs_url": f"{admin}/docs"}
    if settings.console.enabled:
        urls["console_url"] = f"{admin if settings.console.listener == 'admin' else api}/console"
    return urls


async def _start_admin(config: uvicorn.Config, *, reuse_port: bool = False) -> uvicorn.Server:
    """Serve the admin app on its own listener, in this loop, without uvicorn's signal handling or main
    loop (the main server owns those). Raises OSError when the address cannot be bound."""
    host = config.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host.strip("[]"), config.port), family=family, reuse_port=reuse_port)
    server = await _start_side_listener(config, sock)
    log.info("admin listener serving", extra={"host": host, "port": sock.getsockname()[1]})
    return server


async def _start_side_listener(config: uvicorn.Config, sock: socket.socket) -> uvicorn.Server:
    """Serve ``config``'s app on ``sock`` (the server owns it from here on) in this loop, without uvicorn's
    signal handling or main loop."""
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    try:
        await server.startup(sockets=[sock])  # the server owns the socket from here on
    except BaseException:
        sock.close()
        raise
    return server
