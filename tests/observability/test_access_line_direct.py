"""The access line and the event lines (a gRPC call's GrpcCallFinished is one per call) written without a
LogRecord (``gateway/observability/json_lines.py``) are byte for byte the lines the record path writes, and
that way is taken only where nothing but configure_logging's one JSON handler would see the record."""

from __future__ import annotations

import contextlib
import io
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.observability import json_lines
from gateway.observability.access_log import PRINCIPAL_SCOPE_KEY, AccessLog
from gateway.observability.grpc_events import GrpcCallFinished
from gateway.observability.json_lines import direct_handler
from gateway.observability.logging import EventLogger, configure_logging
from gateway.observability.request_id import bind, unbind
from gateway.service.instance_id import new_instance_id


class _Route:
    def __init__(self, path: str) -> None:
        self.path_format = path


@pytest.fixture
def configured() -> Iterator[io.StringIO]:
    """configure_logging's JSON set-up writing to a buffer; the root's handlers and level put back after."""
    root = logging.getLogger()
    old_handlers, old_level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("debug", "json", stream=stream)
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in old_handlers:
            root.addHandler(handler)
        root.setLevel(old_level)


@contextlib.contextmanager
def _alone(stream: io.StringIO) -> Iterator[logging.Handler]:
    """Only configure_logging's handler on the root (pytest's logging plugin adds its own for each test
    phase, which, like any second handler, sends lines the record way)."""
    root = logging.getLogger()
    saved = list(root.handlers)
    (ours,) = (h for h in saved if getattr(h, "stream", None) is stream)
    root.handlers = [ours]
    try:
        yield ours
    finally:
        root.handlers = saved


def _both_ways(
    stream: io.StringIO, monkeypatch: pytest.MonkeyPatch, where: str, write: Callable[[], None]
) -> tuple[str, str]:
    """The line ``write`` writes, the direct way, then the record way (forced by a handler filter that keeps
    every record), at the same clock reading; ``where``: the ``write_direct`` its module calls."""
    monkeypatch.setattr(time, "time", lambda: 1_795_000_000.2345)
    calls: list[str] = []
    real = json_lines.write_direct

    def counted(*args: Any) -> None:
        calls.append("direct")
        real(*args)

    monkeypatch.setattr(where, counted)
    with _alone(stream) as handler:
        stream.seek(0)
        stream.truncate()
        write()
        direct = stream.getvalue()
        assert calls == ["direct"]
        handler.addFilter(lambda record: True)
        try:
            stream.seek(0)
            stream.truncate()
            write()
            recorded = stream.getvalue()
        finally:
            handler.filters.clear()
        assert calls == ["direct"]  # the filter sent the second line the record way
    return direct, recorded


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


# The fixtures are shared by the examples on purpose: each example empties the buffer and undoes its patches.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=texts | st.just("/v1/consumers/g/instances/") | st.sampled_from(["/healthz", "/metrics"]),
    route=texts,
    method=st.sampled_from(["POST", "GET", "DELETE", "PATCH", "weird\u00e9"]),
    status=st.sampled_from([200, 204, 207, 400, 401, 404, 413, 429, 499, 500, 503]),
    seconds=st.floats(min_value=0, max_value=1e4, allow_nan=False),
    principal=st.none() | texts,
    request_id=st.none() | st.from_regex(r"[A-Za-z0-9._:+/=-]{1,40}", fullmatch=True),
    with_instance=st.booleans(),
)
def test_the_direct_access_line_is_the_record_paths_line(
    configured: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    route: str,
    method: str,
    status: int,
    seconds: float,
    principal: str | None,
    request_id: str | None,
    with_instance: bool,
) -> None:
    if with_instance:  # a consumer instance id in the path: redacted alike
        path += new_instance_id("g", "http://127.0.0.1:1", b"s" * 16)
    scope: dict[str, Any] = {"path": path, "method": method, "route": _Route(route or "/x")}
    if principal is not None:
        scope[PRINCIPAL_SCOPE_KEY] = principal
    token = bind(request_id) if request_id is not None else None
    try:
        with monkeypatch.context() as patch:
            direct, recorded = _both_ways(
                configured,
                patch,
                "gateway.observability.access_log.write_direct",
                lambda: AccessLog().line(scope, status, seconds),
            )
    finally:
        if token is not None:
            unbind(token)
    assert direct == recorded and direct.endswith("\n") and direct.count("\n") == 1


