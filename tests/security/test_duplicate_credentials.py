"""A credential header sent twice is refused, naming it, on every way in, against a served ``serve --workers
2`` with API keys required: REST (the publish answered below ASGI and a route through the app) and gRPC
metadata. The last one used to win, so a proxy or a client library adding its own ``Authorization`` after
the caller's decided who the caller was."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.auth_support import AuthFiles, write_auth_files
from tests.support.workers_support import WorkerGateway, start_workers


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorkerGateway, AuthFiles]]:
    tmp = tmp_path_factory.mktemp("dup-credentials")
    files = write_auth_files(tmp)
    gateway = start_workers(tmp, 2, "--embedded-topics", "demo:1", env=files.environment())
    try:
        yield gateway, files
    finally:
        gateway.stop()


def _twice(files: AuthFiles, name: str) -> list[tuple[str, str]]:
    if name == "Authorization":
        return [
            ("Authorization", f"Bearer {files.keys['bob']}"),
            ("Authorization", f"Bearer {files.keys['alice']}"),
        ]
    return [("x-api-key", files.keys["bob"]), ("X-API-Key", files.keys["alice"])]


@pytest.mark.parametrize("name", ["Authorization", "x-api-key"])
async def test_rest_refuses_a_credential_header_sent_twice(
    served: tuple[WorkerGateway, AuthFiles], name: str
) -> None:
    gateway, files = served
    body = {"messages": [{"value": "v"}]}
    for _ in range(4):  # new connections: both workers answer
        async with gateway.shared() as client:
            once = await client.post("/v1/topics/demo/messages", json=body, headers=files.headers("alice"))
            assert once.status_code == 200, once.text
            for method, path, payload in (
                ("POST", "/v1/topics/demo/messages", body),  # the publish answered below ASGI
                ("GET", "/v1/topics", None),  # a route of the app
            ):
                answer = await client.request(method, path, json=payload, headers=_twice(files, name))
                assert answer.status_code == 400, answer.text
                error = answer.json()["error"]
                assert error["field"] == name and "more than once" in error["message"], error
                assert files.keys["alice"] not in answer.text and files.keys["bob"] not in answer.text


@pytest.mark.parametrize("name", ["authorization", "x-api-key"])
async def test_grpc_refuses_a_credential_sent_twice_in_metadata(
    served: tuple[WorkerGateway, AuthFiles], name: str
) -> None:
    gateway, files = served
    value = "Bearer {}" if name == "authorization" else "{}"
    metadata = tuple((name, value.format(files.keys[who])) for who in ("bob", "alice"))
    request = pb.PublishRequest(topic="demo", messages=[pb.Message(value=b"g")])
    for _ in range(4):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            await stub.Publish(request, metadata=files.metadata("alice"))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Publish(request, metadata=metadata)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
            assert "more than once" in (refused.value.details() or "")
