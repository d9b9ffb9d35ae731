"""One authentication method's principal never sees another's consumer instances (issue #22, row 2), on every
REST operation and gRPC method that takes an instance id, enumerated from the app and the service descriptor.

One gateway accepts all three methods at once over TLS with client certificates required (gRPC's Python
API cannot ask for an optional one): API keys, JWTs of a JWKS on 127.0.0.1, and verified client
certificates; every client presents the same certificate, and a bearer credential, when sent, wins over it.
The three principals carry the same name, the certificate's subject ``S``: the keys file's principal ``S``, a
JWT whose ``sub`` is ``S``, and the certificate itself; each is its own identity (``api_key:S``,
``jwt:S@issuer``, ``mtls:S``). For each owner method, every
other method's calls on the owner's instance answer exactly as for a forged id (404 / NOT_FOUND), and the
owner's own calls work.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from gateway.config import Settings, TlsSettings
from gateway.security.api_keys import hash_key, new_key
from tests.support.auth_support import tls_listeners
from tests.support.every_operation import (
    APP_OPERATIONS,
    GROUP,
    REST_BODIES,
    SERVICE_METHODS,
    method_path,
    method_request,
    operation_url,
)
from tests.support.jwks_support import AUDIENCE, ISSUER, SigningKey, jwks_server
from tests.support.tls_support import Pki, make_pki

METHODS_OF_AUTH = ("api_key", "jwt", "mtls")
INSTANCE_OPERATIONS = [op for op in APP_OPERATIONS if "{instance_id}" in op.path]
INSTANCE_METHODS = [m for m in SERVICE_METHODS if "instance_id" in m.input_type.fields_by_name]


@dataclass
class ThreeWays:
    url: str
    grpc_address: str
    pki: Pki
    key: str
    token: str

    def http(self, method: str) -> httpx.AsyncClient:
        headers = {name.title(): value for name, value in self.metadata(method)}
        context = self.pki.client_context(self.pki.client)
        return httpx.AsyncClient(base_url=self.url, verify=context, headers=headers, timeout=20)

    def channel(self, method: str) -> grpc.aio.Channel:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.pki.ca.read_bytes(),
            private_key=self.pki.client.key.read_bytes(),
            certificate_chain=self.pki.client.cert.read_bytes(),
        )
        return grpc.aio.secure_channel(self.grpc_address, credentials)

    def metadata(self, method: str) -> tuple[tuple[str, str], ...]:
        if method == "mtls":
            return ()
        return (("authorization", f"Bearer {self.key if method == 'api_key' else self.token}"),)


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[ThreeWays]:
    pki = make_pki(tmp_path)
    subject = pki.client.subject.rfc4514_string()
    key = new_key()
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"principal": subject, "hash": hash_key(key), "roles": ["app"]}]}))
    everything = {"actions": ["*"], "topics": ["*"], "groups": ["*"]}
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {"rules": [{"roles": ["app"], **everything}, {"principals": [f"mtls:{subject}"], **everything}]}
        )
    )
    signer = SigningKey.rsa("iso-key")
    async with jwks_server(signer) as issuer:
        tls = TlsSettings(
            cert_file=pki.server.cert, key_file=pki.server.key, client_ca_file=pki.ca, client_auth="required"
        )
        settings = Settings(
            http_host="127.0.0.1",
            embedded={"topics": "demo:1"},
            tls=tls,
            auth={
                "mode": "required",
                "api_keys_file": str(keys),
                "rules_file": str(rules),
                "mtls_principal": True,
                "jwt": {
                    "issuer": ISSUER,
                    "audience": [AUDIENCE],
                    "jwks_url": issuer.url,
                    "roles_claim": "roles",
                },
            },
            consumers={
                "id_secret": "three-ways-secret-0123456789",
                "heartbeat_interval": 0.1,
                "empty_fetch_wait": 0.05,
            },
        )
        async with tls_listeners(settings, tls) as (base_url, rpc):
            yield ThreeWays(base_url, rpc.address, pki, key, signer.token(sub=subject, roles=["app"]))


def _forged(instance_id: str) -> str:
    return instance_id[:-4] + ("AAAA" if not instance_id.endswith("AAAA") else "BBBB")


@pytest.mark.parametrize("owner", METHODS_OF_AUTH)
async def test_rest_instances_of_one_method_are_unknown_to_the_others(gw: ThreeWays, owner: str) -> None:
    assert len(INSTANCE_OPERATIONS) >= 5
    clients = {method: gw.http(method) for method in METHODS_OF_AUTH}
    try:
        created = await clients[owner].post(f"/v1/consumers/{GROUP}", json={"topics": ["demo"]})
        assert created.status_code == 201, created.text
        instance = created.json()["instanceId"]
        for other in METHODS_OF_AUTH:
            if other == owner:
                continue
            for op in sorted(INSTANCE_OPERATIONS, key=lambda o: o.method == "DELETE"):
                calls = [
                    clients[other].request(
                        op.method, operation_url(op, instance_id=which), json=REST_BODIES.get(op.key)
                    )
                    for which in (instance, _forged(instance))
                ]
                foreign, unknown = await asyncio.gather(*calls)
                assert foreign.status_code == unknown.status_code == 404, (owner, other, op.key, foreign.text)
                assert foreign.json()["error"]["code"] == unknown.json()["error"]["code"] == "not_found"
        mine = await clients[owner].get(f"/v1/consumers/{GROUP}/instances/{instance}")
        assert mine.status_code == 200, mine.text
        assert (await clients[owner].delete(f"/v1/consumers/{GROUP}/instances/{instance}")).status_code == 204
    finally:
        for client in clients.values():
            await client.aclose()


async def _grpc_code(
    channel: grpc.aio.Channel, method: Any, metadata: Any, instance_id: str
) -> grpc.StatusCode:
    request = method_request(method, instance_id)
    codec = {"request_serializer": type(request).SerializeToString, "response_deserializer": lambda b: b}
    try:
        if method.server_streaming:
            call = channel.unary_stream(method_path(method), **codec)(request, metadata=metadata, timeout=20)
            await call.read()
            call.cancel()
        else:
            await channel.unary_unary(method_path(method), **codec)(request, metadata=metadata, timeout=20)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("owner", METHODS_OF_AUTH)
async def test_grpc_instances_of_one_method_are_unknown_to_the_others(gw: ThreeWays, owner: str) -> None:
    from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
    from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc

    assert {m.name for m in INSTANCE_METHODS} >= {"Poll", "Commit", "DeleteConsumer", "Subscribe"}
    channels = {method: gw.channel(method) for method in METHODS_OF_AUTH}
    try:
        created = await gateway_pb2_grpc.GatewayServiceStub(channels[owner]).CreateConsumer(
            pb.CreateConsumerRequest(group=GROUP, topics=["demo"]), metadata=gw.metadata(owner), timeout=20
        )
        instance = created.instance_id
        for other in METHODS_OF_AUTH:
            if other == owner:
                continue
            for method in sorted(INSTANCE_METHODS, key=lambda m: m.name == "DeleteConsumer"):
                foreign = await _grpc_code(channels[other], method, gw.metadata(other), instance)
                unknown = await _grpc_code(channels[other], method, gw.metadata(other), _forged(instance))
                assert foreign is unknown is grpc.StatusCode.NOT_FOUND, (owner, other, method.name, foreign)
        delete = next(m for m in INSTANCE_METHODS if m.name == "DeleteConsumer")
        assert await _grpc_code(channels[owner], delete, gw.metadata(owner), instance) is grpc.StatusCode.OK
    finally:
        for channel in channels.values():
            await channel.close()
