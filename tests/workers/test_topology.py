"""The production topology end to end (issue #23): two replicas of ``serve --workers 2`` on one TubeMQ
cluster, behind a real nginx balancing REST (``proxy_pass``) and gRPC (``grpc_pass``) round robin without
affinity, scraped by a real Prometheus with the chart's alert rules.

REST and gRPC consumers are created, polled, committed and deleted through nginx (their calls land on either
replica and reach the owner); the dashboard's every query has data in that Prometheus and counts 2 ready
replicas; then one replica is killed: its instances' clients are told 410 (REST) / FAILED_PRECONDITION
(gRPC) through nginx, and recover with a new instance on the other replica.

nginx comes from the Debian package (``scripts/ensure_nginx.sh``, called by ``scripts/test.sh``), Prometheus
likewise (``scripts/ensure_prometheus.sh``); without them the test skips, saying so.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from tests.support.deploy_tools import ROOT, prometheus_tool
from tests.support.prometheus_support import concrete, query, running_prometheus
from tests.support.serving import free_port
from tests.support.topology_support import Replica, cluster_of, nginx_binary, replica_env, running_nginx
from tests.support.workers_support import start_workers

pytestmark = pytest.mark.slow

DASHBOARD = ROOT / "deploy" / "grafana" / "tubemq-gateway.json"


def owner_url(instance_id: str) -> str:
    """The replica URL an instance id names (its signed owner part, decoded; the tag is not checked)."""
    owner = instance_id.split(".")[0]
    text = base64.urlsafe_b64decode(owner + "=" * (-len(owner) % 4)).decode()
    return text.partition("#")[0]


async def _retry(call: Any, attempts: int = 20) -> httpx.Response:
    """A request through nginx, again while nginx answers 502 (a replica it has not yet seen die)."""
    for _ in range(attempts):
        answer: httpx.Response = await call()
        if answer.status_code != 502:
            return answer
        await asyncio.sleep(0.2)
    return answer


async def _rest_consume(http: httpx.AsyncClient, group: str, topic: str, count: int) -> str:
    """Create a REST consumer through nginx, publish ``count`` messages of its own, poll and commit until it
    has them all, through nginx (each request may land on either replica); the instance's path."""
    created = await http.post(f"/v1/consumers/{group}", json={"topics": [topic], "startPosition": "earliest"})
    assert created.status_code == 201, created.text
    base = created.json()["baseUrl"]
    assert base.startswith(str(http.base_url).rstrip("/")), base  # the proxy's URL, not a replica's
    path = base.removeprefix(str(http.base_url).rstrip("/"))
    values = [f"{group}-{i}" for i in range(count)]
    sent = await http.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": v} for v in values]})
    assert sent.status_code == 200, sent.text
    got: list[str] = []
    deadline = time.monotonic() + 60
    while len(got) < count:
        assert time.monotonic() < deadline, f"{group}: polled {got}"
        polled = await http.get(f"{path}/messages", params={"format": "utf8", "timeout_ms": 1000})
        assert polled.status_code == 200, polled.text
        messages = polled.json()["messages"]
        if messages:
            got += [m["value"] for m in messages if m["value"].startswith(f"{group}-")]
            committed = await http.post(f"{path}/commits", json={"tokens": [m["token"] for m in messages]})
            assert committed.status_code == 200 and committed.json()["committed"] == len(messages)
    assert sorted(got) == sorted(values)
    return path


