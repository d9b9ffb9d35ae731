"""A REST publish has two ways through HTTP, both through the steps of ``gateway/api/publish_steps.py``:
the direct way (``gateway/api/direct_publish.py``, entered below ASGI or at the app's ASGI entry) uses no
middleware object, and the FastAPI way's route takes the same steps; an ASGI publish answers alike both
ways."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.api import direct_publish, gateway_app, publish_steps, routes_topics
from gateway.api.app import create_app
from gateway.api.direct_publish import DirectPublish
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from tests.support.files import ROOT


def _imported(module: object) -> list[tuple[str, object]]:
    """Every name ``module`` imports from another module, with what it names."""
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    found: list[tuple[str, object]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            source = importlib.import_module(node.module)
            for alias in node.names:
                found.append((f"{node.module}.{alias.name}", getattr(source, alias.name, None)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, importlib.import_module(alias.name)))
    return found


def _is_middleware(value: object) -> bool:
    """An ASGI middleware class: built around an app (``__init__(self, app, ...)``) and called with
    ``(scope, receive, send)``."""
    if not inspect.isclass(value) or "__call__" not in vars(value):
        return False
    try:
        init = list(inspect.signature(value.__init__).parameters)  # type: ignore[misc]
        call = list(inspect.signature(value.__call__).parameters)
    except (TypeError, ValueError):
        return False
    return init[1:2] == ["app"] and call[1:4] == ["scope", "receive", "send"]


def test_the_direct_way_imports_no_middleware_class() -> None:
    installed = {m.cls for m in create_app(Settings()).user_middleware}
    assert len(installed) >= 6  # the app's own middlewares were found
    imported = _imported(direct_publish)
    assert len(imported) > 10
    # the check knows a middleware when it sees one
    assert all(_is_middleware(cls) for cls in installed)
    found = [name for name, value in imported if value in installed or _is_middleware(value)]
    assert found == [], f"gateway/api/direct_publish.py imports middleware classes: {found}"


def test_the_steps_and_the_asgi_entry_import_no_middleware_class() -> None:
    for module in (publish_steps, gateway_app):
        found = [name for name, value in _imported(module) if _is_middleware(value)]
        assert found == [], f"{module.__name__} imports middleware classes: {found}"


def test_both_ways_answer_through_the_same_step() -> None:
    # the route's endpoint and the direct way call publish_steps.respond, and nothing else answers a publish
    for module in (routes_topics, direct_publish):
        source = inspect.getsource(module)
        assert "publish_steps.respond(" in source, module.__name__
    for path in (ROOT / "gateway" / "api").glob("*.py"):
        text = path.read_text()
        if path.name in ("publish_steps.py", "publish_render.py"):
            continue
        assert "publish_prepared(" not in text and "publish_answer_of(" not in text, path.name


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 1)], brokers=1, data_dir=tmp_path / "data") as c:
        yield c


async def _answers(cluster: EmbeddedCluster, direct: bool, bodies: list[tuple[str, bytes]]) -> list[Any]:
    settings = Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        producer={"heartbeat_interval": 0.5, "rpc_timeout": 2.0, "send_timeout": 5.0},
        limits={"max_batch_messages": 3, "max_request_bytes": 4096},
        http={"direct_publish": direct},
    )
    runtime = Runtime(settings)
    await runtime.start()
    found = []
    try:
        transport = httpx.ASGITransport(app=create_app(runtime=runtime))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            for content_type, body in bodies:
                r = await client.post(
                    "/v1/topics/demo/messages", content=body, headers={"content-type": content_type}
                )
                doc = r.json()
                doc.pop("requestId", None)
                for result in doc.get("results", []):
                    for name in ("offset", "messageId", "appendTime"):
                        result.pop(name, None)
                headers = sorted(
                    (k, v) for k, v in r.headers.items() if k not in ("x-request-id", "content-length")
                )
                found.append((r.status_code, headers, doc))
    finally:
        await runtime.stop()
    return found


async def test_an_asgi_publish_takes_the_direct_way_and_answers_as_the_router(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    json_type = "application/json"
    bodies = [
        (
            json_type,
            json.dumps({"messages": [{"value": "a", "attributes": {"k": "v"}}, {"value": "b"}]}).encode(),
        ),
        (json_type, json.dumps({"messages": [{"value": "a"}] * 4}).encode()),  # above the batch bound
        (json_type, b'{"messages": [{"value": 1}]}'),
        (json_type, b"x" * 5000),  # above the body limit
        ("application/octet-stream", b"raw"),
        ("text/plain", b"a"),
    ]
    entered: list[str] = []
    original = DirectPublish.serve_asgi

    async def serve_asgi(self: DirectPublish, request: Any, topic: str) -> None:
        entered.append(topic)
        await original(self, request, topic)

    monkeypatch.setattr(DirectPublish, "serve_asgi", serve_asgi)
    direct = await _answers(cluster, True, bodies)
    assert entered == ["demo"] * len(bodies)
    routed = await _answers(cluster, False, bodies)
    assert entered == ["demo"] * len(bodies)  # the router's way: not entered again
    assert [a[0] for a in direct] == [200, 400, 400, 413, 200, 415]
    assert direct == routed
