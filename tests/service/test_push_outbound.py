"""The outbound side of push subscriptions against a real receiver on 127.0.0.1: which endpoints
``push.allow`` lets through (checked when defined and at each delivery), the resolved address pinned for
the connection while Host and the TLS name stay the endpoint's, certificates verified, no redirect
followed, bounded answers and time."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.service.errors import InvalidInput
from gateway.service.push_outbound import EndpointPolicy, EndpointRefused, Outbound, Resolver, shown_url
from tests.support.push_support import Answer, receiver
from tests.support.tls_support import make_pki


@pytest.mark.parametrize(
    ("allow", "url", "allowed"),
    [
        ([], "https://hooks.example/x", False),
        (["hooks.example"], "https://hooks.example/x", True),
        (["hooks.example"], "https://HOOKS.example./x", True),
        (["hooks.example"], "https://evil.hooks.example/x", False),
        (["*.example"], "https://a.b.example/x", True),
        (["*.example"], "https://example/x", False),
        (["*"], "https://anything.test/x", True),
        (["*"], "https://8.8.8.8/x", True),
        (["*"], "https://127.0.0.1/x", False),  # * is public addresses only
        (["*"], "https://10.1.2.3/x", False),
        (["*"], "https://[::1]/x", False),
        (["*"], "https://[::ffff:127.0.0.1]/x", False),  # IPv4-mapped loopback is loopback
        (["*"], "https://169.254.169.254/latest/meta-data", False),  # link-local (cloud metadata)
        (["127.0.0.1"], "http://127.0.0.1:8080/x", True),
        (["10.0.0.0/8"], "http://10.9.9.9/x", True),
        (["10.0.0.0/8"], "http://11.0.0.1/x", False),
        (["::1"], "http://[::1]:9/x", True),
    ],
)
def test_push_allow_decides_which_endpoints_may_be_defined(allow: list[str], url: str, allowed: bool) -> None:
    policy = EndpointPolicy.parse(allow)
    if allowed:
        policy.check_url(url)
    else:
        with pytest.raises(InvalidInput) as caught:
            policy.check_url(url)
        assert caught.value.field == "endpoint" and "push.allow" in caught.value.message


@pytest.mark.parametrize(
    ("allow", "addresses", "refused"),
    [
        (["hooks.example"], ["93.184.216.34"], False),
        (["hooks.example"], ["127.0.0.1"], True),
        (["hooks.example"], ["93.184.216.34", "10.0.0.1"], True),  # one private answer refuses the name
        (["hooks.example"], ["::ffff:10.0.0.1"], True),
        (["hooks.example"], ["fe80::1"], True),
        (["hooks.example"], ["fc00::1"], True),
        (["hooks.example"], ["0.0.0.0"], True),
        (["hooks.example"], [], True),
        (["hooks.example", "127.0.0.0/8"], ["127.0.0.1"], False),
    ],
)
def test_every_resolved_address_must_be_public_or_listed(
    allow: list[str], addresses: list[str], refused: bool
) -> None:
    policy = EndpointPolicy.parse(allow)
    if refused:
        with pytest.raises(EndpointRefused):
            policy.check_addresses("hooks.example", addresses)
    else:
        assert policy.check_addresses("hooks.example", addresses) == addresses[0]


@pytest.mark.parametrize("entry", ["http://x", "a b", "*.", "x..y", "-" * 64 + ".example", "*.*.example"])
def test_a_malformed_allow_entry_is_named(entry: str) -> None:
    with pytest.raises(ValueError, match=r"push\.allow entry"):
        EndpointPolicy.parse([entry])


def test_logs_show_no_query() -> None:
    assert shown_url("https://h.example/p?token=secret") == "https://h.example/p"


def _resolving_to(*answers: list[str]) -> tuple[list[str], Resolver]:
    """A resolver that gives ``answers`` one after the other (a DNS name that changes its answer)."""
    asked: list[str] = []
    queue = list(answers)

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return asked, resolve


async def test_the_connection_goes_to_the_checked_address_with_the_name_as_host() -> None:
    async with receiver() as hook:
        port = hook.url.split(":")[2].split("/")[0]
        asked, resolve = _resolving_to(["127.0.0.1"], ["10.1.2.3"])
        policy = EndpointPolicy.parse(["hooks.test", "127.0.0.1"])
        for attempt in range(2):  # a new client, so a new connection: the name is resolved again
            outbound = Outbound(
                f"http://hooks.test:{port}/in?x=1", policy, max_connections=2, resolve=resolve
            )
            try:
                if attempt == 0:
                    answer = await outbound.post(b"{}", {"content-type": "application/json"}, 5.0)
                    assert answer.acknowledged
                else:
                    # The name now resolves to an address push.allow does not hold (rebinding): refused.
                    with pytest.raises(EndpointRefused, match=r"10\.1\.2\.3"):
                        await outbound.post(b"{}", {}, 5.0)
            finally:
                await outbound.close()
    assert asked == ["hooks.test", "hooks.test"]
    assert [(r.path, r.headers["host"]) for r in hook.requests] == [("/in?x=1", f"hooks.test:{port}")]


async def test_a_kept_connection_is_not_resolved_again() -> None:
    async with receiver() as hook:
        asked, resolve = _resolving_to(["127.0.0.1"], ["10.1.2.3"])
        policy = EndpointPolicy.parse(["localhost", "127.0.0.1"])
        outbound = Outbound(
            hook.url.replace("127.0.0.1", "localhost"), policy, max_connections=1, resolve=resolve
        )
        try:
            answers = [await outbound.post(b"x", {}, 5.0) for _ in range(3)]
        finally:
            await outbound.close()
    assert all(a.acknowledged for a in answers) and asked == ["localhost"] and len(hook.requests) == 3


async def test_tls_is_verified_for_the_endpoint_name_not_the_address(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)  # the server certificate names localhost, tubemq.test, 127.0.0.1 and ::1
    async with receiver(tls=pki.server_context()) as hook:
        port = hook.url.split(":")[2].split("/")[0]
        policy = EndpointPolicy.parse(["tubemq.test", "other.test", "127.0.0.1"])
        _, resolve = _resolving_to(["127.0.0.1"])
        results = {}
        for name, trust in (
            ("tubemq.test", pki.client_context()),
            ("other.test", pki.client_context()),  # the certificate does not name it
            ("tubemq.test", True),  # the system's CAs do not know the test CA
        ):
            outbound = Outbound(
                f"https://{name}:{port}/hook",
                policy,
                max_connections=1,
                verify=trust,
                resolve=resolve,
            )
            try:
                results[(name, trust is True)] = await outbound.post(b"x", {}, 5.0)
            finally:
                await outbound.close()
    assert results[("tubemq.test", False)].acknowledged
    assert results[("other.test", False)].status is None
    assert results[("tubemq.test", True)].status is None
    assert [r.headers["host"] for r in hook.requests] == [f"tubemq.test:{port}"]


async def test_a_redirect_is_not_followed_and_a_long_answer_is_cut() -> None:
    async with receiver(lambda r: Answer(302), answer_bytes=1 << 20) as hook:
        outbound = Outbound(
            hook.url, EndpointPolicy.parse(["127.0.0.1"]), max_connections=1, max_answer_bytes=1024
        )
        try:
            answer = await outbound.post(b"x", {}, 5.0)
        finally:
            await outbound.close()
    assert answer.status == 302 and not answer.acknowledged
    assert len(hook.requests) == 1


async def test_a_slow_endpoint_times_out_and_a_closed_port_fails_to_connect() -> None:
    async with receiver(lambda r: Answer(200, delay=5.0)) as hook:
        outbound = Outbound(hook.url, EndpointPolicy.parse(["127.0.0.1"]), max_connections=1)
        try:
            answer = await outbound.post(b"x", {}, 0.3)
        finally:
            await outbound.close()
        closed_url = hook.url
    assert (answer.status, answer.failure) == (None, "timeout")
    outbound = Outbound(closed_url, EndpointPolicy.parse(["127.0.0.1"]), max_connections=1)
    try:
        answer = await outbound.post(b"x", {}, 2.0)
    finally:
        await outbound.close()
    assert (answer.status, answer.failure) == (None, "connect")
