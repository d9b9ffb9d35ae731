"""``serve --workers N``: N worker processes on the same ports, one embedded cluster, consumer instances that
work whichever worker a request lands on, metrics of the whole replica on every worker, one graceful
shutdown. Real processes and sockets (127.0.0.1 and the workers' private unix sockets)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway_support import SseReader
from tests.support.tls_support import make_pki
from tests.support.waiting import eventually
from tests.support.workers_support import WorkerGateway, owner_worker, samples, serve_command, start_workers

WORKERS = 3
WORKERS_2 = ("--workers", "2")
POLL = "/v1/consumers/{group}/instances/{instance_id}/messages"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerGateway]:
    gateway = start_workers(
        tmp_path_factory.mktemp("wk"), WORKERS, "--embedded-topics", "pub:2,c0:1,c1:1,c2:1,xs:2,gr:1,ov:1"
    )
    try:
        yield gateway
    finally:
        gateway.stop()


async def _publish(client: httpx.AsyncClient, topic: str, values: list[str]) -> None:
    answer = await client.post(
        f"/v1/topics/{topic}/messages", json={"messages": [{"value": v} for v in values]}
    )
    assert answer.status_code == 200, answer.text


async def test_every_worker_publishes_and_metrics_add_up(gw: WorkerGateway) -> None:
    for worker in range(WORKERS):
        async with gw.pinned(worker) as client:
            await _publish(client, "pub", [f"w{worker}-{i}" for i in range(10 + worker)])
    for i in range(12):  # a new connection each: the kernel spreads them over the workers
        async with gw.shared() as client:
            await _publish(client, "pub", [f"s{i}"])
    total = sum(10 + w for w in range(WORKERS)) + 12
    expositions = []
    async with gw.shared() as client:
        expositions.append((await client.get("/metrics")).text)
    for worker in range(WORKERS):
        async with gw.pinned(worker) as client:
            expositions.append((await client.get("/metrics")).text)
    for text in expositions:  # any worker shows the whole replica
        published = samples(text, "tubemq_gateway_published_messages_total")
        per_worker = {labels["worker"]: value for labels, value in published if labels["topic"] == "pub"}
        assert sum(per_worker.values()) == total
        assert all(per_worker[str(w)] >= 10 + w for w in range(WORKERS)), per_worker
        up = {labels["worker"]: value for labels, value in samples(text, "tubemq_gateway_worker_up")}
        assert up == {str(w): 1.0 for w in range(WORKERS)}
        # per-process metrics stay per worker: three processes, three pids
        assert len(samples(text, "process_cpu_seconds_total")) == WORKERS


async def test_consumer_instances_work_through_every_worker(gw: WorkerGateway) -> None:
    for owner in range(WORKERS):
        others = [w for w in range(WORKERS) if w != owner]
        group, topic = f"g{owner}", f"c{owner}"
        async with gw.pinned(owner) as own, gw.pinned(others[0]) as a, gw.pinned(others[1]) as b:
            created = await own.post(
                f"/v1/consumers/{group}", json={"topics": [topic], "startPosition": "earliest"}
            )
            assert created.status_code == 201, created.text
            instance = created.json()["instanceId"]
            assert owner_worker(instance) == owner
            assert created.json()["baseUrl"].startswith(gw.url)  # the replica's URL, not a worker's
            path = f"/v1/consumers/{group}/instances/{instance}"
            await _publish(a, topic, [f"m{i}" for i in range(6)])

            polled = await a.get(f"{path}/messages", params={"format": "utf8", "timeout_ms": 5000})
            assert polled.status_code == 200, polled.text
            messages: list[dict[str, Any]] = polled.json()["messages"]
            assert [m["value"] for m in messages] == [f"m{i}" for i in range(6)]
            committed = await b.post(f"{path}/commits", json={"tokens": [m["token"] for m in messages[:2]]})
            answer = committed.json()
            assert 0 <= answer.pop("awaitingBatch") <= 2  # how the 6 fall into batches is the broker's
            assert answer == {"committed": 2, "rolledBack": 0, "stale": [], "pending": 4}
            assert (await a.get(path)).json()["pendingMessages"] == 4

            # SSE through one worker, resumed with Last-Event-ID through another
            async with a.stream("GET", f"{path}/stream", params={"format": "utf8"}) as stream:
                assert stream.status_code == 200
                first = await SseReader(stream).read(2)
            assert [json.loads(e.data)["value"] for e in first] == ["m2", "m3"]
            headers = {"Last-Event-ID": first[-1].id or ""}
            async with b.stream(
                "GET", f"{path}/stream", params={"format": "utf8"}, headers=headers
            ) as stream:
                reader = SseReader(stream)
                resumed = await reader.read(2)
                assert [json.loads(e.data)["value"] for e in resumed] == ["m4", "m5"]
                assert (await own.post(f"{path}/commits", json={})).json()["pending"] == 0
                await _publish(own, topic, ["live"])
                (live,) = await reader.read(1)
                assert json.loads(live.data)["value"] == "live"

            assert (await b.delete(path)).status_code == 204
            for client in (own, a, b):
                gone = await client.get(f"{path}/messages")
                assert gone.status_code == 410 and gone.json()["error"]["code"] == "gone"


async def test_a_header_that_cannot_cross_to_the_owning_worker_is_refused(gw: WorkerGateway) -> None:
    """A non-ASCII Last-Event-ID: the same 400 naming the header on the owning and on another worker (it
    was a 500 where the hop's client refused the value; issue #23 row 3)."""
    async with gw.pinned(0) as own, gw.pinned(1) as other:
        created = await own.post("/v1/consumers/hdr", json={"topics": ["xs"]})
        assert created.status_code == 201, created.text
        path = f"/v1/consumers/hdr/instances/{created.json()['instanceId']}"
        answers = [
            await client.get(f"{path}/stream", headers={"Last-Event-ID": "\u00e9t\u00e9".encode()})
            for client in (own, other)
        ]
        for answer in answers:
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["field"] == "Last-Event-ID"
        assert answers[0].json()["error"]["message"] == answers[1].json()["error"]["message"]
        assert (await other.delete(path)).status_code == 204


async def test_requests_on_the_shared_port_cross_workers(gw: WorkerGateway) -> None:
    async def poll_counts() -> dict[str, float]:
        """Poll requests each worker received so far (any status)."""
        async with gw.pinned(0) as client:
            text = (await client.get("/metrics")).text
        counts: dict[str, float] = {}
        for labels, value in samples(text, "tubemq_gateway_http_requests_total"):
            if labels["route"] == POLL and labels["method"] == "GET":
                counts[labels["worker"]] = counts.get(labels["worker"], 0) + value
        return counts

    async with gw.shared() as client:
        created = await client.post(
            "/v1/consumers/shared", json={"topics": ["xs"], "startPosition": "earliest"}
        )
    assert created.status_code == 201, created.text
    instance = created.json()["instanceId"]
    owner = str(owner_worker(instance))
    before = await poll_counts()
    polls = 12
    for _ in range(polls):  # a new connection each
        async with gw.shared() as client:
            answer = await client.get(
                f"/v1/consumers/shared/instances/{instance}/messages", params={"timeout_ms": 0}
            )
            assert answer.status_code == 200, answer.text
    after = await poll_counts()
    arrived = {w: after.get(w, 0) - before.get(w, 0) for w in after}
    # every poll was served by the owner; those that arrived elsewhere were forwarded to it
    forwarded = sum(n for w, n in arrived.items() if w != owner)
    assert arrived[owner] == polls
    assert forwarded > 0, arrived  # 12 connections all on one of 3 workers: chance 3**-11
    async with gw.pinned(int(owner)) as client:
        assert (await client.delete(f"/v1/consumers/shared/instances/{instance}")).status_code == 204


async def test_grpc_is_served_by_every_worker_on_the_shared_port(gw: WorkerGateway) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    for _ in range(8):
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.grpc_port}") as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="")
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    listening = [r for r in gw.records() if r.get("msg") == "gRPC server listening"]
    assert sorted(r["worker"] for r in listening) == list(range(WORKERS))