def test_the_direct_way_only_where_the_json_handler_alone_would_see_the_record(
    configured: io.StringIO,
) -> None:
    with _alone(configured) as handler:
        _changes_send_lines_the_record_way(handler)


def _changes_send_lines_the_record_way(handler: logging.Handler) -> None:
    log = logging.getLogger("gateway.access")
    root = logging.getLogger()
    assert direct_handler(log, logging.INFO) is handler

    def changed(undo: Any) -> bool:
        try:
            return direct_handler(log, logging.INFO) is None
        finally:
            undo()

    keep_all = logging.Filter()
    log.addFilter(keep_all)
    assert changed(lambda: log.removeFilter(keep_all))
    handler.addFilter(keep_all)
    assert changed(lambda: handler.removeFilter(keep_all))
    extra = logging.StreamHandler(io.StringIO())
    root.addHandler(extra)  # pytest's caplog, a second sink
    assert changed(lambda: root.removeHandler(extra))
    logging.getLogger("gateway").addHandler(extra)
    assert changed(lambda: logging.getLogger("gateway").removeHandler(extra))
    log.propagate = False
    assert changed(lambda: setattr(log, "propagate", True))
    log.disabled = True
    assert changed(lambda: setattr(log, "disabled", False))
    handler.setLevel(logging.WARNING)
    assert changed(lambda: handler.setLevel(logging.NOTSET))
    factory = logging.getLogRecordFactory()
    logging.setLogRecordFactory(lambda *a, **k: factory(*a, **k))
    assert changed(lambda: logging.setLogRecordFactory(factory))
    plain = logging.Formatter()
    json_formatter = handler.formatter
    handler.setFormatter(plain)
    assert changed(lambda: handler.setFormatter(json_formatter))
    assert direct_handler(log, logging.INFO) is handler  # every change undone


def test_a_failed_direct_write_goes_to_handle_error_with_the_record(
    configured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[logging.LogRecord] = []
    with _alone(configured) as handler:
        monkeypatch.setattr(handler, "handleError", seen.append)
        configured.close()  # writing now raises ValueError
        AccessLog().line(
            {
                "path": "/v1/topics/t/messages",
                "method": "POST",
                "route": _Route("/v1/topics/{topic}/messages"),
            },
            200,
            0.001,
        )
    (record,) = seen
    assert record.name == "gateway.access" and record.getMessage() == "request"
    assert (
        getattr(record, "status", None) == 200
        and getattr(record, "route", None) == "/v1/topics/{topic}/messages"
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=texts,
    code=st.sampled_from(["OK", "CANCELLED", "INVALID_ARGUMENT", "UNAVAILABLE"]),
    seconds=st.floats(min_value=0, max_value=1e4, allow_nan=False),
    request_id=texts,
    principal=st.none() | texts,
)
def test_the_direct_event_line_is_the_record_paths_line(
    configured: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    code: str,
    seconds: float,
    request_id: str,
    principal: str | None,
) -> None:
    """A GrpcCallFinished line (the line of every gRPC call) written the direct way, then the record way, at
    the same clock reading."""
    event = GrpcCallFinished(method, code, seconds, request_id, "unary", principal)
    events = EventLogger()
    with monkeypatch.context() as patch:
        where = "gateway.observability.logging.write_direct"
        direct, recorded = _both_ways(configured, patch, where, lambda: events(event))
    assert direct == recorded and direct.endswith("\n") and direct.count("\n") == 1
    assert '"msg":"GrpcCallFinished"' in direct
