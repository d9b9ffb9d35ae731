"""The real broker restarted under a gateway on TLS with authentication (TLS_AUTH=1 mode): publishes are 503
while it is away, and afterwards the gateway's new links are TLS again and its fresh signatures are accepted:
publishing works again and the consumer instance made before the outage goes on delivering (its partitions
registered again with the restarted broker, signed)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from interop_outage import broker_stopped, outage_settings
from interop_support import (
    DEMO,
    RealGateway,
    group_name,
    real_gateway,
    require_topic,
    run_tag,
    start_offsets,
    wait_until,
)
from interop_tls import TlsHarness, check_links, tls_harness

pytestmark = pytest.mark.tls_auth


async def publish(gw: RealGateway, topic: str, values: list[str]) -> tuple[int, list[dict[str, Any]]]:
    answer = await gw.http.post(
        f"/v1/topics/{topic}/messages", json={"messages": [{"value": v} for v in values]}
    )
    return answer.status_code, answer.json().get("results", [])


async def poll_until(gw: RealGateway, base: str, wanted: set[str], within: float) -> None:
    seen: set[str] = set()
    deadline = time.monotonic() + within
    while wanted - seen and time.monotonic() < deadline:
        poll = await gw.http.get(f"{base}/messages", params={"timeout_ms": 2000, "format": "utf8"})
        assert poll.status_code == 200, poll.text
        seen |= {m["value"] for m in poll.json()["messages"]} & wanted
        assert (await gw.http.post(f"{base}/commits", json={})).status_code == 200
    assert seen == wanted, f"missing {sorted(wanted - seen)}"


async def test_tls_and_signing_recover_after_a_broker_restart() -> None:
    harness: TlsHarness = tls_harness()
    topic = require_topic(DEMO)
    tag = run_tag("tlsoutage")
    async with real_gateway(masters=harness.master, tubemq=harness.tubemq(), **outage_settings(1.0)) as gw:
        before = [f"{tag}-before-{i}" for i in range(6)]
        status, results = await publish(gw, topic, before)
        assert status == 200, results
        created = await gw.http.post(
            f"/v1/consumers/{group_name('tlsoutage')}",
            json={"topics": [topic], "startPosition": "offsets", "offsets": start_offsets(results)},
        )
        assert created.status_code == 201, created.text
        base = created.json()["baseUrl"]
        await poll_until(gw, base, set(before), 90.0)

        with broker_stopped():
            status, _ = await publish(gw, topic, [f"{tag}-away"])
            assert status == 503, "a publish while the broker is away must be a retriable 503"

        after = [f"{tag}-after-{i}" for i in range(6)]

        async def published() -> bool:
            status, _ = await publish(gw, topic, after)
            return status == 200

        await wait_until(published, 120.0, "a publish to succeed after the broker restart", step=1.0)
        await poll_until(gw, base, set(after), 120.0)
        assert (await gw.http.delete(base)).status_code in (200, 204)
        check_links(gw, harness)
