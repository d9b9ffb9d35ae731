"""Consumer instance ids are bearer-like: no log line of a whole consume session carries one whole (access
lines, service lines, forwarding, errors), neither in the records the code writes nor in the formatted
output."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import httpx
import pytest

from gateway.observability.logging import JsonFormatter, TextFormatter
from gateway.service.instance_id import new_instance_id, redact, redact_text
from tests.support.consumer_support import environment
from tests.support.gateway_support import SseReader, replica_pair
from tests.support.log_capture import attached


class Capture(logging.Handler):
    """Keeps every record's message and fields, and its JSON and text renderings."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.raw: list[str] = []
        self.json = io.StringIO()
        self.text = io.StringIO()
        self._json, self._text = JsonFormatter(), TextFormatter("%(name)s %(message)s")

    def emit(self, record: logging.LogRecord) -> None:
        self.raw.append(f"{record.getMessage()} {record.__dict__.get('args')} {record.__dict__}")
        self.json.write(self._json.format(record) + "\n")
        self.text.write(self._text.format(record) + "\n")


@pytest.fixture
def capture() -> Iterator[Capture]:
    with attached(Capture()) as handler:
        yield handler


async def test_a_consume_session_logs_no_whole_instance_id(capture: Capture) -> None:
    async with (
        environment() as env,
        replica_pair(env) as (owner, other),
        httpx.AsyncClient(base_url=owner.url) as a,
        httpx.AsyncClient(base_url=other.url) as b,
    ):
        created = await a.post("/v1/consumers/lr-g", json={"topics": ["solo"], "startPosition": "earliest"})
        instance = created.json()["instanceId"]
        path = f"/v1/consumers/lr-g/instances/{instance}"
        await a.post("/v1/topics/solo/messages", json={"messages": [{"value": "m"}]})
        polled = await b.get(f"{path}/messages", params={"timeout_ms": 2000})  # forwarded
        assert polled.status_code == 200 and polled.json()["messages"]
        await b.post(f"{path}/commits", json={})
        async with b.stream("GET", f"{path}/stream") as stream:
            await a.post("/v1/topics/solo/messages", json={"messages": [{"value": "n"}]})
            await SseReader(stream).read(1)
        await a.get(path)
        assert (await a.get(f"{path}/nothing-here")).status_code == 404
        assert (await a.delete(path)).status_code == 204
        assert (await b.get(f"{path}/messages")).status_code == 410
        foreign = new_instance_id("lr-g", "http://127.0.0.1:1", b"another secret entirely")
        assert (await a.get(f"/v1/consumers/lr-g/instances/{foreign}")).status_code == 404
    json_lines, text_lines = capture.json.getvalue(), capture.text.getvalue()
    assert '"path":"/v1/consumers/lr-g/instances/' + redact(instance) in json_lines  # the session was logged
    assert "consumer instance created" in json_lines and redact(instance) in json_lines
    for leaked in (instance, instance[:40], instance[-30:], foreign):
        assert leaked not in json_lines and leaked not in text_lines
        assert not [r for r in capture.raw if leaked in r]


def test_redact_text_finds_ids_anywhere() -> None:
    one = new_instance_id("g", "http://10.0.0.7:8080", b"k" * 16)
    two = new_instance_id("other", "https://gw-1.gw.ns.svc:8443", b"")
    text = f"GET /v1/consumers/g/instances/{one}/messages failed: {two!r}; ({one})"
    redacted = redact_text(text)
    assert one not in redacted and two not in redacted
    assert redacted == (
        f"GET /v1/consumers/g/instances/{redact(one)}/messages failed: '{redact(two)}'; ({redact(one)})"
    )
    assert redact(one) == "..." + one[-8:] and redact("short") == "..."
    assert redact_text("a.b.c and 10.0.0.7 and v1.2.3") == "a.b.c and 10.0.0.7 and v1.2.3"
