"""The process-level settings ``tubemq-gateway serve`` applies before serving."""

from __future__ import annotations

import gc
import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from gateway import serve
from gateway.config import Settings
from gateway.serve import GC_YOUNG_THRESHOLD, MissingHttpParser, http_config, http_implementation, tune_gc


def test_uvicorn_gets_the_httptools_parser() -> None:
    # httptools is a dependency; without it uvicorn falls back to the much slower pure-Python h11.
    assert http_implementation() == "httptools"


def test_without_httptools_the_gateway_refuses_to_serve(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # uvicorn would fall back to h11, where the header size, count and time limits of
    # gateway/api/http_guard.py cannot be enforced: the gateway does not start instead.
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "httptools" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingHttpParser, match="pip install httptools"):
        http_implementation()
    with pytest.raises(MissingHttpParser):
        http_config(Settings(), object())
    from gateway.__main__ import build_parser

    assert serve.run_serve(build_parser().parse_args(["serve", "--http-port", "0"])) == 2
    assert "httptools" in capsys.readouterr().err


@pytest.fixture
def restore_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restore_gc")
def test_tune_gc_freezes_the_startup_heap_and_raises_the_young_threshold() -> None:
    survivor = [object()]
    older = gc.get_threshold()[1:]
    tune_gc()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *older)
    # Frozen objects are out of every generation, so collections no longer walk them.
    assert not any(o is survivor for o in gc.get_objects())
