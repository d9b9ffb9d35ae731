"""Push subscriptions end to end: a gateway on the embedded cluster delivers to a real receiving HTTP server
on 127.0.0.1 (allowed explicitly in ``push.allow``), settles each message by the answer, retries with the
subscription's backoff and dead-letters past the last attempt; endpoints outside ``push.allow`` are refused,
also through a name that resolves to a refused address."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from standardwebhooks.webhooks import Webhook

from gateway.api.consumer_render import render_pushed
from gateway.service.instance_spec import InstanceSpec
from gateway.service.push import PushOptions, PushService
from gateway.service.push_outbound import EndpointPolicy
from tests.support.consumer_support import Env
from tests.support.gateway_support import gateway
from tests.support.push_support import Answer, Received, receiver
from tests.support.waiting import eventually

TOPICS = "demo:4,retry:2,dlq:1"
SECRET = "whsec_" + base64.b64encode(b"push-test-secret-0123456789abcdef").decode()
LOOPBACK = ["127.0.0.1/32"]


#: the topics of the ``env`` fixture (tests/conftest.py)
ENV_TOPICS = TOPICS


def _definition(endpoint: str, **changes: Any) -> dict[str, Any]:
    return {
        "name": "hooks",
        "group": "push-group",
        "topics": ["demo"],
        "endpoint": endpoint,
        "startPosition": "earliest",
        "retryTopic": "retry",
        "valueFormat": "utf8",
        "minBackoffMs": 100,
        "maxBackoffMs": 1000,
        "ackDeadlineMs": 2000,
        **changes,
    }


def _file(tmp_path: Path, *definitions: dict[str, Any]) -> str:
    path = tmp_path / "subscriptions.json"
    path.write_text(json.dumps({"subscriptions": list(definitions)}), encoding="utf-8")
    return str(path)


def _push(
    tmp_path: Path, *definitions: dict[str, Any], allow: list[str] = LOOPBACK, **more: Any
) -> dict[str, Any]:
    return {
        **more,
        "subscriptions_file": _file(tmp_path, *definitions),
        "allow": allow,
        "poll_wait": 0.2,
        "reload_interval": 0.1,
        "error_backoff": 0.2,
    }


async def _dead_letters(env: Env, count: int) -> list[Any]:
    service = await env.service()
    info = await service.create("dlq-reader", InstanceSpec(topics={"dlq": None}, start_position="earliest"))
    got: list[Any] = []
    async with asyncio.timeout(20):
        while len(got) < count:
            got += await service.poll("dlq-reader", info.instance_id, timeout=0.5)
    return got


async def test_each_message_is_delivered_once_with_a_verifiable_signature(env: Env, tmp_path: Path) -> None:
    async with receiver() as hook:
        definition = _definition(hook.url, secret=SECRET)
        async with gateway(env, push=_push(tmp_path, definition)):
            sent = [f"m-{i}".encode() for i in range(24)]
            await env.publish("demo", sent)
            await eventually(lambda: len(hook.answered) >= len(sent), timeout=20, what="24 deliveries")
            await asyncio.sleep(1.0)  # time for a duplicate to show
    verifier = Webhook(SECRET)
    values = []
    for request in hook.requests:
        assert request.method == "POST" and request.path == "/hook"
        assert request.headers["content-type"] == "application/json"
        document = verifier.verify(request.body, request.headers)  # raises on a wrong signature
        assert document["subscription"] == "hooks"
        message = document["message"]
        assert message["topic"] == "demo" and message["deliveryAttempt"] == 1
        # a poll's message less what settles it: the gateway settles by the answer, never the receiver
        assert set(message) == {
            "topic",
            "partitionKey",
            "brokerId",
            "partitionId",
            "offset",
            "messageId",
            "deliveryAttempt",
            "key",
            "streamId",
            "msgTime",
            "attributes",
            "encoding",
            "value",
        }
        values.append(message["value"].encode())
    assert sorted(values) == sorted(sent)  # each once, none twice


async def test_failing_answers_are_retried_with_backoff_until_one_succeeds(env: Env, tmp_path: Path) -> None:
    failures = 2

    def answer(request: Received) -> Answer:
        attempt = int(request.headers["tubemq-delivery-attempt"])
        return Answer(500 if attempt <= failures else 200)

    async with receiver(answer) as hook:
        definition = _definition(hook.url, payload="unwrapped", minBackoffMs=300, maxBackoffMs=400)
        async with gateway(env, push=_push(tmp_path, definition)):
            await env.publish("demo", [b"once", b"twice"])
            await eventually(lambda: len(hook.answered) >= 2, timeout=20, what="deliveries at attempt 3")
            await asyncio.sleep(0.5)
    for value in (b"once", b"twice"):
        tries = [r for r in hook.requests if r.body == value]
        assert [r.headers["tubemq-delivery-attempt"] for r in tries] == ["1", "2", "3"]
        # the backoff: 300 ms after the first failure, then 400 (the maximum) after the second
        assert tries[1].at - tries[0].at >= 0.3 and tries[2].at - tries[1].at >= 0.4
        assert len({r.headers["tubemq-message-id"] for r in tries}) == 1


async def test_an_endpoint_that_always_fails_gets_the_message_dead_lettered(env: Env, tmp_path: Path) -> None:
    async with receiver(lambda r: Answer(503)) as hook:
        definition = _definition(hook.url, deadLetterTopic="dlq", maxDeliveryAttempts=3, minBackoffMs=50)
        async with gateway(env, push=_push(tmp_path, definition)) as served:
            await env.publish("demo", [b"doomed"])
            letters = await _dead_letters(env, 1)
            async with httpx.AsyncClient(base_url=served.url) as client:
                metrics = (await client.get("/metrics")).text
    assert [m.message.body for m in letters] == [b"doomed"]
    assert letters[0].message.attributes["gateway.reason"] == "maxDeliveryAttemptsExceeded"
    attempts = [json.loads(r.body)["message"]["deliveryAttempt"] for r in hook.requests]
    assert attempts == [1, 2, 3]
    assert 'tubemq_gateway_push_deliveries_total{outcome="rejected",subscription="hooks"} 3.0' in metrics
    assert 'tubemq_gateway_push_deliveries_total{outcome="acked",subscription="hooks"} 0.0' in metrics
    assert 'tubemq_gateway_push_subscription_up{group="push-group",subscription="hooks"} 1.0' in metrics
    assert 'tubemq_gateway_dead_letters_total{group="push-group"} 1.0' in metrics


async def test_an_answer_slower_than_the_ack_deadline_is_retried(env: Env, tmp_path: Path) -> None:
    def answer(request: Received) -> Answer:
        first = json.loads(request.body)["message"]["deliveryAttempt"] == 1
        return Answer(200, delay=2.0 if first else 0.0)

    async with receiver(answer) as hook:
        definition = _definition(hook.url, ackDeadlineMs=300, minBackoffMs=50)
        async with gateway(env, push=_push(tmp_path, definition)):
            await env.publish("demo", [b"slow"])
            await eventually(
                lambda: any(json.loads(r.body)["message"]["deliveryAttempt"] == 2 for r in hook.answered),
                timeout=20,
                what="the second attempt answered",
            )


async def test_an_answer_just_inside_the_longest_ack_deadline_is_not_redelivered_meanwhile(
    env: Env, tmp_path: Path
) -> None:
    """consumers.max_ack_deadline 3 s allows ackDeadlineMs up to 1.5 s: the message stays held 1.5 s past
    the request, so an endpoint answering after 1.3 s gets it once, acknowledged, and never a second time
    while it works."""

    def answer(request: Received) -> Answer:
        return Answer(200, delay=1.3)

    async with receiver(answer) as hook:
        definition = _definition(hook.url, ackDeadlineMs=1500, minBackoffMs=50, maxConcurrency=4)
        async with gateway(env, push=_push(tmp_path, definition), max_ack_deadline=3.0):
            sent = [f"slow-{i}".encode() for i in range(4)]
            await env.publish("demo", sent)
            await eventually(lambda: len(hook.answered) >= len(sent), timeout=20, what="4 slow deliveries")
            await asyncio.sleep(3.5)  # past the hold: a redelivery of a settled message would show
    attempts = [(json.loads(r.body)["message"]["value"], r.headers["webhook-id"]) for r in hook.requests]
    assert sorted(v.encode() for v, _ in attempts) == sorted(sent), attempts  # each once
    assert len({w for _, w in attempts}) == len(sent)


async def test_an_endpoint_outside_push_allow_is_refused_when_defined(env: Env, tmp_path: Path) -> None:
    consumers = await env.service()

    async def start(definition: dict[str, Any], allow: list[str]) -> None:
        options = PushOptions(subscriptions_file=Path(_file(tmp_path, definition)))
        push = PushService(consumers, EndpointPolicy.parse(allow), render_pushed, options)
        try:
            await push.start()
        finally:
            await push.close()

    async with receiver() as hook:
        for allow in ([], ["10.0.0.0/8", "localhost"]):  # 127.0.0.1 is not in either
            with pytest.raises(ValueError, match=r"subscriptions\[0\]\.endpoint: .*127\.0\.0\.1"):
                await start(_definition(hook.url), allow)
        named = hook.url.replace("127.0.0.1", "localhost")
        with pytest.raises(ValueError, match=r"endpoint: endpoint host 'localhost' is not allowed"):
            await start(_definition(named), LOOPBACK)
        await start(_definition(hook.url), LOOPBACK)  # the same file with the address allowed starts
    assert hook.requests == []
    assert consumers.instance_count == 0  # the refused ones never joined, the allowed one left


async def test_a_name_resolving_to_a_refused_address_is_refused_at_delivery(env: Env, tmp_path: Path) -> None:
    async with receiver() as hook:
        named = hook.url.replace("127.0.0.1", "localhost")
        definition = _definition(named, deadLetterTopic="dlq", maxDeliveryAttempts=2, minBackoffMs=50)
        # The name is allowed, but it resolves to loopback, which push.allow does not hold.
        async with gateway(env, push=_push(tmp_path, definition, allow=["localhost"])):
            await env.publish("demo", [b"never-sent"])
            letters = await _dead_letters(env, 1)
    assert [m.message.body for m in letters] == [b"never-sent"]
    assert hook.requests == []


def _push_logs(caplog: pytest.LogCaptureFixture, start: str) -> list[logging.LogRecord]:
    found = [r for r in caplog.records if r.name == "gateway.service.push"]
    return [r for r in found if r.getMessage().startswith(start)]


async def test_a_refused_endpoint_is_logged_once_not_at_every_attempt(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.service.push")
    async with receiver() as hook:
        named = hook.url.replace("127.0.0.1", "localhost")
        definition = _definition(named, deadLetterTopic="dlq", maxDeliveryAttempts=3, minBackoffMs=50)
        async with gateway(env, push=_push(tmp_path, definition, allow=["localhost"])):
            await env.publish("demo", [b"r-1", b"r-2", b"r-3"])
            letters = await _dead_letters(env, 3)  # 9 refused attempts
    assert len(letters) == 3 and hook.requests == []
    refused = _push_logs(caplog, "push endpoint refused by push.allow")
    assert len(refused) == 1, [r.getMessage() for r in refused]
    assert "list the address in push.allow" in refused[0].getMessage()


async def test_the_drain_is_logged_once_not_every_second(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once the gateway drains, every poll of the push loop is refused; that is a state, logged once at info,
    not a warning at every retry."""
    caplog.set_level(logging.INFO, logger="gateway.service.push")
    async with receiver() as hook, gateway(env, push=_push(tmp_path, _definition(hook.url))) as served:
        await env.publish("demo", [b"before"])
        await eventually(lambda: hook.answered, timeout=20, what="a delivery")
        served.runtime.begin_drain()
        await asyncio.sleep(1.5)  # error_backoff 0.2 s: seven refused polls
    assert _push_logs(caplog, "push subscription cannot consume") == []
    assert len(_push_logs(caplog, "push subscription stops taking messages: the gateway is draining")) == 1


