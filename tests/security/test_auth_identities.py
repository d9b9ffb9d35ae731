"""Identities where authentication methods meet (issue #22, rows 2, 4 and 5), against a served gateway
with API keys and JWTs (a JWKS on 127.0.0.1):

* a JWT whose ``sub`` is ``alice`` is not the API key principal ``alice``: it does not see her instances,
  inherit the rules that name her, or spend her rate buckets; rules name each kind (``api_key:``, ``jwt:``);
* OAuth scopes are their own rule field: ``"scope": "openid admin"`` does not make a token an ``admin``;
* claim values compare with their JSON types: ``premium: 1`` does not satisfy ``{"premium": true}``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.security.rules import parse_rules
from gateway.service.principal import Principal
from gateway.service.quotas import Quotas, RateLimits, caller_key
from tests.support.auth_support import RULES, SecureGateway, secure_gateway
from tests.support.jwks_support import AUDIENCE, ISSUER, SigningKey, jwks_server

GROUP = "ident_group"
RULES_HERE: dict[str, Any] = {
    "rules": [
        *RULES["rules"],
        # a rule naming the JWT subject carol: not the API key principal carol (role narrow)
        {"principals": ["jwt:carol"], "actions": ["read_ranges"], "topics": ["*"]},
        {"scopes": ["tubemq.describe"], "actions": ["describe"], "topics": ["*"]},
        {"claims": {"premium": True}, "actions": ["describe"], "topics": ["premium_*"]},
    ]
}


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey.rsa("ident-key")


@pytest.fixture
async def gw(tmp_path: Path, key: SigningKey) -> AsyncIterator[SecureGateway]:
    async with jwks_server(key) as issuer:
        jwt = {"issuer": ISSUER, "audience": [AUDIENCE], "jwks_url": issuer.url, "roles_claim": "roles"}
        async with secure_gateway(tmp_path, RULES_HERE, auth={"jwt": jwt}) as gateway:
            yield gateway


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_jwt_named_like_an_api_key_principal_does_not_see_her_instance(
    gw: SecureGateway, key: SigningKey
) -> None:
    created = await gw.http.post(
        f"/v1/consumers/{GROUP}", json={"topics": ["demo"]}, headers=gw.files.headers("alice")
    )
    assert created.status_code == 201, created.text
    instance = created.json()["instanceId"]
    base = f"/v1/consumers/{GROUP}/instances/{instance}"
    token = _bearer(key.token(sub="alice", roles=["app"]))
    for method, path in (("GET", base), ("GET", f"{base}/messages?timeout_ms=0"), ("DELETE", base)):
        answer = await gw.http.request(method, path, headers=token)
        assert answer.status_code == 404, (method, path, answer.text)
    via_grpc = (("authorization", token["Authorization"]),)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gw.stub.Poll(
            pb.PollRequest(group=GROUP, instance_id=instance, max_messages=1), metadata=via_grpc
        )
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    # still hers
    assert (await gw.http.get(base, headers=gw.files.headers("alice"))).status_code == 200
    assert (await gw.http.delete(base, headers=gw.files.headers("alice"))).status_code == 204


async def test_rules_name_each_kind_of_principal(gw: SecureGateway, key: SigningKey) -> None:
    ranges = "/v1/topics/demo/partitions"
    jwt_carol = _bearer(key.token(sub="carol"))
    as_jwt = await gw.http.get(ranges, headers=jwt_carol)
    assert as_jwt.status_code != 403, as_jwt.text  # jwt:carol may read ranges
    as_key = await gw.http.get(ranges, headers=gw.files.headers("carol"))
    assert as_key.status_code == 403, as_key.text  # api_key:carol (role narrow) may not
    assert "'api_key:carol'" in as_key.json()["error"]["message"]


async def test_scopes_are_never_roles(gw: SecureGateway, key: SigningKey) -> None:
    admin_scope = _bearer(key.token(sub="eve", scope="openid admin"))
    assert (await gw.http.get("/metrics", headers=admin_scope)).status_code == 403
    assert (await gw.http.get("/v1/topics/demo", headers=admin_scope)).status_code == 403
    described = await gw.http.get(
        "/v1/topics/demo", headers=_bearer(key.token(sub="eve", scp=["tubemq.describe"]))
    )
    assert described.status_code == 200, described.text
    # a role claim still is a role
    assert (
        await gw.http.get("/metrics", headers=_bearer(key.token(sub="eve", roles=["admin"])))
    ).status_code == 200


@pytest.mark.parametrize(
    ("premium", "allowed"),
    [(True, True), (1, False), (1.0, False), ("true", False), ([True], True), ([1], False)],
)
async def test_claims_compare_with_their_json_types(
    gw: SecureGateway, key: SigningKey, premium: object, allowed: bool
) -> None:
    answer = await gw.http.get("/v1/topics/premium_x", headers=_bearer(key.token(sub="p", premium=premium)))
    # allowed: the topic does not exist (404); refused: 403
    assert answer.status_code == (404 if allowed else 403), answer.text


def test_identities_of_two_methods_never_share_a_quota_or_an_override() -> None:
    api, token = Principal("alice", "api_key"), Principal("alice", "jwt", issuer=ISSUER)
    assert api != token and api.identity != token.identity
    assert caller_key(api) == "api_key:alice" and caller_key(token) == f"jwt:alice@{ISSUER}"
    slow = RateLimits(publish_messages_per_second=1, burst_seconds=1)
    quotas = Quotas(RateLimits(), {"api_key:alice": slow})
    assert quotas.limits_for(api) is slow and quotas.limits_for(token) is quotas.default


def test_a_bare_principal_name_is_refused_with_the_forms_to_write() -> None:
    from gateway.security.setup import SecurityConfigError, check_override_names

    with pytest.raises(ValueError, match=r"api_key:alice.*jwt:alice.*mtls:alice"):
        parse_rules({"rules": [{"principals": ["alice"], "actions": ["describe"], "topics": ["*"]}]})
    with pytest.raises(SecurityConfigError, match="api_key:bob"):
        check_override_names(["anonymous", "jwt:x", "bob"])
    check_override_names(["anonymous", "api_key:a", "jwt:b", "mtls:CN=c"])
