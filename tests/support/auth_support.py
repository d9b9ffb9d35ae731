"""Auth test helpers: API keys and rules files for a few principals, and a gateway (HTTP and gRPC) on the
embedded cluster with authentication required."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import uvicorn
from fastapi import FastAPI

from gateway.api.app import create_app
from gateway.config import Settings, TlsSettings
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime
from gateway.security.api_keys import hash_key, new_key
from gateway.serve import http_config
from gateway.tls import grpc_server_credentials
from tests.support.serving import bound_socket
from tests.support.waiting import bounded, eventually

#: the subject of a client certificate a rule names (an RFC 4514 string, as the TLS listener gives it)
MTLS_SUBJECT = "CN=client-1,O=Example"
#: principal -> roles. ``nobody`` has a valid key but no rule allows it anything.
PRINCIPALS: dict[str, list[str]] = {
    "root": ["admin"],
    "alice": ["app"],
    "bob": ["app"],
    "nobody": [],
    "carol": ["narrow"],
}
RULES: dict[str, Any] = {
    "rules": [
        {"roles": ["admin"], "actions": ["*"], "topics": ["*"], "groups": ["*"]},
        {
            "roles": ["app"],
            "actions": ["publish", "consume", "read_ranges", "describe"],
            "topics": ["*"],
            "groups": ["*"],
        },
        {
            "roles": ["narrow"],
            "actions": ["publish", "consume", "describe", "read_ranges"],
            "topics": ["other_*"],
            "groups": ["other_*"],
        },
        {"principals": [f"mtls:{MTLS_SUBJECT}"], "actions": ["describe"], "topics": ["*"]},
    ]
}


@dataclass
class AuthFiles:
    keys_file: Path
    rules_file: Path
    keys: dict[str, str] = field(default_factory=dict)  # principal -> clear key

    def headers(self, principal: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[principal]}"}

    def metadata(self, principal: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.keys[principal]}"),)

    def environment(self, **extra: str) -> dict[str, str]:
        """The environment of a served gateway (``serve``) with these files, auth required, and ``extra``."""
        return {
            "TUBEMQ_GATEWAY_AUTH__MODE": "required",
            "TUBEMQ_GATEWAY_AUTH__API_KEYS_FILE": str(self.keys_file),
            "TUBEMQ_GATEWAY_AUTH__RULES_FILE": str(self.rules_file),
            **extra,
        }

    def auth_settings(self, **extra: Any) -> dict[str, Any]:
        return {
            "mode": "required",
            "api_keys_file": str(self.keys_file),
            "rules_file": str(self.rules_file),
            **extra,
        }


def write_auth_files(directory: Path, rules: dict[str, Any] | None = None) -> AuthFiles:
    files = AuthFiles(directory / "keys.json", directory / "rules.json")
    entries = []
    for principal, roles in PRINCIPALS.items():
        key = new_key()
        files.keys[principal] = key
        entries.append({"principal": principal, "hash": hash_key(key), "roles": roles})
    files.keys_file.write_text(json.dumps({"keys": entries}), encoding="utf-8")
    files.rules_file.write_text(json.dumps(rules or RULES), encoding="utf-8")
    return files


@dataclass
class SecureGateway:
    url: str
    runtime: Runtime
    grpc: GrpcServer
    channel: grpc.aio.Channel
    stub: gateway_pb2_grpc.GatewayServiceStub
    files: AuthFiles
    http: httpx.AsyncClient
    app: FastAPI


@asynccontextmanager
async def secure_gateway(
    directory: Path,
    rules: dict[str, Any] | None = None,
    topics: str = "demo:2",
    sock: socket.socket | None = None,
    **settings: Any,
) -> AsyncIterator[SecureGateway]:
    """A gateway with auth required on its own embedded cluster (``topics``: ``demo`` by default), HTTP on
    ``sock`` (a loopback socket bound beforehand, so that its port can go into ``settings``) or a free
    loopback port, gRPC on a free one; ``rules`` replace :data:`RULES`."""
    files = write_auth_files(directory, rules)
    if sock is None:
        sock = bound_socket()
    port = sock.getsockname()[1]
    auth = files.auth_settings(**settings.pop("auth", {}))
    runtime = Runtime(
        Settings(
            http_host="127.0.0.1",
            http_port=port,
            auth=auth,
            embedded={"topics": topics},
            producer={"heartbeat_interval": 0.5},
            consumers={
                "heartbeat_interval": 0.1,
                "empty_fetch_wait": 0.05,
                "assignment_wait": 5.0,
                "id_secret": "auth-test-secret",
            },
            **settings,
        )
    )
    await runtime.start()
    app = create_app(runtime=runtime)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level=None, access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    rpc = GrpcServer(runtime, grace=0.2)
    try:
        await eventually(_started(server), timeout=10.0, what="uvicorn start")
        await rpc.start()
        async with (
            grpc.aio.insecure_channel(rpc.address) as channel,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as http,
        ):
            yield SecureGateway(
                f"http://127.0.0.1:{port}",
                runtime,
                rpc,
                channel,
                gateway_pb2_grpc.GatewayServiceStub(channel),
                files,
                http,
                app,
            )
    finally:
        await bounded(rpc.stop(0), "the gRPC server's stop")
        server.should_exit = True
        await bounded(task, "uvicorn's shutdown")
        await bounded(runtime.stop(), "the runtime's stop")
        sock.close()


@asynccontextmanager
async def tls_listeners(settings: Settings, tls: TlsSettings) -> AsyncIterator[tuple[str, GrpcServer]]:
    """A runtime of ``settings`` started and served over HTTPS (uvicorn configured as ``serve`` does it) on a
    free loopback port and over gRPC with ``tls``'s server credentials; yields the HTTPS base URL and the
    gRPC server."""
    runtime = Runtime(settings)
    await runtime.start()
    sock = bound_socket()
    server = uvicorn.Server(http_config(settings, create_app(runtime=runtime), log_level=None))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    rpc = GrpcServer(runtime, credentials=grpc_server_credentials(tls), grace=0.2)
    try:
        await eventually(_started(server), timeout=10, what="uvicorn start")
        await rpc.start()
        yield f"https://127.0.0.1:{sock.getsockname()[1]}", rpc
    finally:
        await bounded(rpc.stop(0), "the gRPC server's stop")
        server.should_exit = True
        await bounded(task, "uvicorn's shutdown")
        sock.close()
        await bounded(runtime.stop(), "the runtime's stop")


def _started(server: uvicorn.Server) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return server.started

    return check


def write_mtls_auth_files(directory: Path, subject: str) -> AuthFiles:
    """The auth files of :func:`write_auth_files`, with a rule letting the certificate subject ``subject``
    (``mtls:<subject>``) publish and consume everywhere."""
    rule = {
        "principals": [f"mtls:{subject}"],
        "actions": ["consume", "publish"],
        "topics": ["*"],
        "groups": ["*"],
    }
    return write_auth_files(directory, {"rules": [*RULES["rules"], rule]})