async def test_grpc_consumer_calls_reach_the_owning_worker(gw: WorkerGateway) -> None:
    """Poll, Commit, Subscribe (resumed), ExtendDeadlines, Seek and DeleteConsumer work on channels that land
    on any worker: those reaching another worker than the owner are relayed to it (counted on both in the
    metrics)."""
    import grpc

    from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
    from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc

    target = f"127.0.0.1:{gw.grpc_port}"

    async def on_new_channel(call: Any) -> Any:
        async with grpc.aio.insecure_channel(target) as channel:
            return await call(gateway_pb2_grpc.GatewayServiceStub(channel))

    async def handled(method: str) -> dict[str, float]:
        async with gw.pinned(0) as client:
            text = (await client.get("/metrics")).text
        counts: dict[str, float] = {}
        for labels, value in samples(text, "grpc_server_handled_total"):
            if labels["grpc_method"] == method:
                counts[labels["worker"]] = counts.get(labels["worker"], 0) + value
        return counts

    created = await on_new_channel(
        lambda stub: stub.CreateConsumer(
            pb.CreateConsumerRequest(group="grg", topics=["gr"], start_position=pb.START_POSITION_EARLIEST)
        )
    )
    instance = created.instance_id
    owner = str(owner_worker(instance))
    async with gw.pinned(0) as client:
        await _publish(client, "gr", [f"g{i}" for i in range(4)])
    got: list[Any] = []
    for _ in range(12):  # a new channel (connection) each: most land on another worker than the owner
        answer = await on_new_channel(
            lambda stub: stub.Poll(pb.PollRequest(group="grg", instance_id=instance, timeout_ms=200))
        )
        got.extend(answer.messages)
    assert sorted(m.value for m in got) == [f"g{i}".encode() for i in range(4)]
    committed = await on_new_channel(
        lambda stub: stub.Commit(pb.CommitRequest(group="grg", instance_id=instance, tokens=[got[0].token]))
    )
    assert (committed.committed, committed.pending) == (1, 3)
    polls = await handled("Poll")
    assert polls[owner] >= 12 and sum(n for w, n in polls.items() if w != owner) > 0, polls

    async def first_of_stream(resume: str) -> list[Any]:
        async with grpc.aio.insecure_channel(target) as channel:
            call = gateway_pb2_grpc.GatewayServiceStub(channel).Subscribe(
                pb.SubscribeRequest(group="grg", instance_id=instance, resume_token=resume)
            )
            answer = await anext(aiter(call))
            call.cancel()
            return list(answer.messages)

    streamed = await first_of_stream("")
    assert [m.value for m in streamed] == [b"g1", b"g2", b"g3"]  # the pending ones
    resumed = await first_of_stream(streamed[0].token)
    assert [m.value for m in resumed] == [b"g2", b"g3"]
    # the consumption semantics calls are relayed the same way (issue #25): a call landing on a worker
    # that does not own the instance would fail without the relay
    for _ in range(12):  # a new channel each, as the polls above
        extended = await on_new_channel(
            lambda stub: stub.ExtendDeadlines(
                pb.ExtendDeadlinesRequest(
                    group="grg", instance_id=instance, tokens=[got[1].token], extend_ms=60_000
                )
            )
        )
        assert extended.extended == 1
    for _ in range(12):
        moved = await on_new_channel(
            lambda stub: stub.Seek(
                pb.SeekRequest(group="grg", instance_id=instance, position=pb.START_POSITION_EARLIEST)
            )
        )
        assert len(moved.partitions) == 1
    await on_new_channel(
        lambda stub: stub.DeleteConsumer(pb.DeleteConsumerRequest(group="grg", instance_id=instance))
    )
    for _ in range(3):
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await on_new_channel(lambda stub: stub.Poll(pb.PollRequest(group="grg", instance_id=instance)))
        assert gone.value.code() is grpc.StatusCode.FAILED_PRECONDITION and "create a new" in (
            gone.value.details() or ""
        )