async def _grpc_consume(stub: gateway_pb2_grpc.GatewayServiceStub, group: str, topic: str, count: int) -> str:
    """The same over gRPC through nginx (grpc_pass): the instance id."""
    created = await stub.CreateConsumer(
        pb.CreateConsumerRequest(group=group, topics=[topic], start_position=pb.START_POSITION_EARLIEST)
    )
    instance = created.instance_id
    values = [f"{group}-{i}".encode() for i in range(count)]
    published = await stub.Publish(
        pb.PublishRequest(topic=topic, messages=[pb.Message(value=v) for v in values])
    )
    assert not published.failed
    got: list[bytes] = []
    polls = 0
    deadline = time.monotonic() + 60
    while len(got) < count or polls < 4:  # a few calls at least: round robin sends some to the other replica
        assert time.monotonic() < deadline, f"{group}: polled {got}"
        polled = await stub.Poll(pb.PollRequest(group=group, instance_id=instance, timeout_ms=500))
        polls += 1
        if polled.messages:
            got += [m.value for m in polled.messages if m.value.startswith(f"{group}-".encode())]
            committed = await stub.Commit(
                pb.CommitRequest(group=group, instance_id=instance, tokens=[m.token for m in polled.messages])
            )
            assert committed.committed == len(polled.messages)
    assert sorted(got) == sorted(values)
    return instance


async def _on_both(make: Any, nudge: Any, prefix: str, replicas: list[Replica]) -> list[tuple[str, str]]:
    """Consumers made with ``make(group)`` until each replica owns one: (group, instance path or id);
    ``nudge()`` (one more request through nginx) shifts the round robin between two of them."""
    made: list[tuple[str, str]] = []
    for i in range(8):
        group = f"{prefix}{i}"
        made.append((group, await make(group)))
        if {owner_url(ref.split("/")[-1]) for _, ref in made} == {r.url for r in replicas}:
            return made
        for _ in range(i % 2 + 1):  # one request, then two: the next create lands elsewhere either way
            await nudge()
    raise AssertionError(f"nginx sent every {prefix} consumer to one replica: {made}")


async def _load(http: httpx.AsyncClient, path: str, stop: asyncio.Event) -> None:
    """Publish and poll through nginx until ``stop``, so that every rate on the dashboard has samples."""
    n = 0
    while not stop.is_set():
        batch = {"messages": [{"value": f"load-{n}-{i}", "key": f"k{i}"} for i in range(5)]}
        await http.post("/v1/topics/topo/messages", json=batch)
        got = await http.get(f"{path}/messages", params={"timeout_ms": 100, "max_messages": 20})
        if got.status_code == 200 and got.json()["messages"]:
            await http.post(f"{path}/commits", json={"tokens": [m["token"] for m in got.json()["messages"]]})
        n += 1
        await asyncio.sleep(0.1)


async def _every_panel_has_data(prom: httpx.AsyncClient, within: float) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    targets = [
        (p["title"], t["expr"]) for p in dashboard["panels"] if p["type"] != "row" for t in p["targets"]
    ]
    deadline = time.monotonic() + within
    while True:
        empty = [
            f"{title}: {concrete(expr)}" for title, expr in targets if not await query(prom, concrete(expr))
        ]
        if not empty:
            return
        assert time.monotonic() < deadline, "panels without data:\n" + "\n".join(empty)
        await asyncio.sleep(1.0)


async def test_two_replicas_of_two_workers_behind_nginx_and_prometheus(tmp_path: Path) -> None:
    prometheus_tool("prometheus")  # skip before starting anything when it is missing
    nginx_binary()
    replicas = [Replica(name, free_port(), free_port()) for name in ("a", "b")]
    async with cluster_of(TopicSpec("topo", 4), TopicSpec("topo2", 2)) as cluster:
        try:
            for replica in replicas:
                args = ["--http-port", str(replica.http_port), "--grpc-port", str(replica.grpc_port)]
                (tmp_path / replica.name).mkdir()
                replica.gateway = await asyncio.to_thread(
                    start_workers,
                    tmp_path / replica.name,
                    2,
                    *args,
                    env=replica_env(cluster, replica, replicas),
                )
            await _topology(tmp_path, cluster, replicas)
        finally:
            for replica in replicas:
                if replica.gateway is not None:
                    await asyncio.to_thread(replica.gateway.stop)


