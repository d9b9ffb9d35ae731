"""The parts of authentication and authorization that need no gateway: the keys file, `keys new`, the
rules, and the settings that cannot work."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.__main__ import main
from gateway.config import AuthSettings
from gateway.security.api_keys import ApiKeyAuthenticator, hash_key, load_keys, parse_keys
from gateway.security.authenticator import Authenticator
from gateway.security.credentials import Credentials, credential_headers, from_headers
from gateway.security.rules import parse_rules
from gateway.security.setup import OPEN_MODE_WARNING, SecurityConfigError, build_security
from gateway.service.errors import InvalidInput, PermissionDenied, Unauthenticated
from gateway.service.principal import ANONYMOUS, Principal
from tests.support.files import ROOT


def test_keys_new_prints_a_key_once_and_an_entry_that_authenticates_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["keys", "new", "--principal", "billing", "--role", "publisher", "--role", "ops"]) == 0
    out = capsys.readouterr().out
    key = out.split("key: ", 1)[1].split()[0]
    entry = json.loads(out.strip().splitlines()[-1])
    assert entry == {"principal": "billing", "hash": hash_key(key), "roles": ["publisher", "ops"]}
    assert out.count(key) == 1 and len(key) >= 40
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [entry]}))
    principal = ApiKeyAuthenticator(load_keys(path)).authenticate(key)
    assert principal == Principal("billing", "api_key", frozenset({"publisher", "ops"}))


def test_two_new_keys_differ(capsys: pytest.CaptureFixture[str]) -> None:
    main(["keys", "new", "--principal", "a"])
    main(["keys", "new", "--principal", "a"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("key: ")]
    assert len(set(lines)) == 2


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ({"keys": [{"principal": "a", "hash": "sha256:ABC"}]}, "64 lower-case hex"),
        ({"keys": [{"principal": "", "hash": "sha256:" + "0" * 64}]}, "principal"),
        ({"keys": [{"principal": "a", "hash": "sha256:" + "0" * 64, "roles": "admin"}]}, "roles"),
        ({"keys": [{"principal": "a", "hash": "sha256:" + "0" * 64, "key": "clear"}]}, "unknown fields"),
        ({"keys": [{"principal": "a", "hash": "sha256:" + "0" * 64}] * 2}, "repeats"),
        ({"entries": []}, "expected"),
    ],
)
def test_a_bad_keys_file_is_refused_naming_the_entry(document: object, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_keys(document, "keys.json")


def test_an_unknown_key_is_refused_without_echoing_it() -> None:
    keys = ApiKeyAuthenticator(parse_keys({"keys": [{"principal": "a", "hash": hash_key("right")}]}))
    with pytest.raises(Unauthenticated) as caught:
        keys.authenticate("wrong-secret-value")
    assert "wrong-secret-value" not in str(caught.value)


@given(st.text(max_size=200))
def test_any_presented_key_text_is_either_known_or_refused(text: str) -> None:
    keys = ApiKeyAuthenticator(parse_keys({"keys": [{"principal": "a", "hash": hash_key("k")}]}))
    if text == "k":
        assert keys.authenticate(text).name == "a"
    else:
        with pytest.raises(Unauthenticated):
            keys.authenticate(text)


@given(st.one_of(st.none(), st.text(max_size=100)), st.one_of(st.none(), st.text(max_size=100)))
def test_header_parsing_never_fails_otherwise_than_unauthenticated(
    authorization: str | None, api_key: str | None
) -> None:
    try:
        credentials = from_headers(authorization, api_key)
    except Unauthenticated:
        return
    assert isinstance(credentials, Credentials)
    assert credentials.bearer is None or credentials.bearer == credentials.bearer.strip()
    for secret in (credentials.bearer, credentials.api_key):
        assert not secret or secret not in repr(credentials) or secret in "Credentials(client_cert=None)"


@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"authorization", "authorization", b"x-api-key", "x-api-key", b"host", "te"]),
            st.one_of(st.text(max_size=20), st.binary(max_size=20)),
        ),
        max_size=8,
    )
)
def test_credential_headers_take_each_once_and_refuse_a_second(pairs: list[tuple[Any, Any]]) -> None:
    names = [n.decode() if isinstance(n, bytes) else n for n, _ in pairs]
    twice = [n for n in ("authorization", "x-api-key") if names.count(n) > 1]
    try:
        authorization, api_key = credential_headers(pairs)
    except InvalidInput as exc:
        assert exc.field is not None and exc.field.lower() in twice
        return
    assert not twice
    for name, found in (("authorization", authorization), ("x-api-key", api_key)):
        values = [
            v.decode("latin-1") if isinstance(v, bytes) else v for n, v in pairs if n in (name, name.encode())
        ]
        assert found == (values[0] if values else None)


ALICE = Principal("alice", "api_key", frozenset({"app"}))
TENANT = Principal("svc", "jwt", claims={"tenant": "acme", "groups": ["ops", "dev"], "org": {"unit": "x"}})
RULES = parse_rules(
    {
        "rules": [
            {"roles": ["admin"], "actions": ["*"], "topics": ["*"], "groups": ["*"]},
            {
                "principals": ["api_key:alice"],
                "actions": ["publish", "describe"],
                "topics": ["orders_*", "audit"],
            },
            {"roles": ["app"], "actions": ["consume"], "topics": ["orders_?"], "groups": ["billing*"]},
            {"claims": {"tenant": "acme", "org.unit": "x"}, "actions": ["read_ranges"], "topics": ["acme_*"]},
            {"claims": {"groups": "ops"}, "actions": ["describe_cluster"]},
        ]
    }
)


@pytest.mark.parametrize(
    ("principal", "action", "topic", "group", "allowed"),
    [
        (ALICE, "publish", "orders_eu", None, True),
        (ALICE, "publish", "audit", None, True),
        (ALICE, "publish", "auditx", None, False),
        (ALICE, "publish", "other", None, False),
        (ALICE, "publish", None, None, True),  # some topic
        (ALICE, "consume", "orders_1", "billing_eu", True),
        (ALICE, "consume", "orders_12", "billing_eu", False),
        (ALICE, "consume", "orders_1", "shipping", False),
        (ALICE, "consume", None, "billing", True),
        (ALICE, "read_ranges", "orders_eu", None, False),
        (ALICE, "admin", None, None, False),
        (ALICE, "describe_cluster", None, None, False),
        (TENANT, "read_ranges", "acme_x", None, True),
        (TENANT, "read_ranges", "other", None, False),
        (TENANT, "describe_cluster", None, None, True),
        (TENANT, "publish", "acme_x", None, False),
        (Principal("root", "api_key", frozenset({"admin"})), "admin", None, None, True),
        (Principal("root", "api_key", frozenset({"admin"})), "not-an-action", None, None, False),
        (ANONYMOUS, "publish", "orders_eu", None, False),
    ],
)
def test_rules(
    principal: Principal, action: str, topic: str | None, group: str | None, allowed: bool
) -> None:
    assert RULES.allows(principal, action, topic=topic, group=group) is allowed


def test_a_denial_names_principal_action_and_resource() -> None:
    with pytest.raises(PermissionDenied) as caught:
        RULES.check(ALICE, "consume", topic="orders_1", group="shipping")
    assert caught.value.action == "consume"
    assert caught.value.resource == "topic 'orders_1' in group 'shipping'"
    assert "'api_key:alice' may not consume" in caught.value.message


@pytest.mark.parametrize(
    ("rule", "complaint"),
    [
        ({"actions": ["publish"], "topics": ["*"]}, "whom it applies to"),
        ({"roles": ["a"], "actions": ["publsh"], "topics": ["*"]}, "not among"),
        ({"roles": ["a"], "actions": ["publish"]}, "lists no topics"),
        ({"roles": ["a"], "actions": ["consume"], "topics": ["*"]}, "lists no groups"),
        ({"roles": ["a"], "actions": ["admin"], "topic": ["*"]}, "unknown fields"),
        ({"roles": "admin", "actions": ["admin"]}, "list of non-empty strings"),
    ],
)
def test_a_bad_rule_is_refused_naming_it(rule: dict[str, object], complaint: str) -> None:
    with pytest.raises(ValueError, match=rf"rules\[0\]: .*{complaint}"):
        parse_rules({"rules": [rule]}, "rules.json")


def test_open_mode_is_anonymous_and_says_so_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "gateway.security"):
        security = build_security(AuthSettings())
    assert OPEN_MODE_WARNING in caplog.text
    assert security.mode == "open" and not security.policy.enforcing


async def test_open_mode_ignores_credentials() -> None:
    assert await Authenticator("open").authenticate(Credentials(bearer="whatever")) is ANONYMOUS


def test_required_mode_without_any_authenticator_refuses_to_start() -> None:
    with pytest.raises(SecurityConfigError, match="no way to authenticate is configured"):
        build_security(AuthSettings(mode="required"))


def test_partly_configured_jwt_refuses_to_start() -> None:
    with pytest.raises(SecurityConfigError, match=r"auth\.jwt\.audience"):
        build_security(
            AuthSettings(
                mode="required", jwt={"issuer": "http://127.0.0.1/issuer", "jwks_url": "http://127.0.0.1:1/"}
            )
        )


def test_unreadable_files_refuse_to_start(tmp_path: Path) -> None:
    with pytest.raises(SecurityConfigError, match=r"cannot read auth\.api_keys_file"):
        build_security(AuthSettings(mode="required", api_keys_file=tmp_path / "missing.json"))
    bad = tmp_path / "rules.json"
    bad.write_text("{not json")
    keys = tmp_path / "keys.json"
    keys.write_text('{"keys": []}')
    with pytest.raises(SecurityConfigError, match="is not JSON"):
        build_security(AuthSettings(mode="required", api_keys_file=keys, rules_file=bad))


@pytest.mark.parametrize("algorithms", [["none"], ["HS256"], ["RS256", "HS512"], []])
def test_symmetric_and_none_algorithms_cannot_be_configured(algorithms: list[str]) -> None:
    with pytest.raises(ValueError, match="algorithms"):
        AuthSettings(jwt={"algorithms": algorithms})


def test_serve_refuses_to_start_with_a_clear_message() -> None:
    # a subprocess: `serve` configures the process's logging, which must not leak into other tests
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUBEMQ_GATEWAY_AUTH__MODE": "required"}
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--http-port", "0", "--grpc-port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "cannot start" in done.stderr and "auth.api_keys_file" in done.stderr