async def test_the_overview_of_any_worker_covers_the_whole_replica(gw: WorkerGateway) -> None:
    """GET /v1/consumers asks the sibling workers for their instances; GET /v1/topics counts what every
    worker published (the web console's groups and topics pages)."""
    created = []
    for worker in range(WORKERS):
        async with gw.pinned(worker) as client:
            await _publish(client, "ov", [f"w{worker}-{i}" for i in range(worker + 1)])
            answer = await client.post(
                "/v1/consumers/ovg", json={"topics": ["ov"], "startPosition": "earliest"}
            )
            assert answer.status_code == 201, answer.text
            created.append(answer.json()["instanceId"])
    for worker in range(WORKERS):
        async with gw.pinned(worker) as client:
            listed = (await client.get("/v1/consumers")).json()
            assert listed["incompleteWorkers"] == []
            mine = {i["instanceId"]: i["worker"] for i in listed["instances"] if i["group"] == "ovg"}
            assert mine == {instance: owner_worker(instance) for instance in created}
            # a header that cannot cross to the siblings: 400 naming it, as the consumer routes answer (the
            # list came back 200 with every sibling in incompleteWorkers)
            odd = await client.get("/v1/consumers", headers={"X-Request-ID": "\u00e9t\u00e9".encode()})
            assert odd.status_code == 400 and odd.json()["error"]["field"] == "X-Request-ID", odd.text
            topics = {t["topic"]: t for t in (await client.get("/v1/topics")).json()["topics"]}
            assert topics["ov"]["publishedMessages"] == 1 + 2 + 3
            assert topics["ov"]["partitions"] == 1
    async with gw.shared() as client:
        for instance in created:
            assert (await client.delete(f"/v1/consumers/ovg/instances/{instance}")).status_code == 204


