"""``serve --workers 2`` configured for the real TubeMQ in TLS_AUTH=1 mode through its environment
(``TUBEMQ_GATEWAY_TUBEMQ__TLS__*``, ``__AUTH__*``), as a deployment sets it: every worker process registers
over TLS with credentials and publishes (REST on each worker, gRPC on the shared port), and a consumer
instance on worker 0 is read through worker 1, which relays the polls and commits to it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from interop_support import DEMO, group_name, require_topic, run_tag, start_offsets
from interop_tls import tls_harness

from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.workers_support import start_workers

pytestmark = pytest.mark.tls_auth


async def test_two_workers_publish_and_consume_over_tls_with_authentication(tmp_path: Path) -> None:
    harness = tls_harness()
    topic = require_topic(DEMO)
    tag = run_tag("tlsworkers")
    env = {
        "TUBEMQ_GATEWAY_MASTERS": harness.master,
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__ENABLED": "true",
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__CA_FILE": str(harness.ca),
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__CERT_FILE": str(harness.cert),
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__KEY_FILE": str(harness.key),
        "TUBEMQ_GATEWAY_TUBEMQ__AUTH__USERNAME": harness.user,
        "TUBEMQ_GATEWAY_TUBEMQ__AUTH__PASSWORD": harness.password,
        "TUBEMQ_GATEWAY_CONSUMERS__ASSIGNMENT_WAIT": "60",
    }
    gateway = start_workers(tmp_path, 2, env=env)
    try:
        results: list[dict[str, Any]] = []
        for worker in range(gateway.count):  # each worker's own TubeMQ client publishes
            async with gateway.pinned(worker) as client:
                values = [{"value": f"{tag}-w{worker}-{i}"} for i in range(6)]
                answer = await client.post(f"/v1/topics/{topic}/messages", json={"messages": values})
                assert answer.status_code == 200, answer.text
                results += answer.json()["results"]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.grpc_port}") as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            sent = await stub.Publish(
                pb.PublishRequest(
                    topic=topic, messages=[pb.Message(value=f"{tag}-grpc-{i}".encode()) for i in range(6)]
                )
            )
            assert sent.failed == 0, sent
        wanted = {f"{tag}-w{w}-{i}" for w in range(gateway.count) for i in range(6)}
        wanted |= {f"{tag}-grpc-{i}" for i in range(6)}
        offsets = start_offsets(results)
        for r in sent.results:
            key = r.stored.partition_key
            offsets[key] = min(offsets.get(key, r.stored.offset), r.stored.offset)

        async with gateway.pinned(0) as owner, gateway.pinned(1) as other:
            created = await owner.post(
                f"/v1/consumers/{group_name('tlsworkers')}",
                json={"topics": [topic], "startPosition": "offsets", "offsets": offsets},
            )
            assert created.status_code == 201, created.text
            base = created.json()["baseUrl"]
            seen: set[str] = set()
            deadline = time.monotonic() + 90
            while wanted - seen and time.monotonic() < deadline:
                # through worker 1: relayed to worker 0, which holds the instance and its TubeMQ consumer
                poll = await other.get(f"{base}/messages", params={"timeout_ms": 2000, "format": "utf8"})
                assert poll.status_code == 200, poll.text
                seen |= {m["value"] for m in poll.json()["messages"]} & wanted
                assert (await other.post(f"{base}/commits", json={})).status_code == 200
            assert seen == wanted, f"missing {sorted(wanted - seen)}"
            assert (await owner.delete(base)).status_code in (200, 204)
    finally:
        assert gateway.stop() == 0, gateway.log.read_text()[-3000:]
    refused = [r for r in gateway.records() if r.get("level") == "error"]
    assert not refused, refused[:3]
