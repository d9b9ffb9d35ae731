"""The principal carried from the adapters to the service layer."""

from __future__ import annotations

import asyncio

import pytest

from gateway.service.principal import ANONYMOUS, Principal, current_principal, principal_scope


def test_outside_any_request_the_caller_is_anonymous() -> None:
    assert current_principal() is ANONYMOUS
    assert ANONYMOUS.anonymous


def test_a_scope_sets_and_restores_the_principal() -> None:
    alice = Principal("alice", "api_key", roles=frozenset({"publisher"}))
    with principal_scope(alice):
        assert current_principal() == alice
        assert not current_principal().anonymous
    assert current_principal() is ANONYMOUS


def test_the_scope_is_restored_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError), principal_scope(Principal("bob", "jwt")):
        raise RuntimeError("boom")
    assert current_principal() is ANONYMOUS


async def test_concurrent_requests_do_not_see_each_others_principal() -> None:
    seen: dict[str, str] = {}

    async def serve(name: str) -> None:
        with principal_scope(Principal(name, "api_key")):
            await asyncio.sleep(0.01)
            seen[name] = current_principal().name

    await asyncio.gather(serve("a"), serve("b"), serve("c"))
    assert seen == {"a": "a", "b": "b", "c": "c"}


def test_claims_do_not_take_part_in_equality() -> None:
    one = Principal("carol", "jwt", claims={"exp": 1})
    two = Principal("carol", "jwt", claims={"exp": 2})
    assert one == two and hash(one) == hash(two)