async def test_a_dead_worker_is_started_again(gw: WorkerGateway) -> None:
    """A worker killed after it ran a while comes back under the same index; its instances are gone (410
    through the other workers), the others' are untouched, and its port share and metrics are back."""
    from gateway.workers.supervisor import RESTART_AFTER

    async with gw.pinned(1) as one, gw.pinned(2) as two:
        lost = (await one.post("/v1/consumers/rs", json={"topics": ["xs"]})).json()["instanceId"]
        kept = (await two.post("/v1/consumers/rs", json={"topics": ["xs"]})).json()["instanceId"]
    started = [r for r in gw.records() if r.get("msg") == "worker process started" and r["worker"] == 1]
    ran = time.time() - datetime.fromisoformat(started[-1]["ts"]).timestamp()
    await asyncio.sleep(max(0.0, RESTART_AFTER + 1 - ran))  # younger workers stop the replica instead
    os.kill(started[-1]["pid"], signal.SIGKILL)

    async def restarted() -> bool:
        again = [r for r in gw.records() if r.get("msg") == "worker process started" and r["worker"] == 1]
        if len(again) == len(started):
            return False
        async with gw.pinned(1) as client:
            try:
                return (await client.get("/readyz")).status_code == 200
            except httpx.HTTPError:
                return False

    await eventually(restarted, timeout=60, what="worker 1 started again")
    assert gw.proc.poll() is None
    async with gw.pinned(0) as zero:
        gone = await zero.get(POLL.format(group="rs", instance_id=lost), params={"timeout_ms": 0})
        assert gone.status_code == 410, gone.text
        alive = await zero.get(POLL.format(group="rs", instance_id=kept), params={"timeout_ms": 0})
        assert alive.status_code == 200, alive.text
        up = {
            labels["worker"]: v
            for labels, v in samples((await zero.get("/metrics")).text, "tubemq_gateway_worker_up")
        }
        assert up == {str(w): 1.0 for w in range(WORKERS)}
        assert (
            await zero.delete(POLL.format(group="rs", instance_id=kept)[: -len("/messages")])
        ).status_code == 204


