"""OpenTelemetry tracing (the ``otel`` extra): W3C traceparent continued on REST and gRPC, spans for publish,
poll and commit with topic/group attributes and nothing bearer-like, off unless configured, and the OTLP
exporter posting to a collector on 127.0.0.1. Spans are collected with the SDK's in-memory exporter."""

from __future__ import annotations

import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed (pip install '.[otel]')")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.api.app import create_app
from gateway.api.tracing import TracingMiddleware
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.observability import tracing
from gateway.runtime import Runtime
from tests.support.consumer_support import Env
from tests.support.gateway_support import Gateway, gateway
from tests.support.grpc_support import gateway_settings, message, running_gateway
from tests.support.tracing_support import in_memory_spans

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with in_memory_spans() as exporter:
        yield exporter


@pytest.fixture
async def gw(env: Env, spans: InMemorySpanExporter) -> AsyncIterator[Gateway]:
    async with gateway(env) as served:
        yield served


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {s.name: s for s in exporter.get_finished_spans()}


def assert_nothing_bearer_like(exporter: InMemorySpanExporter, *secrets: str) -> None:
    for s in exporter.get_finished_spans():
        for value in (s.attributes or {}).values():
            assert not any(secret in str(value) for secret in secrets), (s.name, value)
        assert not any(secret in s.name for secret in secrets)


async def test_rest_spans_continue_traceparent_with_topic_and_group(
    gw: Gateway, spans: InMemorySpanExporter
) -> None:
    headers = {"traceparent": PARENT}
    async with httpx.AsyncClient(base_url=gw.url, timeout=10.0, headers=headers) as http:
        published = await http.post(
            "/v1/topics/solo/messages", json={"messages": [{"value": "v", "key": "k"}]}
        )
        assert published.status_code == 200
        created = await http.post(
            "/v1/consumers/tr-g", json={"topics": ["solo"], "startPosition": "earliest"}
        )
        instance = created.json()["instanceId"]
        base = created.json()["baseUrl"]
        polled = await http.get(f"{base}/messages", params={"timeout_ms": 3000})
        assert len(polled.json()["messages"]) == 1
        assert (await http.post(f"{base}/commits", json={})).status_code == 200
    found = by_name(spans)
    server = found["POST /v1/topics/{topic}/messages"]
    assert server.kind is SpanKind.SERVER
    assert f"{server.context.trace_id:032x}" == TRACE_ID
    assert server.parent is not None and f"{server.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert server.attributes == {
        "http.request.method": "POST",
        "http.route": "/v1/topics/{topic}/messages",
        "http.response.status_code": 200,
    }
    publish = found["publish solo"]
    assert publish.kind is SpanKind.PRODUCER and publish.parent is not None
    assert publish.parent.span_id == server.context.span_id
    assert publish.attributes is not None
    assert publish.attributes["messaging.system"] == "tubemq"
    assert publish.attributes["messaging.destination.name"] == "solo"
    assert publish.attributes["messaging.batch.message_count"] == 1
    poll = found["poll tr-g"]
    assert poll.kind is SpanKind.CONSUMER and poll.attributes is not None
    assert poll.attributes["messaging.consumer.group.name"] == "tr-g"
    assert poll.attributes["messaging.batch.message_count"] == 1
    assert found["GET /v1/consumers/{group}/instances/{instance_id}/messages"].context.trace_id == int(
        TRACE_ID, 16
    )
    commit = found["commit tr-g"]
    assert commit.kind is SpanKind.CLIENT and commit.attributes is not None
    assert commit.attributes["messaging.operation.type"] == "settle"
    # instance ids are bearer-like, the key and the value are data: none of them is recorded
    assert_nothing_bearer_like(spans, instance, '"k"', "/instances/" + instance)


async def test_rest_errors_mark_the_span_and_new_traces_start_without_traceparent(
    gw: Gateway, spans: InMemorySpanExporter
) -> None:
    async with httpx.AsyncClient(base_url=gw.url, timeout=10.0) as http:
        missing = await http.get("/v1/nowhere")
        assert missing.status_code == 404
        refused = await http.post("/v1/topics/solo/messages", json={"messages": []})
        assert refused.status_code == 400
    finished = spans.get_finished_spans()
    unmatched = next(s for s in finished if s.name == "GET")
    assert unmatched.parent is None and "http.route" not in (unmatched.attributes or {})
    publish = next(s for s in finished if s.name == "publish solo")
    assert not publish.status.is_ok  # the InvalidInput raised inside is recorded
    assert any(e.name == "exception" for e in publish.events)


async def test_grpc_spans_continue_traceparent(spans: InMemorySpanExporter) -> None:
    async with (
        EmbeddedCluster([TopicSpec("solo", 1)], balance_period=0.1) as cluster,
        running_gateway(cluster, gateway_settings(cluster)) as gw,
    ):
        request = pb.PublishRequest(topic="solo", messages=[message("v")])
        await gw.stub.Publish(request, metadata=(("traceparent", PARENT),))
        with pytest.raises(grpc.aio.AioRpcError):
            await gw.stub.Publish(pb.PublishRequest(topic="solo"), metadata=(("traceparent", PARENT),))
    calls = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert [s.name for s in calls] == ["tubemq.gateway.v1.GatewayService/Publish"] * 2
    ok, failed = calls
    assert all(f"{s.context.trace_id:032x}" == TRACE_ID for s in calls)
    assert ok.attributes is not None and ok.attributes["rpc.grpc.status_code"] == 0
    assert (
        ok.attributes["rpc.service"] == "tubemq.gateway.v1.GatewayService"
        and ok.attributes["rpc.method"] == "Publish"
    )
    assert (
        failed.attributes is not None and failed.attributes["rpc.grpc.status_code"] == 3
    )  # INVALID_ARGUMENT
    assert not failed.status.is_ok
    publish = next(s for s in spans.get_finished_spans() if s.name == "publish solo")
    assert publish.parent is not None and publish.parent.span_id == ok.context.span_id


def test_off_unless_configured() -> None:
    assert not tracing.enabled()
    app = create_app(Settings())
    assert all(m.cls is not TracingMiddleware for m in app.user_middleware)
    with tracing.span("x", "internal", {}) as nothing:
        assert nothing is None


class _Collector(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, int]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        self.rfile.read(length)
        type(self).received.append((self.path, length))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


async def test_runtime_exports_over_otlp_to_the_configured_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra's OTLP exporter")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        async with EmbeddedCluster([TopicSpec("solo", 1)]) as cluster:
            settings = gateway_settings(cluster, tracing={"enabled": True, "service_name": "gw-test"})
            runtime = Runtime(settings)
            await runtime.start()
            try:
                assert tracing.enabled()
                assert runtime.publish is not None
                await runtime.publish.publish("solo", [_outgoing()])
            finally:
                await runtime.stop()  # flushes the batch processor
        assert not tracing.enabled()
        assert _Collector.received and _Collector.received[0][0] == "/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


def _outgoing() -> Any:
    from gateway.service.publish import OutgoingMessage

    return OutgoingMessage(b"traced")


def test_enabled_without_the_packages_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_sdk(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("opentelemetry.sdk"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sdk)
    with pytest.raises(tracing.TracingUnavailable, match=r"pip install 'tubemq-gateway\[otel\]'"):
        tracing.configure()
    with pytest.raises(tracing.TracingUnavailable, match=r"pip install 'tubemq-gateway\[otel\]'"):
        tracing.check_available()
    assert not tracing.enabled()