async def test_unwrapped_headers_carry_the_message_fields(env: Env, tmp_path: Path) -> None:
    async with (
        receiver() as hook,
        gateway(env, push=_push(tmp_path, _definition(hook.url, payload="unwrapped"))),
    ):
        await env.producer.register_topic("demo")
        await env.producer.send(
            "demo", b"\x00raw", key="k1", stream_id="s1", attributes={"colour": "blau", "note": "a b%c"}
        )
        await eventually(lambda: hook.answered, timeout=20, what="a delivery")
    request = hook.answered[0]
    headers = request.headers
    assert request.body == b"\x00raw" and headers["content-type"] == "application/octet-stream"
    assert (headers["tubemq-key"], headers["tubemq-stream-id"], headers["tubemq-topic"]) == (
        "k1",
        "s1",
        "demo",
    )
    assert headers["tubemq-attr-colour"] == "blau" and headers["tubemq-attr-note"] == "a b%25c"
    assert headers["tubemq-delivery-attempt"] == "1" and headers["tubemq-subscription"] == "hooks"
    assert "webhook-signature" not in headers and headers["webhook-id"]  # no secret, no signature


async def test_an_edited_file_is_applied_and_a_broken_edit_keeps_the_running_set(
    env: Env, tmp_path: Path
) -> None:
    async with receiver() as first, receiver() as second:
        settings = _push(tmp_path, _definition(first.url))
        path = Path(settings["subscriptions_file"])
        async with gateway(env, push=settings) as served:
            await env.publish("demo", [b"to-first"])
            await eventually(lambda: first.answered, timeout=20, what="the first endpoint's delivery")
            await asyncio.to_thread(path.write_text, "{not json", encoding="utf-8")
            await asyncio.sleep(0.5)
            push = served.runtime.push
            assert push is not None and [d.endpoint for d, _ in push.subscriptions()] == [first.url]
            edited = json.dumps({"subscriptions": [_definition(second.url)]})
            await asyncio.to_thread(path.write_text, edited, encoding="utf-8")
            await eventually(
                lambda: [d.endpoint for d, _ in push.subscriptions()] == [second.url], what="the reload"
            )
            await env.publish("demo", [b"to-second"])
            await eventually(lambda: second.answered, timeout=20, what="the second endpoint's delivery")
    assert [r.body for r in second.answered if json.loads(r.body)["message"]["value"] == "to-first"] == []