def test_sigterm_drains_every_worker(tmp_path: Path) -> None:
    """SIGTERM to the supervisor drains both workers (a forwarded long poll is answered at once) and exits
    0; before that, the shared admin port serves the probes and the replica's metrics."""
    gateway = start_workers(tmp_path, 2, "--embedded-topics", "dd:1", "--admin-port", "0")
    try:

        async def scenario() -> tuple[int, float]:
            admin = f"http://127.0.0.1:{gateway.admin_port}"
            for _ in range(4):  # new connections: any worker answers for the replica
                async with httpx.AsyncClient(base_url=admin, timeout=15) as client:
                    assert (await client.get("/readyz")).status_code == 200
                    text = (await client.get("/metrics")).text
                    up = {labels["worker"]: v for labels, v in samples(text, "tubemq_gateway_worker_up")}
                    assert up == {"0": 1.0, "1": 1.0}
            async with gateway.shared() as client:
                assert (await client.get("/metrics")).status_code == 404  # on the admin port only
            async with gateway.pinned(1) as owner, gateway.pinned(0) as other:
                created = await owner.post("/v1/consumers/dg", json={"topics": ["dd"]})
                assert created.status_code == 201, created.text
                path = POLL.format(group="dg", instance_id=created.json()["instanceId"])
                assert (await other.get(path, params={"timeout_ms": 0})).status_code == 200
                started = time.monotonic()
                # a long poll through worker 0, served by worker 1: the drain answers it at once
                waiting = asyncio.create_task(other.get(path, params={"timeout_ms": 30000}))
                await asyncio.sleep(0.5)
                gateway.proc.send_signal(15)
                answer = await waiting
                return answer.status_code, time.monotonic() - started

        status, seconds = asyncio.run(scenario())
        assert status in (200, 503)
        assert seconds < 20, "the long poll waited past the drain"
        assert gateway.proc.wait(timeout=60) == 0
    finally:
        gateway.stop()
    records = gateway.records()
    done = sorted(r["worker"] for r in records if r.get("msg") == "graceful shutdown complete")
    assert done == [0, 1]
    stopped = [r for r in records if r.get("msg") == "worker processes stopped"]
    assert stopped and stopped[0]["exit_codes"] == {"0": 0, "1": 0}
    assert not gateway.socket_dir.exists()