async def _topology(tmp_path: Path, cluster: EmbeddedCluster, replicas: list[Replica]) -> None:
    (tmp_path / "nginx").mkdir()
    with running_nginx(tmp_path / "nginx", replicas) as (http_url, grpc_target):
        async with (
            httpx.AsyncClient(base_url=http_url, timeout=30) as http,
            grpc.aio.insecure_channel(grpc_target) as channel,
        ):
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            # consumers through nginx, REST and gRPC, until each replica owns some of each
            health = health_pb2_grpc.HealthStub(channel)
            rest = await _on_both(
                lambda g: _rest_consume(http, g, "topo", 12), lambda: http.get("/livez"), "rest", replicas
            )
            grpc_ids = await _on_both(
                lambda g: _grpc_consume(stub, g, "topo2", 8),
                lambda: health.Check(health_pb2.HealthCheckRequest()),
                "grpc",
                replicas,
            )
            # a group with lag and no consumer (its dashboard panel), deleted through nginx
            idle = await http.post("/v1/consumers/idle", json={"topics": ["topo"]})
            idle_path = idle.json()["baseUrl"].removeprefix(http_url)
            await http.get(f"{idle_path}/messages", params={"timeout_ms": 500})
            assert (await http.delete(idle_path)).status_code == 204

            stop = asyncio.Event()
            load = asyncio.create_task(_load(http, rest[0][1], stop))
            try:
                targets = [f"127.0.0.1:{r.http_port}" for r in replicas]
                (tmp_path / "prom").mkdir()
                async with running_prometheus(tmp_path / "prom", targets) as prom:
                    await _every_panel_has_data(prom, 60)
                    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
                    ready = next(p for p in dashboard["panels"] if p["title"] == "Ready replicas")
                    count = await query(prom, concrete(ready["targets"][0]["expr"]))
                    assert [float(c["value"][1]) for c in count] == [2.0], count
            finally:
                stop.set()
                await load

            # kill one replica (supervisor and workers, SIGKILL): what it owned is gone, the rest works
            victim, survivor = replicas
            for pid in victim.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            assert victim.gateway is not None
            victim.gateway.proc.wait(10)
            for _, path in rest:
                answer = await _retry(lambda p=path: http.get(f"{p}/messages", params={"timeout_ms": 0}))
                if owner_url(path.split("/")[-1]) == victim.url:
                    assert answer.status_code == 410, answer.text
                    assert "POST /v1/consumers/" in answer.json()["error"]["message"]
                else:
                    assert answer.status_code == 200, answer.text
            for group, instance in grpc_ids:
                request = pb.PollRequest(group=group, instance_id=instance, timeout_ms=0)
                if owner_url(instance) == victim.url:
                    with pytest.raises(grpc.aio.AioRpcError) as lost:
                        await stub.Poll(request)
                    assert lost.value.code() is grpc.StatusCode.FAILED_PRECONDITION, lost.value
                else:
                    await stub.Poll(request)
            # the clients recover on the surviving replica
            again = await _retry(lambda: http.post("/v1/consumers/rest0", json={"topics": ["topo"]}))
            assert again.status_code == 201, again.text
            assert owner_url(again.json()["instanceId"]) == survivor.url
            recovered = await http.get(
                f"{again.json()['baseUrl'].removeprefix(http_url)}/messages", params={"timeout_ms": 200}
            )
            assert recovered.status_code == 200, recovered.text
            fresh = await stub.CreateConsumer(pb.CreateConsumerRequest(group="grpc0", topics=["topo2"]))
            assert owner_url(fresh.instance_id) == survivor.url
            await stub.Poll(pb.PollRequest(group="grpc0", instance_id=fresh.instance_id, timeout_ms=200))
            # deleted through nginx
            assert (await http.delete(again.json()["baseUrl"].removeprefix(http_url))).status_code == 204
            await stub.DeleteConsumer(pb.DeleteConsumerRequest(group="grpc0", instance_id=fresh.instance_id))
