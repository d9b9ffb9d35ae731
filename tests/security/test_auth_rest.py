"""Authentication and authorization of every REST operation, over real sockets on the embedded cluster.

The operations are enumerated from the app itself (its OpenAPI document and FastAPI's docs routes), so a
route added later is covered, or fails here, without anyone remembering to list it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gateway.api.auth import RestOperation
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.security.operations import REST_OPERATIONS
from tests.support.auth_support import SecureGateway, secure_gateway
from tests.support.every_operation import APP_OPERATIONS, GROUP, REST_BODIES, operation_url


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[SecureGateway]:
    async with secure_gateway(tmp_path) as gateway:
        yield gateway


async def _call(
    gw: SecureGateway, op: RestOperation, headers: dict[str, str], **where: str
) -> httpx.Response:
    body = REST_BODIES.get(op.key)
    return await gw.http.request(
        op.method, operation_url(op, **where), headers=headers, json=body if body is not None else None
    )


async def _instance(gw: SecureGateway, principal: str) -> str:
    answer = await gw.http.post(
        f"/v1/consumers/{GROUP}", json={"topics": ["demo"]}, headers=gw.files.headers(principal)
    )
    assert answer.status_code == 201, answer.text
    instance_id: str = answer.json()["instanceId"]
    return instance_id


def test_every_operation_of_the_app_is_in_the_table_and_every_entry_is_an_operation() -> None:
    keys = {op.key for op in APP_OPERATIONS}
    assert len(keys) >= 15  # the enumeration itself must see the app
    assert keys - set(REST_OPERATIONS) == set(), "add these operations to REST_OPERATIONS"
    assert set(REST_OPERATIONS) - keys == set(), "REST_OPERATIONS lists operations the app does not have"


@pytest.mark.parametrize("op", APP_OPERATIONS, ids=lambda op: op.key)
async def test_without_credentials_only_the_probes_answer(gw: SecureGateway, op: RestOperation) -> None:
    answer = await _call(gw, op, {})
    if REST_OPERATIONS[op.key].open:
        assert answer.status_code in (200, 503), answer.text
        return
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"] == 'Bearer realm="tubemq-gateway"'
    assert answer.json()["error"]["code"] == "unauthenticated"
    assert answer.json()["requestId"] == answer.headers["x-request-id"]


@pytest.mark.parametrize(
    "op", [op for op in APP_OPERATIONS if not REST_OPERATIONS[op.key].open], ids=lambda op: op.key
)
async def test_a_principal_no_rule_allows_gets_403_naming_the_action(
    gw: SecureGateway, op: RestOperation
) -> None:
    answer = await _call(gw, op, gw.files.headers("nobody"))
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["code"] == "permission_denied"
    assert error["action"] == REST_OPERATIONS[op.key].action
    assert "'api_key:nobody'" in error["message"] and error["action"] in error["message"]


async def test_every_instance_operation_on_another_principals_instance_is_404_like_an_unknown_id(
    gw: SecureGateway,
) -> None:
    owned = await _instance(gw, "alice")
    forged = owned[:-4] + ("AAAA" if not owned.endswith("AAAA") else "BBBB")
    instance_ops = [op for op in APP_OPERATIONS if "{instance_id}" in op.path]
    assert len(instance_ops) == 8
    for op in sorted(instance_ops, key=lambda o: o.method == "DELETE"):
        foreign = await _call(gw, op, gw.files.headers("bob"), instance_id=owned)
        unknown = await _call(gw, op, gw.files.headers("bob"), instance_id=forged)
        assert foreign.status_code == unknown.status_code == 404, (op.key, foreign.text)
        assert foreign.json()["error"]["code"] == unknown.json()["error"]["code"] == "not_found"
        assert foreign.json()["error"]["field"] == "instanceId"
        if op.key == "streamMessages":
            continue  # the owner's stream would stay open
        mine = await _call(gw, op, gw.files.headers("alice"), instance_id=owned)
        # an instance without a retry topic cannot nack: the owner gets past the lookup to that answer
        assert mine.status_code in ((400,) if op.key == "nackMessages" else (200, 204)), (op.key, mine.text)
    # once deleted by its owner, it is still nobody else's business
    gone = await gw.http.get(f"/v1/consumers/{GROUP}/instances/{owned}", headers=gw.files.headers("bob"))
    assert gone.status_code == 404
    gone = await gw.http.get(f"/v1/consumers/{GROUP}/instances/{owned}", headers=gw.files.headers("alice"))
    assert gone.status_code == 410


async def test_rules_are_checked_on_the_exact_topic_and_group(gw: SecureGateway) -> None:
    carol = gw.files.headers("carol")
    publish = await gw.http.post(
        "/v1/topics/demo/messages", json=REST_BODIES["publishMessages"], headers=carol
    )
    assert publish.status_code == 403
    assert publish.json()["error"]["resource"] == "topic 'demo'"
    create = await gw.http.post("/v1/consumers/other_g", json={"topics": ["demo"]}, headers=carol)
    assert create.status_code == 403
    assert create.json()["error"]["resource"] == "topic 'demo' in group 'other_g'"
    ranges = await gw.http.get("/v1/topics/demo/partitions", headers=carol)
    assert ranges.status_code == 403
    topic = await gw.http.get("/v1/topics/demo", headers=carol)
    assert topic.status_code == 403
    allowed = await gw.http.post(
        "/v1/topics/demo/messages", json=REST_BODIES["publishMessages"], headers=gw.files.headers("alice")
    )
    assert allowed.status_code == 200, allowed.text


async def test_broker_addresses_only_for_principals_allowed_to_describe_the_cluster(
    gw: SecureGateway,
) -> None:
    app_view = await gw.http.get("/v1/topics/demo", headers=gw.files.headers("alice"))
    admin_view = await gw.http.get("/v1/topics/demo", headers=gw.files.headers("root"))
    assert app_view.status_code == admin_view.status_code == 200
    assert [p["broker"] for p in app_view.json()["partitions"]] == [None, None]
    assert all(p["broker"].startswith("127.0.0.1:") for p in admin_view.json()["partitions"])
    grpc_view = await gw.stub.GetTopic(pb.GetTopicRequest(topic="demo"), metadata=gw.files.metadata("alice"))
    assert [p.broker for p in grpc_view.partitions] == ["", ""]
    app_ranges = await gw.http.get("/v1/topics/demo/partitions", headers=gw.files.headers("alice"))
    admin_ranges = await gw.http.get("/v1/topics/demo/partitions", headers=gw.files.headers("root"))
    assert app_ranges.status_code == admin_ranges.status_code == 200, app_ranges.text
    assert [p["broker"] for p in app_ranges.json()["partitions"]] == [None, None]
    assert all(p["broker"].startswith("127.0.0.1:") for p in admin_ranges.json()["partitions"])


async def test_admin_endpoints_need_admin(gw: SecureGateway) -> None:
    for path in ("/metrics", "/openapi.json", "/docs"):
        assert (await gw.http.get(path, headers=gw.files.headers("alice"))).status_code == 403
        assert (await gw.http.get(path, headers=gw.files.headers("root"))).status_code == 200


async def test_credential_forms(gw: SecureGateway) -> None:
    key = gw.files.keys["alice"]
    assert (await gw.http.get("/v1/topics/demo", headers={"x-api-key": key})).status_code == 200
    assert (
        await gw.http.get("/v1/topics/demo", headers={"Authorization": f"bearer {key}"})
    ).status_code == 200
    for headers in (
        {"Authorization": f"Basic {key}"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer tmq_not-a-key"},
        {"x-api-key": key + "x"},
        {"Authorization": "Bearer " + "a" * 20000},
    ):
        answer = await gw.http.get("/v1/topics/demo", headers=headers)
        assert answer.status_code == 401, headers
        assert key not in answer.text


async def test_unknown_paths_need_credentials_too(gw: SecureGateway) -> None:
    assert (await gw.http.get("/v1/nothing")).status_code == 401
    answer = await gw.http.get("/v1/nothing", headers=gw.files.headers("alice"))
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


async def test_readiness_says_auth_is_required(gw: SecureGateway) -> None:
    answer = await gw.http.get("/readyz")
    assert answer.json()["checks"]["auth"] == "required"
