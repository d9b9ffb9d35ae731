"""JWT bearer tokens: verification against a JWKS served on 127.0.0.1, the tokens that must be refused,
key rotation without a restart, the bounded refresh rate, and the same through the gateway (REST and gRPC)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.security.jwt_auth import JwksCache, JwtAuthenticator
from gateway.service.errors import Unauthenticated, Unavailable
from tests.support.auth_support import SecureGateway, secure_gateway
from tests.support.jwks_support import (
    AUDIENCE,
    ISSUER,
    JwksServer,
    SigningKey,
    hmac_token_with,
    jwks_server,
    unsigned_token,
)
from tests.support.waiting import ManualClock


@pytest.fixture(scope="module")
def key_a() -> SigningKey:
    return SigningKey.rsa("key-a")


@pytest.fixture(scope="module")
def key_b() -> SigningKey:
    return SigningKey.rsa("key-b")


@pytest.fixture
async def issuer(key_a: SigningKey) -> AsyncIterator[JwksServer]:
    async with jwks_server(key_a) as served:
        yield served


def _authenticator(url: str, clock: ManualClock, **options: object) -> JwtAuthenticator:
    cache = JwksCache(url, refresh_interval=30.0, clock=clock)
    settings = {"issuer": ISSUER, "audience": [AUDIENCE], "algorithms": ["RS256", "ES256"], "leeway": 5.0}
    settings.update(options)
    return JwtAuthenticator(cache, roles_claim="roles", **settings)  # type: ignore[arg-type]


async def test_a_valid_token_names_the_principal_and_roles(issuer: JwksServer, key_a: SigningKey) -> None:
    auth = _authenticator(issuer.url, ManualClock())
    principal = await auth.authenticate(key_a.token(roles=["app", "ops"], scope="read write"))
    assert principal.name == "jwt-user" and principal.method == "jwt"
    assert principal.roles == {"app", "ops"}  # scopes are not roles
    assert principal.scopes == {"read", "write"}
    assert principal.label == "jwt:jwt-user" and principal.identity == f"jwt:jwt-user@{ISSUER}"
    assert principal.claims["iss"] == ISSUER
    await auth.close()


async def test_an_ec_key_works_too() -> None:
    key = SigningKey.ec("ec-1")
    async with jwks_server(key) as served:
        auth = _authenticator(served.url, ManualClock())
        assert (await auth.authenticate(key.token())).name == "jwt-user"
        await auth.close()


@pytest.mark.parametrize(
    ("case", "complaint"),
    [
        ("expired", "expired"),
        ("wrong_audience", "audience"),
        ("wrong_issuer", "issuer"),
        ("not_yet_valid", "not valid yet"),
        ("alg_none", "algorithm 'none'"),
        ("hs256_with_public_key", "algorithm 'HS256'"),
        ("unknown_kid", "unknown kid"),
        ("no_exp", "'exp'"),
        ("no_sub", "'sub'"),
        ("tampered", "signature"),
        ("other_key_same_kid", "signature"),
        ("garbage", "well-formed"),
    ],
)
async def test_tokens_that_must_be_refused(
    issuer: JwksServer, key_a: SigningKey, key_b: SigningKey, case: str, complaint: str
) -> None:
    now = int(time.time())
    tokens = {
        "expired": lambda: key_a.token(exp=now - 60, iat=now - 600),
        "wrong_audience": lambda: key_a.token(aud="someone-else"),
        "wrong_issuer": lambda: key_a.token(iss="http://127.0.0.1/other-issuer"),
        "not_yet_valid": lambda: key_a.token(nbf=now + 600),
        "alg_none": lambda: unsigned_token(),
        "hs256_with_public_key": lambda: hmac_token_with(key_a.public_pem(), "key-a"),
        "unknown_kid": lambda: key_b.token(),
        "no_exp": lambda: key_a.token(exp=None),
        "no_sub": lambda: key_a.token(sub=None),
        "tampered": lambda: _tamper(key_a.token()),
        "other_key_same_kid": lambda: SigningKey("key-a", key_b.private, "RS256").token(),
        "garbage": lambda: "eyJhbGciOi.not-base64!.x",
    }
    auth = _authenticator(issuer.url, ManualClock())
    with pytest.raises(Unauthenticated, match=complaint):
        await auth.authenticate(tokens[case]())
    await auth.close()


def _tamper(token: str) -> str:
    header, body, signature = token.split(".")
    return f"{header}.{body[:-2]}{'AA' if not body.endswith('AA') else 'BB'}.{signature}"


async def test_a_key_type_that_does_not_fit_the_algorithm_is_refused(issuer: JwksServer) -> None:
    ec_key = SigningKey.ec("key-a")  # an ES256 token naming the RSA key's kid
    auth = _authenticator(issuer.url, ManualClock())
    with pytest.raises(Unauthenticated, match="does not fit"):
        await auth.authenticate(ec_key.token())
    await auth.close()


async def test_key_rotation_is_picked_up_without_a_restart(
    issuer: JwksServer, key_a: SigningKey, key_b: SigningKey
) -> None:
    clock = ManualClock()
    auth = _authenticator(issuer.url, clock)
    assert (await auth.authenticate(key_a.token(sub="before"))).name == "before"
    assert issuer.fetches == 1
    issuer.keys = [key_b]  # the issuer rotates: key-b signs from now on, key-a is retired
    clock.advance(31)  # past the refresh interval
    assert (await auth.authenticate(key_b.token(sub="after"))).name == "after"
    assert issuer.fetches == 2
    with pytest.raises(Unauthenticated, match="unknown kid"):
        await auth.authenticate(key_a.token(sub="new-token-with-retired-key"))
    await auth.close()


async def test_unknown_key_ids_cannot_flood_the_issuer(issuer: JwksServer, key_a: SigningKey) -> None:
    clock = ManualClock()
    auth = _authenticator(issuer.url, clock)
    await auth.authenticate(key_a.token())
    for i in range(50):
        with pytest.raises(Unauthenticated, match="unknown kid"):
            await auth.authenticate(key_a.token(kid=f"made-up-{i}"))
        clock.advance(0.5)
    # 25 s of made-up key ids within a 30 s refresh interval: not one more fetch
    assert issuer.fetches == 1
    clock.advance(10)
    with pytest.raises(Unauthenticated):
        await auth.authenticate(key_a.token(kid="made-up-late"))
    assert issuer.fetches == 2
    await auth.close()


async def test_a_verified_token_is_remembered(issuer: JwksServer, key_a: SigningKey) -> None:
    auth = _authenticator(issuer.url, ManualClock())
    token = key_a.token()
    first = await auth.authenticate(token)
    issuer.keys = []  # not asked again: the second use is a cache hit
    assert await auth.authenticate(token) is first
    await auth.close()


async def test_an_unreachable_issuer_is_unavailable_not_a_crash() -> None:
    async with jwks_server() as served:
        url = served.url  # closed when the block ends
    auth = _authenticator(url, ManualClock())
    with pytest.raises(Unavailable, match="jwks_url"):
        await auth.authenticate(SigningKey.rsa("k").token())
    await auth.close()


@pytest.fixture
async def jwt_gateway(tmp_path: Path, issuer: JwksServer) -> AsyncIterator[SecureGateway]:
    jwt_settings = {"issuer": ISSUER, "audience": [AUDIENCE], "jwks_url": issuer.url, "roles_claim": "roles"}
    async with secure_gateway(tmp_path, auth={"jwt": jwt_settings}) as gw:
        yield gw


async def test_the_gateway_takes_jwts_on_rest_and_grpc(jwt_gateway: SecureGateway, key_a: SigningKey) -> None:
    gw = jwt_gateway
    good = key_a.token(roles=["app"])
    answer = await gw.http.post(
        "/v1/topics/demo/messages",
        json={"messages": [{"value": "x"}]},
        headers={"Authorization": f"Bearer {good}"},
    )
    assert answer.status_code == 200, answer.text
    view = await gw.stub.GetTopic(
        pb.GetTopicRequest(topic="demo"), metadata=(("authorization", f"Bearer {good}"),)
    )
    assert view.topic == "demo"
    norole = key_a.token()
    answer = await gw.http.get("/v1/topics/demo", headers={"Authorization": f"Bearer {norole}"})
    assert answer.status_code == 403
    for bad in (key_a.token(exp=int(time.time()) - 60), unsigned_token(roles=["app"])):
        answer = await gw.http.get("/v1/topics/demo", headers={"Authorization": f"Bearer {bad}"})
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"].startswith("Bearer")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.stub.GetTopic(
                pb.GetTopicRequest(topic="demo"), metadata=(("authorization", f"Bearer {bad}"),)
            )
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
    # API keys keep working next to JWTs
    assert (await gw.http.get("/v1/topics/demo", headers=gw.files.headers("alice"))).status_code == 200
