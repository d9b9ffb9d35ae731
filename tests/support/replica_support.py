"""A gateway replica's gRPC server for the tests of relays between replicas: its runtime on the test cluster,
the server on a given port (TLS with a test PKI: client certificates required, the replicas sharing theirs),
and a client stub (presenting the PKI's client certificate)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime
from gateway.tls import grpc_server_credentials
from tests.support.auth_support import AuthFiles
from tests.support.tls_support import Pki

SECRET = "replica-shared-secret-0123456789"


@dataclass
class Replica:
    runtime: Runtime
    server: GrpcServer
    channel: grpc.aio.Channel
    stub: gateway_pb2_grpc.GatewayServiceStub


@asynccontextmanager
async def replica(
    cluster: EmbeddedCluster,
    files: AuthFiles,
    http_port: int,
    grpc_port: int,
    *,
    pki: Pki | None = None,
    auth: dict[str, Any] | None = None,
    rate_limits: dict[str, Any] | None = None,
    **consumers: Any,
) -> AsyncIterator[Replica]:
    tls: dict[str, Any] = {}
    if pki is not None:  # listeners asking every client for a certificate, replicas sharing theirs
        tls = {
            "cert_file": pki.dual.cert,
            "key_file": pki.dual.key,
            "client_ca_file": pki.ca,
            "client_auth": "required",
        }
        consumers = {"forward_ca_file": pki.ca, **consumers}
    settings = Settings(
        tls=tls,
        masters=",".join(str(a) for a in cluster.master_addresses),
        http_host="127.0.0.1",
        http_port=http_port,
        grpc={"port": grpc_port},
        auth=auth or files.auth_settings(),
        rate_limits=rate_limits or {},
        producer={"heartbeat_interval": 0.5},
        consumers={
            "heartbeat_interval": 0.1,
            "empty_fetch_wait": 0.05,
            "assignment_wait": 5.0,
            "id_secret": SECRET,
            "replicas": 2,
            "advertised_url": f"http://127.0.0.1:{http_port}",
            **consumers,
        },
    )
    runtime = Runtime(settings)
    await runtime.start()
    server = GrpcServer(runtime, port=grpc_port, grace=0.2, credentials=grpc_server_credentials(settings.tls))
    if pki is None:
        open_channel = grpc.aio.insecure_channel
    else:
        client = grpc.ssl_channel_credentials(
            pki.ca.read_bytes(), pki.client.key.read_bytes(), pki.client.cert.read_bytes()
        )
        open_channel = functools.partial(grpc.aio.secure_channel, credentials=client)
    try:
        await server.start()
        async with open_channel(server.address) as channel:
            yield Replica(runtime, server, channel, gateway_pb2_grpc.GatewayServiceStub(channel))
    finally:
        await server.stop(0)
        await runtime.stop()


@asynccontextmanager
async def mtls_replica_pair(
    cluster: EmbeddedCluster, files: AuthFiles, pki: Pki, https: list[int], grpcs: list[int]
) -> AsyncIterator[tuple[Replica, Replica]]:
    """Two replicas relaying to each other over mTLS on ``https`` and ``grpcs`` (the owner's first), a
    caller's certificate subject its principal: (owner, other)."""
    allow = {"forward_allow": ["127.0.0.1"], "forward_ports": https + grpcs}
    auth = files.auth_settings(mtls_principal=True)
    async with (
        replica(cluster, files, https[0], grpcs[0], pki=pki, auth=auth, **allow) as owner,
        replica(cluster, files, https[1], grpcs[1], pki=pki, auth=auth, **allow) as other,
    ):
        yield owner, other
