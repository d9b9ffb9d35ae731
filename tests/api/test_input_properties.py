"""Property test: generated publish bodies and headers, consumer creations and poll parameters, sent through
the real ASGI app over the embedded cluster, are never answered with a 5xx (issue #11: every input is decided
by validation). Bounded (max_examples) so the suite stays fast."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime

T = TypeVar("T")
EXAMPLES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

# Text that has broken the gateway before, mixed with arbitrary text (lone surrogates included).
TRICKY = st.sampled_from(
    [
        "",
        " ",
        "\t",
        "\ud800",
        "\udfff",
        "²",
        "١٢",
        "a=b",
        "a,b",
        "$msgType$",
        "$msgTime$",
        "\x00",
        "é",
        "€",
        "202401 11230",
        "202401311530",
        "demo",
        "g-1",
        "x" * 300,
        "1:demo:0",
        "-1",
        "1e9",
        "9" * 30,
    ]
)
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=20)
TEXT = st.one_of(TRICKY, ANY_TEXT)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(), TEXT
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
HEADER_TEXT = st.one_of(
    TRICKY.filter(lambda s: s.isascii() or all(ord(c) < 256 for c in s)),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=20),
).map(lambda s: s.encode("latin-1", "replace").replace(b"\r", b"").replace(b"\n", b""))


def message_fields() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "value": JSONISH,
            "encoding": st.one_of(st.sampled_from(["utf8", "base64", "json"]), JSONISH),
            "key": JSONISH,
            "partition": JSONISH,
            "attributes": st.one_of(st.dictionaries(TEXT, TEXT, max_size=3), JSONISH),
            "streamId": JSONISH,
            "msgTime": JSONISH,
            "extra": JSONISH,
        },
    )


PUBLISH_BODIES = st.one_of(
    st.fixed_dictionaries({"messages": st.lists(message_fields(), max_size=4)}),
    st.fixed_dictionaries({"messages": JSONISH}),
    JSONISH,
)
CREATE_BODIES = st.one_of(
    st.fixed_dictionaries(
        {"topics": st.one_of(st.lists(st.one_of(st.just("demo"), TEXT), max_size=3), JSONISH)},
        optional={
            "filters": st.one_of(
                st.dictionaries(st.sampled_from(["demo", "other"]), st.lists(TEXT)), JSONISH
            ),
            "startPosition": st.one_of(st.sampled_from(["latest", "earliest", "offsets"]), JSONISH),
            "offsets": st.one_of(
                st.dictionaries(st.sampled_from(["1:demo:0", "1:demo:9", "x"]), JSONISH), JSONISH
            ),
            "sessionKey": JSONISH,
            "sourceCount": JSONISH,
            "autoCommit": JSONISH,
            "maxBytes": JSONISH,
        },
    ),
    JSONISH,
)
QUERY_VALUE = st.one_of(TEXT, st.integers(min_value=-(2**70), max_value=2**70).map(str))


class Driver:
    """A gateway (embedded cluster, runtime, app) on an event loop in a thread; tests send it requests."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.cluster = EmbeddedCluster([TopicSpec("demo", 2)], brokers=1, data_dir=data_dir)
        self.run(self.cluster.start())
        self.runtime = Runtime(
            Settings(
                masters=",".join(str(a) for a in self.cluster.master_addresses),
                producer={"heartbeat_interval": 0.5, "rpc_timeout": 2.0, "send_timeout": 5.0},
                consumers={"heartbeat_interval": 0.2, "assignment_wait": 0.2, "poll_max_timeout": 0.2},
            )
        )
        self.run(self.runtime.start())
        transport = httpx.ASGITransport(app=create_app(runtime=self.runtime))
        self.http = httpx.AsyncClient(transport=transport, base_url="http://gw")

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def close(self) -> None:
        self.run(self.http.aclose())
        self.run(self.runtime.stop())
        self.run(self.cluster.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        answer = self.run(self.http.request(method, path, **options))
        assert answer.status_code < 500, (method, path, options, answer.status_code, answer.text)
        return answer


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    d = Driver(tmp_path_factory.mktemp("props"))
    try:
        yield d
    finally:
        d.close()


def dumps(doc: Any) -> bytes:
    # ensure_ascii keeps lone surrogates as \\u escapes, as a client would send them.
    return json.dumps(doc, allow_nan=True).encode()


@EXAMPLES
@given(body=PUBLISH_BODIES, topic=st.one_of(st.just("demo"), TEXT))
def test_publish_json_bodies_never_5xx(driver: Driver, body: Any, topic: str) -> None:
    path = f"/v1/topics/{quote(topic, safe='', errors='surrogatepass')}/messages"
    driver.request("POST", path, content=dumps(body), headers={"content-type": "application/json"})


@EXAMPLES
@given(
    value=st.binary(max_size=64),
    headers=st.dictionaries(
        st.sampled_from(
            [
                "x-tubemq-key",
                "x-tubemq-partition",
                "x-tubemq-attributes",
                "x-tubemq-stream-id",
                "x-tubemq-msg-time",
            ]
        ),
        HEADER_TEXT,
    ),
)
def test_raw_publish_headers_never_5xx(driver: Driver, value: bytes, headers: dict[str, bytes]) -> None:
    driver.request(
        "POST",
        "/v1/topics/demo/messages",
        content=value,
        headers={"content-type": "application/octet-stream", **headers},
    )


@EXAMPLES
@given(group=st.one_of(st.just("grp"), TEXT), body=CREATE_BODIES)
def test_consumer_creation_never_5xx(driver: Driver, group: str, body: Any) -> None:
    path = f"/v1/consumers/{quote(group, safe='', errors='surrogatepass')}"
    answer = driver.request("POST", path, content=dumps(body), headers={"content-type": "application/json"})
    if answer.status_code == 201:
        base = "/" + answer.headers["location"].split("://", 1)[1].split("/", 1)[1]
        assert driver.request("DELETE", base).status_code == 204


@pytest.fixture(scope="module")
def instance(driver: Driver) -> str:
    answer = driver.request("POST", "/v1/consumers/props", json={"topics": ["demo"]})
    assert answer.status_code == 201, answer.text
    return "/" + answer.headers["location"].split("://", 1)[1].split("/", 1)[1]


@EXAMPLES
@given(
    params=st.dictionaries(
        st.sampled_from(["max_messages", "max_bytes", "timeout_ms", "format", "last_event_id"]), QUERY_VALUE
    ),
    tokens=st.one_of(st.none(), st.lists(TEXT, max_size=3), JSONISH),
)
def test_poll_and_commit_parameters_never_5xx(
    driver: Driver, instance: str, params: dict[str, str], tokens: Any
) -> None:
    query = {k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in params.items()}
    driver.request("GET", f"{instance}/messages", params=query)
    body = {"tokens": tokens} if tokens is not None else {}
    driver.request(
        "POST", f"{instance}/commits", content=dumps(body), headers={"content-type": "application/json"}
    )
