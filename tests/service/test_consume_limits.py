"""One set of consume bounds (issue #28 item 2): a REST long poll, an SSE stream, a gRPC Poll and a gRPC
Subscribe take their messages and bytes per step from :class:`~gateway.service.consume_limits.PollLimits`,
refuse alike what is out of bounds (400 / INVALID_ARGUMENT naming the field in the adapter's spelling), and
the defaults are the configuration's; "every message failed alike" is one rule for REST and gRPC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.config import ConsumerSettings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.service.consume_limits import MAX_BYTES_LIMIT, MAX_MESSAGES_LIMIT, PollLimits
from gateway.service.errors import InvalidInput, NotFound, Unavailable, renamed_fields
from gateway.service.publish import PublishOutcome, failed_alike
from tests.support.consumer_support import Env
from tests.support.gateway_support import gateway
from tests.support.grpc_support import Gateway, detail_of, gateway_settings, running_gateway

OVER = {"max_messages": MAX_MESSAGES_LIMIT + 1, "max_bytes": MAX_BYTES_LIMIT + 1}


# --- the rule -----------------------------------------------------------------------------------------------


@given(
    messages=st.one_of(st.none(), st.integers(-5, MAX_MESSAGES_LIMIT + 5)),
    size=st.one_of(st.none(), st.integers(-5, 5), st.integers(MAX_BYTES_LIMIT - 2, MAX_BYTES_LIMIT + 2)),
    own=st.one_of(st.none(), st.integers(1, 1000)),
)
def test_a_step_takes_what_is_in_bounds_and_names_what_is_not(
    messages: int | None, size: int | None, own: int | None
) -> None:
    limits = PollLimits(max_messages=7, max_bytes=4096)
    if messages is not None and not 1 <= messages <= MAX_MESSAGES_LIMIT:
        with pytest.raises(InvalidInput) as refused:
            limits.step(messages, size, own)
        assert refused.value.field == "max_messages"
        assert refused.value.message == f"max_messages must be 1 to {MAX_MESSAGES_LIMIT}, got {messages}"
        return
    if size is not None and not 1 <= size <= MAX_BYTES_LIMIT:
        with pytest.raises(InvalidInput) as refused:
            limits.step(messages, size, own)
        assert refused.value.field == "max_bytes"
        return
    step = limits.step(messages, size, own)
    assert step.max_messages == (7 if messages is None else messages)
    assert step.max_bytes == (size if size is not None else own or 4096)


def test_a_poll_waits_within_its_bounds() -> None:
    limits = PollLimits(timeout=1.5, max_timeout=2.0)
    assert limits.wait(None) == 1.5 and limits.wait(0) == 0 and limits.wait(2.0) == 2.0
    for bad in (-0.001, 2.001):
        with pytest.raises(InvalidInput) as refused:
            limits.wait(bad)
        assert refused.value.field == "timeout"


def test_the_defaults_are_the_configurations_and_within_the_bounds() -> None:
    settings = ConsumerSettings()
    assert PollLimits() == PollLimits(
        max_messages=settings.poll_max_messages,
        max_bytes=settings.poll_max_bytes,
        timeout=settings.poll_timeout,
        max_timeout=settings.poll_max_timeout,
    )
    # a default above the bound would have every poll without the parameter refused: refused at start
    for name, value in (
        ("poll_max_messages", MAX_MESSAGES_LIMIT + 1),
        ("poll_max_bytes", MAX_BYTES_LIMIT + 1),
    ):
        with pytest.raises(ValidationError, match=name):
            ConsumerSettings.model_validate({name: value})


def test_a_renamed_field_is_renamed_in_the_message_too() -> None:
    with pytest.raises(InvalidInput) as caught, renamed_fields({"max_messages": "maxMessages"}):
        raise InvalidInput("max_messages must be 1 to 10, got 11", field="max_messages")
    assert caught.value.field == "maxMessages"
    assert caught.value.message == str(caught.value) == "maxMessages must be 1 to 10, got 11"
    with pytest.raises(InvalidInput) as other, renamed_fields({"max_messages": "maxMessages"}):
        raise InvalidInput("give max_messages or nothing", field="max_messages")
    assert other.value.message == "give max_messages or nothing"


def test_every_message_failed_alike_is_one_rule() -> None:
    def failed(*errors: Exception | None) -> list[PublishOutcome]:
        return [PublishOutcome(i, error=e) for i, e in enumerate(errors)]  # type: ignore[arg-type]

    busy, also_busy = Unavailable("busy", retry_after=1.0), Unavailable("busy too", retry_after=2.0)
    assert failed_alike(failed(busy, also_busy)) is busy
    assert failed_alike(failed(busy)) is busy
    assert failed_alike(failed(busy, NotFound("gone"))) is None  # two kinds: 207 / a response of failures
    assert failed_alike(failed(busy, None)) is None  # one was stored
    assert failed_alike(failed(InvalidInput("bad", field="value"), busy)) is None
    assert failed_alike([]) is None


# --- REST: a long poll and an SSE stream refuse alike ---------------------------------------------------


async def test_rest_poll_and_sse_refuse_the_same_bounds(env: Env) -> None:
    async with gateway(env) as gw, httpx.AsyncClient(base_url=gw.url, timeout=10.0) as http:
        created = await http.post("/v1/consumers/r-bounds", json={"topics": ["demo"]})
        assert created.status_code == 201, created.text
        base = f"/v1/consumers/r-bounds/instances/{created.json()['instanceId']}"
        for path in ("messages", "stream"):
            for field, value in (*OVER.items(), ("max_messages", 100_000_000)):
                # streamed: an SSE answer that is not refused never ends
                params = {field: value, "timeout_ms": 0}
                async with http.stream("GET", f"{base}/{path}", params=params) as refused:
                    assert refused.status_code == 400, (path, field, refused.status_code)
                    await refused.aread()
                error = refused.json()["error"]
                assert error["field"] == field and error["message"].startswith(f"{field} must be 1 to ")
        # at the bounds, both answer
        at_bounds = {"max_messages": MAX_MESSAGES_LIMIT, "max_bytes": MAX_BYTES_LIMIT}
        polled = await http.get(f"{base}/messages", params={**at_bounds, "timeout_ms": 0})
        assert polled.status_code == 200, polled.text
        async with http.stream("GET", f"{base}/stream", params=at_bounds) as streamed:
            assert streamed.status_code == 200
            assert streamed.headers["content-type"].startswith("text/event-stream")


# --- gRPC: Poll and Subscribe refuse alike, naming the field in gRPC's spelling ----------------------------


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1, data_dir=tmp_path / "data") as c:
        yield c


async def test_grpc_poll_and_subscribe_refuse_the_same_bounds(cluster: EmbeddedCluster) -> None:
    settings = gateway_settings(cluster, consumers={"heartbeat_interval": 0.1, "assignment_wait": 5.0})
    async with running_gateway(cluster, settings, subscribe_step=0.1) as gw:
        created = await gw.stub.CreateConsumer(pb.CreateConsumerRequest(group="g-bounds", topics=["demo"]))
        instance = created.instance_id
        for field, value in OVER.items():
            name = {"max_messages": "maxMessages", "max_bytes": "maxBytes"}[field]
            poll = pb.PollRequest(group="g-bounds", instance_id=instance, timeout_ms=0, **{field: value})
            subscribe = pb.SubscribeRequest(group="g-bounds", instance_id=instance, **{field: value})
            for refused in (
                await _failure(gw.stub.Poll(poll)),
                await _failure(gw.stub.Subscribe(subscribe).read()),
            ):
                assert refused.code() is grpc.StatusCode.INVALID_ARGUMENT
                detail = detail_of(refused)
                assert detail.field == name and f"{name} must be 1 to " in detail.message
                assert field not in detail.message  # the service's spelling is not the client's
        at_bounds = {"max_messages": MAX_MESSAGES_LIMIT, "max_bytes": MAX_BYTES_LIMIT}
        polled = await gw.stub.Poll(
            pb.PollRequest(group="g-bounds", instance_id=instance, timeout_ms=0, **at_bounds)
        )
        assert list(polled.messages) == []


async def _failure(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


__all__ = ["Gateway"]
