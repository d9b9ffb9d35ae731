"""``tubemq-gateway serve``: run the HTTP gateway (on the embedded cluster when no master is given)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.config import Settings, TlsSettings, load_settings
from gateway.tubemq.net import retain_freed_memory

if TYPE_CHECKING:
    import uvicorn

    from gateway.workers.context import WorkerContext

log = logging.getLogger("gateway.serve")


def add_serve_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the HTTP gateway",
        description="Run the gateway. Every flag can also be set with an environment variable "
        "(TUBEMQ_GATEWAY_MASTERS, TUBEMQ_GATEWAY_HTTP_PORT, ...); see docs/configuration.md.",
    )
    p.add_argument(
        "--masters", help="TubeMQ masters host:port[,host:port...]; omit to run on the embedded cluster"
    )
    p.add_argument(
        "--http-host",
        help="HTTP listen address (default 127.0.0.1 with auth.mode=open, 0.0.0.0 with authentication)",
    )
    p.add_argument("--http-port", type=int, help="HTTP listen port (default 8080)")
    p.add_argument("--grpc-port", type=int, help="gRPC listen port (default 9090)")
    p.add_argument("--config", type=Path, help="JSON settings file")
    p.add_argument(
        "--embedded-topics",
        help="embedded cluster topics, name[:partitions[:stores]],... "
        "(default demo:1:4: 4 stores of 1 partition; the embedded command takes the same flags)",
    )
    p.add_argument("--embedded-brokers", type=int, help="embedded cluster brokers (default 1)")
    p.add_argument("--embedded-data-dir", type=Path, help="embedded cluster data directory (default: memory)")
    p.add_argument("--log-level", help="debug, info, warning or error (default info)")
    p.add_argument(
        "--workers",
        type=int,
        help="worker processes sharing the ports (default 0: one per CPU this process may use)",
    )
    p.add_argument("--tls-cert-file", type=Path, help="PEM certificate: serve HTTP and gRPC over TLS")
    p.add_argument("--tls-key-file", type=Path, help="PEM private key of --tls-cert-file")
    p.add_argument(
        "--tls-client-ca-file", type=Path, help="PEM CA certificates verifying client certificates"
    )
    p.add_argument(
        "--tls-client-auth",
        choices=("none", "optional", "required"),
        help="client certificates: none (default), optional (verified when sent) or required",
    )
    p.add_argument(
        "--admin-port",
        type=int,
        help="serve /metrics, /docs, /openapi.json on this port instead (admin listener)",
    )
    p.set_defaults(handler=run_serve)


def settings_from_args(args: argparse.Namespace) -> Settings:
    env = Settings()
    embedded = env.embedded.model_copy(
        update={
            k: v
            for k, v in {
                "topics": args.embedded_topics,
                "brokers": args.embedded_brokers,
                "data_dir": args.embedded_data_dir,
            }.items()
            if v is not None
        }
    )
    return load_settings(
        args.config,
        masters=args.masters,
        http_host=args.http_host,
        http_port=args.http_port,
        log_level=args.log_level,
        workers=args.workers,
        embedded=embedded if embedded != env.embedded else None,
        # a dict, not a model copy, so that the port is validated
        grpc=None if args.grpc_port is None else {**env.grpc.model_dump(), "port": args.grpc_port},
        tls=_group(
            env.tls.model_dump(), args, "tls_", ("cert_file", "key_file", "client_ca_file", "client_auth")
        ),
        admin=_group(env.admin.model_dump(), args, "admin_", ("port",)),
    )


def _group(base: dict[str, Any], args: argparse.Namespace, prefix: str, names: tuple[str, ...]) -> Any:
    """A settings group from the environment's values and the flags given (None when no flag is given);
    a dict, not a model copy, so that the group's validation runs on the result."""
    given = {name: getattr(args, prefix + name) for name in names if getattr(args, prefix + name) is not None}
    return {**base, **given} if given else None


GC_YOUNG_THRESHOLD = 5000
"""Allocations between young collections (CPython's default is 700). A publish keeps many short-lived
objects in flight (tasks, futures, frames); at 700 they survive into the old generations and full
collections run often, each walking the whole heap."""


class MissingHttpParser(RuntimeError):
    """httptools cannot be imported: the gateway does not serve HTTP without it."""


def http_implementation() -> str:
    """uvicorn's HTTP parser: always httptools (C, a dependency). The header size, count and time limits
    are enforced by a subclass of its protocol (``gateway/api/http_guard.py``); uvicorn's fallback, the
    pure-Python h11, offers no place for them, so rather than serve without them the gateway refuses to
    start (:class:`MissingHttpParser`)."""
    if importlib.util.find_spec("httptools") is None:
        raise MissingHttpParser(
            "the httptools package cannot be imported; the gateway serves HTTP only with it (its header "
            "limits need it): install it (pip install httptools) or reinstall tubemq-gateway"
        )
    return "httptools"


