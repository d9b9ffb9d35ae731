"""The embedded master's web API bounds a request's head as the real master's Jetty does: the same heads,
just below and above 8 KiB, get the same status, content type and page from both (the real master tells
414 from 431 by whether the request target alone passed the bound)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from interop_support import WEB

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from tests.support.web_heads import exchange, head_with_header, head_with_target

CASES = [
    (head_with_target, 8100, 200),
    (head_with_header, 8100, 200),
    (head_with_header, 8400, 431),
    (head_with_target, 8400, 414),
    (head_with_header, 16000, 431),
]


@pytest.mark.parametrize(("make", "size", "status"), CASES, ids=lambda v: getattr(v, "__name__", str(v)))
async def test_the_embedded_master_bounds_a_head_as_the_real_one(
    make: Callable[[int], bytes], size: int, status: int
) -> None:
    if not WEB:
        pytest.skip("no master web API named (TUBEMQ_REAL_WEB)")
    real_port = urlsplit(WEB).port or 80
    real = await exchange(real_port, make(size))
    async with EmbeddedCluster([TopicSpec("demo", 1)]) as cluster:
        embedded = await exchange(cluster.master_web.port, make(size))
    assert real[0] == embedded[0] == status, (real[:2], embedded[:2])
    if status != 200:  # the same page; a served query's data differs between the clusters
        assert embedded == real
