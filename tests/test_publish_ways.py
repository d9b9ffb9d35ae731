"""A REST publish has two ways through HTTP, both through the steps of ``gateway/api/publish_steps.py``:
the direct way (``gateway/api/direct_publish.py``) uses no middleware object, and the FastAPI way's route
takes the same steps."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

from gateway.api import direct_publish, publish_steps, routes_topics
from gateway.api.app import create_app
from gateway.config import Settings

ROOT = Path(__file__).resolve().parent.parent


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


def test_the_steps_module_imports_no_middleware_class() -> None:
    found = [name for name, value in _imported(publish_steps) if _is_middleware(value)]
    assert found == [], f"gateway/api/publish_steps.py imports middleware classes: {found}"


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
