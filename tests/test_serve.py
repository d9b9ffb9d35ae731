"""The process-level settings ``tubemq-gateway serve`` applies before serving."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.serve import GC_YOUNG_THRESHOLD, http_implementation, tune_gc


def test_uvicorn_gets_the_httptools_parser() -> None:
    # httptools is a dependency; without it uvicorn falls back to the much slower pure-Python h11.
    assert http_implementation() == "httptools"


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