async def test_a_token_verifies_with_the_keys_the_gateway_serves(env: Env, tmp_path: Path) -> None:
    key = tmp_path / "push-key.pem"
    private = ec.generate_private_key(ec.SECP256R1())
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    async with receiver() as hook:
        definition = _definition(hook.url, token=True)
        settings = _push(tmp_path, definition, token_key_file=str(key), token_issuer="https://gw.example")
        async with gateway(env, push=settings) as served:
            await env.publish("demo", [b"with-token"])
            await eventually(lambda: hook.answered, timeout=20, what="a delivery")
            async with httpx.AsyncClient(base_url=served.url) as client:
                jwks = (await client.get("/v1/push/jwks")).json()  # no credentials needed
    scheme, _, token = hook.answered[0].headers["authorization"].partition(" ")
    assert scheme == "Bearer" and len(jwks["keys"]) == 1
    public = jwt.PyJWK(jwks["keys"][0])
    assert jwt.get_unverified_header(token)["kid"] == public.key_id
    claims = jwt.decode(
        token, public.key, algorithms=["ES256"], audience=hook.url, issuer="https://gw.example"
    )
    assert claims["sub"] == "hooks" and claims["exp"] - claims["iat"] == 3600
    with pytest.raises(jwt.InvalidAudienceError):
        jwt.decode(token, public.key, algorithms=["ES256"], audience="https://other.example/")


async def test_a_token_without_a_key_is_refused_when_defined(env: Env, tmp_path: Path) -> None:
    consumers = await env.service()
    options = PushOptions(
        subscriptions_file=Path(_file(tmp_path, _definition("http://127.0.0.1:9/", token=True)))
    )
    push = PushService(consumers, EndpointPolicy.parse(LOOPBACK), render_pushed, options)
    with pytest.raises(ValueError, match=r"subscriptions\[0\]\.token: token needs a signing key"):
        await push.start()
    await push.close()