def tune_gc() -> None:
    """Move everything alive now (modules, the app, settings) out of the collector's sight and collect the
    young generation less often: with the default settings the collector took a third or more of a busy
    gateway's CPU, mostly re-walking the startup heap. Called once, just before serving."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def http_config(settings: Settings, app: Any, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration of an HTTP listener serving ``app``: TLS as the ``tls`` settings say (with
    the protocol class that puts the client certificate in the scope), no access log of uvicorn's own
    (the app logs one line per request), no logging setup (``configure_logging`` routes uvicorn's records
    through the gateway's formatter), no proxy headers (the app reads them from ``http.trusted_proxies``
    itself, with uvicorn's middleware: ``gateway/api/proxy.py``). ``options`` are further
    ``uvicorn.Config`` arguments."""
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from gateway.api.direct_protocol import direct_protocol
    from gateway.api.http_guard import HeaderLimits, guarded_protocol
    from gateway.api.tls_scope import TlsHttpToolsProtocol
    from gateway.tls import uvicorn_tls_options

    http_implementation()  # raises MissingHttpParser without httptools
    tls = uvicorn_tls_options(settings.tls)
    limits = settings.limits
    http = guarded_protocol(
        TlsHttpToolsProtocol if tls else HttpToolsProtocol,
        HeaderLimits(limits.max_header_bytes, limits.max_headers, limits.header_timeout),
    )
    if settings.http.direct_publish or settings.http.direct_poll:  # below ASGI (direct_protocol.py)
        http = direct_protocol(http)
    options.setdefault("timeout_keep_alive", limits.keep_alive_timeout)
    options.setdefault("proxy_headers", False)
    return uvicorn.Config(app, http=http, access_log=False, log_config=None, **tls, **options)


def admin_config(settings: Settings, app: Any, **options: Any) -> uvicorn.Config | None:
    """The admin listener's configuration (``admin`` settings; the main listener's certificate, but no
    client certificates asked for), serving the admin app that ``create_app`` made for ``app``; None when
    ``admin.port`` is unset."""
    admin = settings.admin
    if admin.port is None:
        return None
    no_client_certs = settings.tls.model_copy(update={"client_auth": "none", "client_ca_file": None})
    return http_config(
        settings.model_copy(update={"tls": no_client_certs}),
        app.state.admin_app,
        host=admin.host or settings.http_host,
        port=admin.port,
        lifespan="off",
        **options,
    )


def run_serve(args: argparse.Namespace) -> int:
    from gateway.observability.logging import configure_logging
    from gateway.tls import TlsConfigError, check_tls
    from gateway.workers.cpus import allowed_cpus
    from gateway.workers.ports import PortInUse, check_free

    settings = settings_from_args(args)
    try:
        http_implementation()
        check_tls(settings.tls, settings.consumers.forward_ca_file)
    except (MissingHttpParser, TlsConfigError) as exc:
        print(f"tubemq-gateway: {exc}", file=sys.stderr)
        return 2
    if settings.tracing.enabled:
        from gateway.observability.tracing import TracingUnavailable, check_available

        try:
            check_available(settings.tracing.exporter)
        except TracingUnavailable as exc:
            print(f"tubemq-gateway: cannot start: {exc}", file=sys.stderr)
            return 2
    try:
        check_free(_served_ports(settings))
    except PortInUse as exc:
        print(f"tubemq-gateway: cannot start: {exc}", file=sys.stderr)
        return 1
    configure_logging(settings.log_level, settings.log_format)
    log_listen_address(settings)
    workers = settings.workers or allowed_cpus()
    if workers > 1:
        from gateway.workers.supervisor import supervise

        return supervise(settings, workers)
    return serve_process(settings)


