"""The chart's `helm test` script against a gateway on the real TubeMQ: it publishes, starts a new group at
the published offset (bound consumption), and reads its message back."""

from __future__ import annotations

from interop_support import DEMO, real_gateway, require_topic

from tests.support.chart_support import run_smoke_test


async def test_the_helm_test_script_passes_on_a_real_cluster() -> None:
    topic = require_topic(DEMO)
    async with real_gateway() as gw:
        code, out = await run_smoke_test(gw.url, "", topic=topic, seconds=60)
    assert code == 0, out
    assert f"published to 1:{topic}:" in out and "OK: tubemq-gateway publishes and consumes" in out
