"""The interop suite runs only against a real TubeMQ cluster: without ``TUBEMQ_REAL_MASTER`` every test in
this directory is skipped with the reason (CI has no real cluster).

The harness's mode picks the cases: in its default mode the plain cases run and the ``tls_auth`` ones skip;
in ``TLS_AUTH=1`` mode (two-way TLS + authentication, see interop_tls.py) it is the other way round."""

from __future__ import annotations

from pathlib import Path

import pytest
from interop_support import MASTER, SKIP_REASON
from interop_tls import JAVA_CANNOT, NEEDS_TLS_AUTH, harness_mode

_HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tls_auth: interop case for a real TubeMQ harness in TLS_AUTH=1 mode (TLS + authentication)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if _HERE in item.path.parents]
    if not MASTER:
        skip = pytest.mark.skip(reason=SKIP_REASON)
        for item in mine:
            item.add_marker(skip)
        return
    tls_auth = harness_mode() == "1"
    for item in mine:
        if item.get_closest_marker("tls_auth") is None and tls_auth:
            item.add_marker(pytest.mark.skip(reason=JAVA_CANNOT))
        elif item.get_closest_marker("tls_auth") is not None and not tls_auth:
            item.add_marker(pytest.mark.skip(reason=NEEDS_TLS_AUTH))


@pytest.fixture(scope="session")
def java_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the Java interop client is compiled to and run from (a temp dir, never the tree)."""
    return tmp_path_factory.mktemp("interop")
