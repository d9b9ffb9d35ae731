"""The real broker stopped and started under a running gateway: publishes fail with a mapped, retriable
error (never a 5xx other than 503, never a hang), the broker is shielded, the gateway turns unready, and
everything recovers once the broker is back; a topic the cluster does not have is unpublishable (404).

The broker is stopped with SIGTERM to the pid the harness recorded (checked to be its broker), and started
again with the harness's ``start.sh`` (which only starts what is not running). The suite holds the cluster's
lock for its whole run (scripts/interop.sh)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from interop_support import DEMO, HOME, group_name, real_gateway, require_topic, run_tag, wait_until

from gateway.grpc.pb.v1 import gateway_pb2 as pb

OUTAGE_SETTINGS: dict[str, Any] = {
    "producer": {
        "heartbeat_interval": 1.0,
        "send_timeout": 5.0,
        "failure_cooldown": 2.0,
        "unavailable_cooldown": 2.0,
    },
    "pool": {"connect_timeout": 1.0},
}


def broker_pid() -> int | None:
    """The harness broker's pid, only if the recorded pid really is that broker."""
    pid_file = HOME / "run" / "broker.pid"
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    if b"BrokerStartup" in cmdline and f"-Dtubemq.harness={HOME}".encode() in cmdline:
        return pid
    return None


def start_broker() -> None:
    done = subprocess.run([str(HOME / "start.sh")], capture_output=True, timeout=400)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-1000:]


@contextlib.contextmanager
def broker_stopped() -> Iterator[None]:
    """Stop the real broker; always start it again (and wait until topics are publishable) on exit."""
    if not (HOME / "start.sh").is_file():
        pytest.skip(f"no {HOME}/start.sh: cannot stop and start the real broker")
    pid = broker_pid()
    if pid is None:
        pytest.skip(f"no running harness broker recorded in {HOME}/run/broker.pid")
    os.kill(pid, signal.SIGTERM)
    try:
        deadline = time.monotonic() + 40
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.2)
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGKILL)
            time.sleep(1)
        yield
    finally:
        start_broker()


@contextlib.contextmanager
def _explained(observed: dict[str, Any], events: list[object]) -> Iterator[None]:
    """A failure inside carries what the gateway answered and the core events (for diagnosis)."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nobserved: {observed}\ncore events: {events[-30:]}") from exc


async def test_publish_and_consume_across_a_broker_restart() -> None:
    topic = require_topic(DEMO)
    tag = run_tag("outage")
    async with real_gateway(**OUTAGE_SETTINGS) as gw:
        http = gw.http
        answer = await http.post(f"/v1/consumers/{group_name('outage')}", json={"topics": [topic]})
        assert answer.status_code == 201, answer.text
        base = answer.json()["baseUrl"]

        async def assigned() -> bool:
            poll = await http.get(f"{base}/messages", params={"timeout_ms": 500})
            assert poll.status_code == 200, poll.text
            return bool((await http.get(base)).json()["partitions"])

        await wait_until(assigned, 60.0, "the consumer instance to be assigned partitions")
        before = await http.post(
            f"/v1/topics/{topic}/messages", json={"messages": [{"value": f"{tag}-before"}]}
        )
        assert before.status_code == 200, before.text

        observed: dict[str, Any] = {}
        events: list[object] = []
        gw.runtime.events.subscribe(events.append)
        with broker_stopped(), _explained(observed, events):
            # REST publish: a mapped, retriable failure within the send timeout, never another 5xx
            statuses = []
            for i in range(4):
                async with asyncio.timeout(30):
                    r = await http.post(
                        f"/v1/topics/{topic}/messages", json={"messages": [{"value": f"{tag}-down{i}"}]}
                    )
                statuses.append(r.status_code)
                body = r.json()
                if r.status_code == 207:
                    assert body["results"][0]["status"] == 503, body
                else:
                    assert r.status_code in (503, 404), r.text
                    assert "error" in body and body["error"]["message"], body
                    if r.status_code == 503:
                        assert "retry-after" in r.headers
            observed["rest"] = statuses

            # gRPC publish: UNAVAILABLE (or NOT_FOUND once the master dropped the broker's partitions)
            async with asyncio.timeout(30):
                try:
                    response = await gw.grpc_stub.Publish(
                        pb.PublishRequest(
                            topic=topic, messages=[pb.Message(value=f"{tag}-grpc-down".encode())]
                        )
                    )
                except grpc.aio.AioRpcError as exc:
                    observed["grpc"] = exc.code().name
                    assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND), exc
                else:
                    observed["grpc"] = response.results[0].error.grpc_code
                    assert response.failed == 1

            # the gateway shields the broker and reports unready
            async def unready() -> bool:
                r = await http.get("/readyz")
                observed["readyz"] = r.json()
                return r.status_code == 503

            await wait_until(unready, 60.0, "/readyz to report the broker unusable")
            topic_view = (await http.get(f"/v1/topics/{topic}")).json()
            observed["topic"] = topic_view

            # the consumer instance keeps answering: empty polls, no error
            poll = await http.get(f"{base}/messages", params={"timeout_ms": 500})
            assert poll.status_code == 200, poll.text
        print("observed while the broker was down:", observed)

        # recovery: publishes succeed again and the consumer instance receives them
        async def publishes() -> bool:
            r = await http.post(
                f"/v1/topics/{topic}/messages", json={"messages": [{"value": f"{tag}-after"}]}
            )
            assert r.status_code in (200, 207, 404, 503), r.text
            return r.status_code == 200

        await wait_until(publishes, 120.0, "publishing to work again after the broker restart", step=1.0)
        assert (await http.get("/readyz")).status_code == 200
        got: set[str] = set()

        async def received() -> bool:
            poll = await http.get(f"{base}/messages", params={"timeout_ms": 1000, "format": "utf8"})
            assert poll.status_code == 200, poll.text
            messages = poll.json()["messages"]
            got.update(m["value"] for m in messages if m["encoding"] == "utf8")
            if messages:
                await http.post(f"{base}/commits", json={})
            return f"{tag}-after" in got

        await wait_until(
            received, 120.0, "the consumer instance to receive a message published after the restart"
        )


async def test_unknown_topic_is_unpublishable() -> None:
    async with real_gateway() as gw:
        topic = f"interop_absent_{run_tag('t').split('-')[1]}"
        r = await gw.http.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": "x"}]})
        assert r.status_code == 404, r.text
        assert r.json()["error"]["message"]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gw.grpc_stub.Publish(pb.PublishRequest(topic=topic, messages=[pb.Message(value=b"x")]))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
