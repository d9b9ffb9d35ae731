"""The interop suite runs only against a real TubeMQ cluster: without ``TUBEMQ_REAL_MASTER`` every test in
this directory is skipped with the reason (CI has no real cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
from interop_support import MASTER, SKIP_REASON

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MASTER:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def java_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the Java interop client is compiled to and run from (a temp dir, never the tree)."""
    return tmp_path_factory.mktemp("interop")
