"""Push tokens: signed with an EC P-256 (ES256) or RSA (RS256) key, verifiable with the JWKS the gateway
serves, reused until near their expiry; other keys are refused naming the setting."""

from __future__ import annotations

from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from gateway.service.push_token import TOKEN_LIFETIME, PushTokens
from tests.support.waiting import ManualClock


def _write(tmp_path: Path, key: PrivateKeyTypes) -> Path:
    path = tmp_path / "key.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return path


@pytest.mark.parametrize(
    ("key", "algorithm"),
    [(ec.generate_private_key(ec.SECP256R1()), "ES256"), (rsa.generate_private_key(65537, 2048), "RS256")],
)
def test_tokens_verify_with_the_served_keys(tmp_path: Path, key: PrivateKeyTypes, algorithm: str) -> None:
    clock = ManualClock(1_800_000_000.0)
    tokens = PushTokens(_write(tmp_path, key), "https://gw.example", clock=clock)
    token = tokens.token("hooks", "https://hooks.example/in")
    (served,) = tokens.jwks()["keys"]
    assert served["alg"] == algorithm and served["use"] == "sig" and "d" not in served  # public only
    claims = jwt.decode(
        token,
        jwt.PyJWK(served).key,
        algorithms=[algorithm],
        audience="https://hooks.example/in",
        issuer="https://gw.example",
        options={"verify_exp": False, "verify_iat": False},
    )
    assert (claims["sub"], claims["iat"], claims["exp"]) == (
        "hooks",
        1_800_000_000,
        1_800_000_000 + TOKEN_LIFETIME,
    )
    clock.advance(TOKEN_LIFETIME - 301)
    assert tokens.token("hooks", "https://hooks.example/in") == token  # reused
    clock.advance(2)
    assert tokens.token("hooks", "https://hooks.example/in") != token  # renewed five minutes before expiry
    assert tokens.token("other", "https://hooks.example/in") != token


@pytest.mark.parametrize(
    "key",
    [ec.generate_private_key(ec.SECP384R1()), rsa.generate_private_key(65537, 1024)],
    ids=["p384", "rsa1024"],
)
def test_other_keys_are_refused(tmp_path: Path, key: PrivateKeyTypes) -> None:
    with pytest.raises(ValueError, match=r"push\.token_key_file .*EC P-256"):
        PushTokens(_write(tmp_path, key), "https://gw.example")


def test_a_file_that_is_no_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "key.pem"
    path.write_text("not a key", encoding="utf-8")
    with pytest.raises(ValueError, match=r"not a PEM private key"):
        PushTokens(path, "https://gw.example")