def log_listen_address(settings: Settings) -> None:
    """Say where the API listens and why: loopback by default in open mode, every address with
    authentication; an open gateway on another address is a warning."""
    host, grpc_host = settings.http_host, settings.grpc.host or settings.http_host
    extra = {"host": host, "port": settings.http_port, "grpc_host": grpc_host, "auth": settings.auth.mode}
    where = f"listening on {host}:{settings.http_port}"
    if settings.grpc.enabled:
        where += f" (gRPC {grpc_host}:{settings.grpc.port})"
    if settings.auth.mode != "open":
        log.info(f"{where}: authentication is required (auth.mode={settings.auth.mode})", extra=extra)
    elif all(_loopback(h) for h in (host, grpc_host)):
        log.info(
            f"{where}, this machine only: authentication is off (auth.mode=open); to serve other machines "
            "turn authentication on (docs/security.md) and set http_host (--http-host 0.0.0.0)",
            extra=extra,
        )
    else:
        log.warning(
            f"{where} with authentication off (auth.mode=open): anyone who reaches these addresses may "
            "publish to and consume from every topic; turn authentication on (docs/security.md), or leave "
            "http_host unset to listen on 127.0.0.1 only",
            extra=extra,
        )


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _served_ports(settings: Settings) -> list[tuple[str, str, int]]:
    """The (name, host, port) of each listener the settings configure."""
    ports = [("HTTP", settings.http_host, settings.http_port)]
    if settings.grpc.enabled:
        ports.append(("gRPC", settings.grpc.host or settings.http_host, settings.grpc.port))
    if settings.admin.port is not None:
        ports.append(("admin", settings.admin.host or settings.http_host, settings.admin.port))
    return ports


def event_loop_name() -> str:
    """uvicorn's ``loop`` setting: uvloop where it is installed."""
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        return "asyncio"
    return "uvloop"


def serve_process(settings: Settings, worker: WorkerContext | None = None) -> int:
    """Serve HTTP (and gRPC) in this process until a signal's graceful shutdown; 0 when it started and
    stopped cleanly. ``worker``: this process is one of the replica's worker processes (``--workers N``):
    the ports are shared with its siblings (``SO_REUSEPORT``) and it serves a private listener too."""
    from gateway.api.app import create_app
    from gateway.grpc.server import create_grpc_server
    from gateway.process_server import ProcessServer
    from gateway.runtime import Runtime
    from gateway.security.setup import SecurityConfigError
    from gateway.shutdown import ShutdownPlan

    loop = event_loop_name()
    sockets: list[socket.socket] | None = None
    if worker is None and settings.http_port == 0:
        # The port is chosen before anything is built from it: the instance ids and the replica URL name it.
        held = held_free_port(settings.http_host)
        settings = settings.model_copy(update={"http_port": held.getsockname()[1]})
        sockets = [held]
    try:
        runtime = Runtime(settings, worker=worker)
    except SecurityConfigError as exc:
        print(f"tubemq-gateway: cannot start: {exc}", file=sys.stderr)
        for sock in sockets or ():
            sock.close()
        return 2
    plan = ShutdownPlan(settings.shutdown.grace_period, settings.shutdown.drain_delay)

    def drain() -> None:
        runtime.begin_drain()

    app = create_app(runtime=runtime, owns_runtime=False)
    common: dict[str, Any] = {
        "loop": loop,
        "log_level": settings.log_level.lower(),
        "timeout_graceful_shutdown": max(1, round(plan.requests_timeout)),
    }
    config = http_config(settings, app, host=settings.http_host, port=settings.http_port, **common)
    grpc_server = create_grpc_server(runtime) if settings.grpc.enabled else None
    private = None
    if worker is not None:
        from gateway.api.worker_listener import private_app

        sockets = [reuse_port_socket(settings.http_host, settings.http_port)]
        plain = settings.model_copy(update={"tls": TlsSettings()})
        private = (
            http_config(plain, private_app(app), lifespan="off", **common),
            private_socket(worker.http_socket(worker.index)),
        )
    server = ProcessServer(
        config,
        runtime=runtime,
        grpc_server=grpc_server,
        on_drain=drain,
        plan=plan,
        admin_config=admin_config(settings, app, loop=loop, log_level=settings.log_level.lower()),
        private=private,
        reuse_port=worker is not None,
        announce=worker is None or worker.index == 0,
    )
    tune_gc()
    retain_freed_memory()  # malloc keeps what answers and batches free for the next ones (its module: why)
    server.run(sockets=sockets)
    return 0 if server.started else 1


def held_free_port(host: str) -> socket.socket:
    """A TCP socket bound to a free port of ``host``, not listening yet (the server listens on it)."""
    from gateway.workers.ports import bound_socket

    return bound_socket(host, 0, reuse_addr=True, reuse_port=False)


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT``, not listening yet (the server listens once
    it is ready, so that the kernel hands it no connection before). Raises OSError."""
    from gateway.workers.ports import bound_socket

    return bound_socket(host, port, reuse_addr=True, reuse_port=True)


def private_socket(path: str) -> socket.socket:
    """A unix socket bound to ``path`` (a stale file from a crashed worker replaced), readable and writable
    by this user only."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
    except BaseException:
        sock.close()
        raise
    return sock