def test_a_port_in_use_stops_the_supervisor(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:  # no SO_REUSEPORT: nobody may share it
        port = taken.getsockname()[1]
        command, env = serve_command("--http-port", str(port), *WORKERS_2)
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert f"the HTTP port {port} (127.0.0.1) is already in use".encode() in done.stderr


def test_mtls_principal_crosses_workers(tmp_path: Path) -> None:
    """With the client certificate's subject as the principal, an instance of one worker serves its owner
    through every worker, REST and gRPC (the subject crosses the hop), and a client's own X-TubeMQ-Client-Cert
    header changes nobody's principal."""
    pki = make_pki(tmp_path / "pki")
    subject = pki.client.subject.rfc4514_string()
    other_subject = pki.dual.subject.rfc4514_string()
    everything = {"actions": ["*"], "topics": ["*"], "groups": ["*"]}
    rules = {"rules": [{"principals": [f"mtls:{subject}", f"mtls:{other_subject}"], **everything}]}
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps(rules), encoding="utf-8")
    env = {
        "TUBEMQ_GATEWAY_TLS__CERT_FILE": str(pki.server.cert),
        "TUBEMQ_GATEWAY_TLS__KEY_FILE": str(pki.server.key),
        "TUBEMQ_GATEWAY_TLS__CLIENT_CA_FILE": str(pki.ca),
        "TUBEMQ_GATEWAY_TLS__CLIENT_AUTH": "required",
        "TUBEMQ_GATEWAY_AUTH__MODE": "required",
        "TUBEMQ_GATEWAY_AUTH__MTLS_PRINCIPAL": "true",
        "TUBEMQ_GATEWAY_AUTH__RULES_FILE": str(rules_file),
    }
    gateway = start_workers(tmp_path, 2, "--embedded-topics", "mt:1", env=env)
    url = f"https://127.0.0.1:{gateway.http_port}"
    with_cert = pki.client_context(pki.client)
    other = pki.client_context(pki.dual)  # another principal, with the same rights
    forged = base64.urlsafe_b64encode(subject.encode()).decode()

    async def scenario() -> None:
        async with httpx.AsyncClient(base_url=url, verify=with_cert, timeout=15) as client:
            created = await client.post("/v1/consumers/mtg", json={"topics": ["mt"]})
            assert created.status_code == 201, created.text
        path = POLL.format(group="mtg", instance_id=created.json()["instanceId"])
        owner = str(owner_worker(created.json()["instanceId"]))
        served: set[str] = set()
        for _ in range(16):  # a new connection each: some land on the other worker and are forwarded
            async with httpx.AsyncClient(base_url=url, verify=with_cert, timeout=15) as client:
                answer = await client.get(path, params={"timeout_ms": 0})
                assert answer.status_code == 200, answer.text
            async with httpx.AsyncClient(base_url=url, verify=other, timeout=15) as client:
                refused = await client.get(
                    path, params={"timeout_ms": 0}, headers={"x-tubemq-client-cert": forged}
                )
                # not its instance: 404 (200 would mean the forged subject was believed)
                assert refused.status_code == 404, refused.text
        # gRPC too: Poll on fresh TLS channels with the certificate (relayed to the owner with the subject)
        import grpc

        from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
        from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc

        credentials = grpc.ssl_channel_credentials(
            root_certificates=pki.ca.read_bytes(),
            private_key=pki.client.key.read_bytes(),
            certificate_chain=pki.client.cert.read_bytes(),
        )
        request = pb.PollRequest(group="mtg", instance_id=created.json()["instanceId"], timeout_ms=0)
        for _ in range(8):
            async with grpc.aio.secure_channel(f"127.0.0.1:{gateway.grpc_port}", credentials) as channel:
                await gateway_pb2_grpc.GatewayServiceStub(channel).Poll(request)
        for record in gateway.records():
            if (
                record.get("logger") == "gateway.access"
                and record.get("route") == POLL
                and record.get("status") == 200
            ):
                served.add(str(record["worker"]))
        assert served == {"0", "1"}, f"all polls stayed on worker {owner}: the test proved nothing"

    try:
        asyncio.run(scenario())
    finally:
        assert gateway.stop() == 0


def test_workers_load_only_the_installed_package(tmp_path: Path) -> None:
    """Started from a directory holding another ``gateway`` package, the workers still run the installed
    one: the planted code never runs, and every worker serves."""
    planted = tmp_path / "cwd"
    marker = tmp_path / "planted-ran"
    for package in (planted / "gateway", planted / "gateway" / "workers"):
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\nraise SystemExit(3)\n"
        )
    (planted / "gateway" / "workers" / "child.py").write_text("raise SystemExit(3)\n")
    gateway = start_workers(tmp_path, 2, "--embedded-topics", "pl:1", cwd=planted)
    try:
        assert not marker.exists(), marker.read_text()
        with httpx.Client(base_url=gateway.url, timeout=15.0) as client:
            assert client.get("/readyz").status_code == 200
    finally:
        gateway.stop()
    assert not marker.exists(), marker.read_text()
