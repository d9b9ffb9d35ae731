"""Structured JSON logs, the request-id middleware and the core-event logger."""

from __future__ import annotations

import contextvars
import enum
import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import grpc
import httpx
import pytest
from fastapi import FastAPI, HTTPException
from hypothesis import given
from hypothesis import strategies as st

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2
from gateway.observability.access_log import AccessLog
from gateway.observability.logging import (
    REQUEST_ID_HEADER,
    EventLogger,
    JsonFormatter,
    RequestIdMiddleware,
    configure_logging,
    current_request_id,
)
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.events import Event, EventBus
from tests.support.auth_support import secure_gateway
from tests.support.log_capture import attached


class Capture(logging.Handler):
    """Keeps every record formatted by JsonFormatter, parsed back."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def entries(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.lines]


@pytest.fixture
def capture() -> Iterator[Capture]:
    with attached(Capture()) as handler:
        yield handler


@given(
    st.floats(min_value=0, max_value=4e9, allow_nan=False)
    | st.integers(0, 4 * 10**9).map(lambda s: s + 0.9995)
)
def test_timestamp_is_iso_8601_utc_milliseconds_as_datetime_writes_it(created: float) -> None:
    # The formatter writes the date and time once per second and appends the milliseconds itself; the
    # text must be what datetime writes, rounding at the millisecond and second boundaries included.
    record = logging.LogRecord("gateway.test", logging.INFO, __file__, 1, "m", (), None)
    record.created = created
    formatter = JsonFormatter()
    formatter.format(record)  # once with another second cached, once for this one
    record.created = created + 1
    expected = datetime.fromtimestamp(created + 1, UTC).isoformat(timespec="milliseconds")
    assert json.loads(formatter.format(record))["ts"] == expected


def test_one_json_object_per_line_with_extras_and_exception(capture: Capture) -> None:
    log = logging.getLogger("gateway.test")
    log.info("multi\nline %s", "message", extra={"topic": "demo", "count": 3, "where": NodeAddress("h", 1)})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    assert all("\n" not in line for line in capture.lines)
    first, second = capture.entries
    assert first["msg"] == "multi\nline message" and first["level"] == "info"
    assert first["logger"] == "gateway.test"
    assert first["topic"] == "demo" and first["count"] == 3 and first["where"] == "h:1"
    assert str(first["ts"]).endswith("+00:00") and "request_id" not in first
    assert second["level"] == "error" and "ValueError: boom" in str(second["exc"])


def test_configure_logging_replaces_handlers_and_routes_uvicorn() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("warning", "json", stream=stream)
        configure_logging("info", "json", stream=stream)  # twice: still one handler
        assert len(root.handlers) == 1
        logging.getLogger("uvicorn.error").info("started", extra={"color_message": "\x1b[36mstarted"})
        logging.getLogger("gateway.x").debug("hidden")
        lines = stream.getvalue().splitlines()
        assert [json.loads(line)["msg"] for line in lines] == ["started"]
        assert "color_message" not in json.loads(lines[0])
        configure_logging("info", "text", stream=stream)
        logging.getLogger("gateway.x").info("plain")
        assert stream.getvalue().splitlines()[-1].endswith("INFO gateway.x plain")
        with pytest.raises(ValueError, match="json"):
            configure_logging("info", "yaml")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def _app(sample: float = 1.0) -> FastAPI:
    app = FastAPI()
    log = logging.getLogger("gateway.handler")

    @app.get("/v1/items/{item}")
    async def item(item: str) -> dict[str, str | None]:
        log.info("handling", extra={"item": item})
        if item == "missing":
            raise HTTPException(404, "no such item")
        return {"item": item, "request_id": current_request_id()}

    @app.get("/boom")
    async def boom() -> None:
        log.info("about to fail")
        raise RuntimeError("boom")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.add_middleware(RequestIdMiddleware, access=AccessLog(sample=sample))
    return app


async def test_request_id_generated_kept_and_logged(capture: Capture) -> None:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        made = await client.get("/v1/items/a")
        kept = await client.get("/v1/items/b", headers={REQUEST_ID_HEADER: "trace-123.abc"})
        replaced = await client.get("/v1/items/c", headers={REQUEST_ID_HEADER: "bad id\twith spaces"})
        missing = await client.get("/v1/items/missing", headers={REQUEST_ID_HEADER: "r-404"})
        unmatched = await client.get("/nowhere")
        failed = await client.get("/boom", headers={REQUEST_ID_HEADER: "r-500"})
        await client.get("/healthz")
    generated = made.headers[REQUEST_ID_HEADER]
    assert len(generated) == 32 and made.json()["request_id"] == generated
    assert kept.headers[REQUEST_ID_HEADER] == "trace-123.abc" == kept.json()["request_id"]
    assert replaced.headers[REQUEST_ID_HEADER] not in ("bad id\twith spaces", generated)
    assert missing.status_code == 404 and missing.headers[REQUEST_ID_HEADER] == "r-404"
    assert unmatched.status_code == 404 and unmatched.headers[REQUEST_ID_HEADER]
    assert failed.status_code == 500 and failed.headers[REQUEST_ID_HEADER] == "r-500"
    assert failed.json()["error"]["code"] == "internal" and "r-500" in failed.json()["error"]["message"]
    assert current_request_id() is None  # reset after each request

    entries = capture.entries
    handling = [e for e in entries if e["msg"] == "handling"]
    assert [e["request_id"] for e in handling[:2]] == [generated, "trace-123.abc"]
    access = [e for e in entries if e["logger"] == "gateway.access"]
    assert [(e["route"], e["status"], e["level"]) for e in access] == [
        ("/v1/items/{item}", 200, "info"),
        ("/v1/items/{item}", 200, "info"),
        ("/v1/items/{item}", 200, "info"),
        ("/v1/items/{item}", 404, "info"),
        ("<unmatched>", 404, "info"),
        ("/boom", 500, "info"),
        ("/healthz", 200, "debug"),
    ]
    assert access[1]["request_id"] == "trace-123.abc" and access[1]["path"] == "/v1/items/b"
    crash = next(e for e in entries if e["msg"] == "unhandled error while serving the request")
    assert crash["request_id"] == "r-500" and "RuntimeError: boom" in str(crash["exc"])
    assert all(isinstance(e["duration_seconds"], float) and e["method"] == "GET" for e in access)
    assert "RequestIdMiddleware" in repr(RequestIdMiddleware(_app()))


class Reason(enum.Enum):
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class LinkClosed(Event):
    address: NodeAddress
    reason: Reason
    error: str | None
    msg: str = "clashes with LogRecord.msg"


@dataclass(frozen=True, slots=True)
class SendCompleted(Event):
    topic: str
    outcome: str


@dataclass(frozen=True, slots=True)
class ConnectFailed(Event):
    address: NodeAddress
    partitions: tuple[str, ...]


def test_event_logger_one_line_per_event_with_levels(capture: Capture) -> None:
    bus = EventBus()
    events = EventLogger()
    subscription = events.subscribe(bus)
    assert "subscribed" in repr(events)
    bus.emit(LinkClosed(NodeAddress("b", 8123), Reason.IDLE, None))
    bus.emit(SendCompleted("demo", "ok"))
    bus.emit(ConnectFailed(NodeAddress("b", 8123), ("1:demo:0", "1:demo:1")))
    subscription.cancel()
    bus.emit(SendCompleted("demo", "ok"))
    entries = [e for e in capture.entries if e["logger"] == "gateway.events"]
    assert [(e["msg"], e["level"]) for e in entries] == [
        ("LinkClosed", "warning"),
        ("SendCompleted", "debug"),
        ("ConnectFailed", "warning"),
    ]
    closed = entries[0]
    assert closed["address"] == "b:8123" and closed["reason"] == "idle" and closed["error"] is None
    assert closed["event_msg"] == "clashes with LogRecord.msg" and closed["event"] == "LinkClosed"
    assert entries[2]["partitions"] == ["1:demo:0", "1:demo:1"]
    assert "idle" in repr(events)


def test_a_grpc_call_event_is_one_line_with_every_field(capture: Capture) -> None:
    from gateway.observability.grpc_events import GrpcCallFinished

    events = EventLogger()
    call = GrpcCallFinished("/tubemq.gateway.v1.GatewayService/Publish", "OK", 0.00025, "req-1", "unary")
    events(call)
    events(call)  # the second line of a kind comes from the kind's cached field names
    first, second = (e for e in capture.entries if e["logger"] == "gateway.events")
    assert {k: v for k, v in first.items() if k != "ts"} == {k: v for k, v in second.items() if k != "ts"}
    assert {k: first[k] for k in ("msg", "level", "event", "method", "code", "request_id", "grpc_type")} == {
        "msg": "GrpcCallFinished",
        "level": "info",
        "event": "GrpcCallFinished",
        "method": "/tubemq.gateway.v1.GatewayService/Publish",
        "code": "OK",
        "request_id": "req-1",
        "grpc_type": "unary",
    }
    assert first["duration"] == 0.00025


def test_event_logger_skips_work_when_level_disabled(capture: Capture) -> None:
    logger = logging.getLogger("gateway.events.quiet")
    logger.setLevel(logging.INFO)
    events = EventLogger(logger)
    events(SendCompleted("demo", "ok"))  # DEBUG: dropped
    events(ConnectFailed(NodeAddress("b", 1), ()))
    assert [e["msg"] for e in capture.entries] == ["ConnectFailed"]


def test_grpc_call_ids_reach_the_log_lines(capture: Capture) -> None:
    from gateway.observability import request_id

    def in_a_call() -> None:
        request_id.bind("grpc-call-7")  # what the gRPC interceptor does for each call
        logging.getLogger("gateway.grpc.test").info("inside a call")

    contextvars.copy_context().run(in_a_call)
    logging.getLogger("gateway.grpc.test").info("outside")
    inside, outside = (e for e in capture.entries if e["logger"] == "gateway.grpc.test")
    assert inside["request_id"] == "grpc-call-7" and "request_id" not in outside


async def test_access_log_sampling_keeps_every_error(capture: Capture) -> None:
    transport = httpx.ASGITransport(app=_app(sample=0.0))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        for _ in range(20):
            assert (await client.get("/v1/items/a")).status_code == 200
        assert (await client.get("/v1/items/missing")).status_code == 404
        assert (await client.get("/boom")).status_code == 500
    access = [e for e in capture.entries if e["logger"] == "gateway.access"]
    assert [(e["route"], e["status"]) for e in access] == [("/v1/items/{item}", 404), ("/boom", 500)]


async def test_generated_request_ids_are_distinct_hex(capture: Capture) -> None:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        ids = [(await client.get("/v1/items/a")).headers[REQUEST_ID_HEADER] for _ in range(50)]
    assert len(set(ids)) == 50
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


async def test_access_lines_name_the_authenticated_principal_by_method(
    capture: Capture, tmp_path: Path
) -> None:
    async with secure_gateway(tmp_path) as gw:
        assert (await gw.http.get("/v1/topics/demo", headers=gw.files.headers("alice"))).status_code == 200
        assert (await gw.http.get("/v1/topics/demo")).status_code == 401
        assert (await gw.http.get("/v1/topics/demo", headers=gw.files.headers("nobody"))).status_code == 403
    access = [
        e for e in capture.entries if e["logger"] == "gateway.access" and e["path"] == "/v1/topics/demo"
    ]
    # who made the request, in the form rules name it, allowed or refused; nobody when authentication failed
    assert [(e["status"], e.get("principal")) for e in access] == [
        (200, "api_key:alice"),
        (401, None),
        (403, "api_key:nobody"),
    ]
    assert all(gw.files.keys["alice"] not in json.dumps(e) for e in capture.entries)


async def test_grpc_call_lines_name_the_authenticated_principal_by_method(
    capture: Capture, tmp_path: Path
) -> None:
    async with secure_gateway(tmp_path) as gw:
        request = gateway_pb2.GetTopicRequest(topic="demo")
        await gw.stub.GetTopic(request, metadata=gw.files.metadata("alice"))
        for metadata in ((), gw.files.metadata("nobody")):
            with pytest.raises(grpc.aio.AioRpcError):
                await gw.stub.GetTopic(request, metadata=metadata)
    calls = [
        e for e in capture.entries if e["msg"] == "GrpcCallFinished" and e["method"].endswith("/GetTopic")
    ]
    assert [(e["code"], e.get("principal")) for e in calls] == [
        ("OK", "api_key:alice"),
        ("UNAUTHENTICATED", None),
        ("PERMISSION_DENIED", "api_key:nobody"),
    ]
    assert all(gw.files.keys["alice"] not in json.dumps(e) for e in capture.entries)
