"""Replaying a relayed client identity, against two replicas served over mTLS (real sockets, one embedded
cluster) and their gRPC servers: a client certificate subject the forwarding replica signed, seen where TLS
ends on the owner, is believed by the owner only once, for the request and owner it was signed for, on a
connection presenting the certificate of the replica that signed it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from gateway.api.forwarding import FORWARDED_HEADER
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.replicas import FORWARDED_KEY
from gateway.security.replica_subject import REPLICA_CERT_KEY
from tests.support.auth_support import write_mtls_auth_files
from tests.support.consumer_support import Env
from tests.support.gateway_support import mtls_replicas
from tests.support.replica_support import mtls_replica_pair
from tests.support.serving import free_port
from tests.support.tls_support import issue_client, make_pki
from tests.support.workers_support import start_workers


async def test_a_captured_relayed_subject_cannot_be_replayed(env: Env, tmp_path: Path) -> None:
    """A client certificate subject the forwarding replica signed, seen where TLS ends on the owner, is
    replayed: by another client (bob, its own certificate from the same CA) with its own
    x-tubemq-forwarded-by, to read alice's instance as alice; by a connection presenting the replicas'
    certificate, a second time; for another request. Each is refused 401 saying why, and bob reads
    nothing (the replay used to be believed for 60 s either way: bob polled alice's messages)."""
    pki = make_pki(tmp_path / "pki")
    bob = issue_client(pki, "bob", "bob")
    subject = pki.client.subject.rfc4514_string()
    files = write_mtls_auth_files(tmp_path, subject)
    async with (
        mtls_replicas(env, pki, files) as (owner, other),
        httpx.AsyncClient(base_url=owner.url, verify=pki.client_context(pki.client), timeout=10) as alice,
        httpx.AsyncClient(base_url=other.url, verify=pki.client_context(pki.client), timeout=10) as via,
        httpx.AsyncClient(base_url=owner.url, verify=pki.client_context(bob), timeout=10) as mallory,
        httpx.AsyncClient(base_url=owner.url, verify=pki.client_context(pki.dual), timeout=10) as replica,
    ):
        captured: list[str] = []
        served_app = owner.server.config.loaded_app

        async def observed(scope: Any, receive: Any, send: Any) -> None:
            captured.extend(v.decode() for k, v in scope.get("headers", ()) if k == REPLICA_CERT_KEY.encode())
            await served_app(scope, receive, send)

        owner.server.config.loaded_app = observed  # the owner's connections accepted from now on
        created = await alice.post("/v1/consumers/rg", json={"topics": ["demo"], "startPosition": "earliest"})
        assert created.status_code == 201, created.text
        base = f"/v1/consumers/rg/instances/{created.json()['instanceId']}"
        polled = await via.get(f"{base}/messages", params={"timeout_ms": 0})  # forwarded: alice's subject
        assert polled.status_code == 200, polled.text
        assert len(captured) == 1
        published = await alice.post("/v1/topics/demo/messages", json={"messages": [{"value": "secret"}]})
        assert published.status_code == 200, published.text

        forwarded = {FORWARDED_HEADER: other.url, REPLICA_CERT_KEY: captured[0]}
        replayed = await mallory.get(f"{base}/messages", params={"timeout_ms": 1000}, headers=forwarded)
        assert replayed.status_code == 401, replayed.text
        assert "x-tubemq-replica-cert is not accepted" in replayed.json()["error"]["message"]
        again = await replica.get(f"{base}/messages", params={"timeout_ms": 1000}, headers=forwarded)
        assert again.status_code == 401 and "used before" in again.text, again.text

        assert (await via.get(base)).status_code == 200  # a fresh relay of alice's: believed
        other_request = {FORWARDED_HEADER: other.url, REPLICA_CERT_KEY: captured[1]}
        deleted = await replica.delete(base, headers=other_request)
        assert deleted.status_code == 401 and "not signed for this replica, this request" in deleted.text
        # alice's message is still hers: nothing was read or committed by the replays
        mine = await alice.get(f"{base}/messages", params={"timeout_ms": 3000, "format": "utf8"})
        assert "secret" in [m["value"] for m in mine.json()["messages"]], mine.text


async def test_a_captured_relayed_subject_cannot_be_replayed_over_grpc(tmp_path: Path) -> None:
    """The same over gRPC: alice's Poll relayed by one replica to the owner carries her subject, signed; bob
    replays it on his own connection with his own x-tubemq-forwarded-by (UNAUTHENTICATED, not alice's
    messages), a connection with the replicas' certificate replays it once more (UNAUTHENTICATED: used
    before), and alice's next relayed call is served."""
    pki = make_pki(tmp_path / "pki")
    bob = issue_client(pki, "bob", "bob")
    subject = pki.client.subject.rfc4514_string()
    files = write_mtls_auth_files(tmp_path, subject)
    https, grpcs = [free_port(), free_port()], [free_port(), free_port()]
    cluster = EmbeddedCluster([TopicSpec("rel", 2)])
    async with cluster, mtls_replica_pair(cluster, files, pki, https, grpcs) as (owner, other):
        captured: list[str] = []
        interceptor = owner.server.interceptor
        begin = interceptor._begin

        def observed(context: grpc.aio.ServicerContext, begun: Any) -> tuple[str, dict[str, str | bytes]]:
            request_id, metadata = begin(context, begun)
            value = metadata.get(REPLICA_CERT_KEY)
            if isinstance(value, str):
                captured.append(value)
            return request_id, metadata

        interceptor._begin = observed  # type: ignore[method-assign]
        created = await owner.stub.CreateConsumer(
            pb.CreateConsumerRequest(group="rr", topics=["rel"], start_position=pb.START_POSITION_EARLIEST)
        )
        key = {"group": "rr", "instance_id": created.instance_id}
        polled = await other.stub.Poll(pb.PollRequest(**key, timeout_ms=0))  # relayed: alice's subject
        assert list(polled.messages) == [] and len(captured) == 1
        await owner.stub.Publish(pb.PublishRequest(topic="rel", messages=[pb.Message(value=b"secret")]))

        replayed = (FORWARDED_KEY, f"http://127.0.0.1:{https[1]}"), (REPLICA_CERT_KEY, captured[0])
        for who in (bob, pki.dual):
            credentials = grpc.ssl_channel_credentials(
                pki.ca.read_bytes(), who.key.read_bytes(), who.cert.read_bytes()
            )
            async with grpc.aio.secure_channel(owner.server.address, credentials) as channel:
                stub = gateway_pb2_grpc.GatewayServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.Poll(pb.PollRequest(**key, timeout_ms=1000), metadata=replayed)
                assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED, refused.value.details()
                assert "x-tubemq-replica-cert is not accepted" in (refused.value.details() or "")
        mine = await other.stub.Poll(pb.PollRequest(**key, timeout_ms=3000))
        assert [m.value for m in mine.messages] == [b"secret"]


async def test_relayed_subjects_cross_two_replicas_of_two_workers(tmp_path: Path) -> None:
    """Two replicas (``serve --workers 2`` each, mTLS required, sharing their certificate and one cluster):
    an mTLS caller's requests and calls through the replica that does not own its instance are served by
    the owner whichever worker they land on there (a relayed subject believed once, then carried over the
    hop to a sibling worker), REST and gRPC; another client's certificate reads nothing of it, and its own
    x-tubemq-replica-cert is refused 401 by every worker (it used to be ignored: 403 as itself)."""
    pki = make_pki(tmp_path / "pki")
    bob = issue_client(pki, "bob", "bob")
    files = write_mtls_auth_files(tmp_path, pki.client.subject.rfc4514_string())
    https, grpcs = [free_port(), free_port()], [free_port(), free_port()]
    async with EmbeddedCluster([TopicSpec("wr", 2)]) as cluster:
        environment = files.environment(
            TUBEMQ_GATEWAY_MASTERS=",".join(str(a) for a in cluster.master_addresses),
            TUBEMQ_GATEWAY_TLS__CERT_FILE=str(pki.dual.cert),
            TUBEMQ_GATEWAY_TLS__KEY_FILE=str(pki.dual.key),
            TUBEMQ_GATEWAY_TLS__CLIENT_CA_FILE=str(pki.ca),
            TUBEMQ_GATEWAY_TLS__CLIENT_AUTH="required",
            TUBEMQ_GATEWAY_AUTH__MTLS_PRINCIPAL="true",
            TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET="replica-shared-secret-0123456789",
            TUBEMQ_GATEWAY_CONSUMERS__REPLICAS="2",
            TUBEMQ_GATEWAY_CONSUMERS__FORWARD_ALLOW='["127.0.0.1"]',
            TUBEMQ_GATEWAY_CONSUMERS__FORWARD_PORTS=json.dumps(https + grpcs),
            TUBEMQ_GATEWAY_CONSUMERS__FORWARD_CA_FILE=str(pki.ca),
        )
        replicas = []
        try:
            for i in (0, 1):
                (tmp_path / f"r{i}").mkdir()
                own = {"TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL": f"https://127.0.0.1:{https[i]}"}
                replicas.append(
                    await asyncio.to_thread(
                        start_workers,
                        tmp_path / f"r{i}",
                        2,
                        "--http-port",
                        str(https[i]),
                        "--grpc-port",
                        str(grpcs[i]),
                        env={**environment, **own},
                    )
                )
            owner_url, other_url = (f"https://127.0.0.1:{p}" for p in https)
            async with httpx.AsyncClient(base_url=owner_url, verify=pki.client_context(pki.client)) as alice:
                created = await alice.post(
                    "/v1/consumers/wrg", json={"topics": ["wr"], "startPosition": "earliest"}
                )
                assert created.status_code == 201, created.text
                published = await alice.post("/v1/topics/wr/messages", json={"messages": [{"value": "w"}]})
                assert published.status_code == 200, published.text
            instance = created.json()["instanceId"]
            base = f"/v1/consumers/wrg/instances/{instance}"
            got: list[str] = []
            for _ in range(8):  # a new connection each: the kernel picks the worker on both replicas
                async with httpx.AsyncClient(
                    base_url=other_url, verify=pki.client_context(pki.client), timeout=15
                ) as via:
                    polled = await via.get(f"{base}/messages", params={"timeout_ms": 500, "format": "utf8"})
                    assert polled.status_code == 200, polled.text
                    got += [m["value"] for m in polled.json()["messages"]]
                async with httpx.AsyncClient(
                    base_url=other_url, verify=pki.client_context(bob), timeout=15
                ) as b:
                    assert (await b.get(f"{base}/messages", params={"timeout_ms": 0})).status_code == 403
                # a client's own relayed identity, on whichever worker of the owner: refused, saying why
                async with httpx.AsyncClient(
                    base_url=owner_url, verify=pki.client_context(bob), timeout=15
                ) as b:
                    headers = {
                        FORWARDED_HEADER: other_url,
                        REPLICA_CERT_KEY: "1796185305.bm9uY2U.Q049YQ.dGFn",
                    }
                    forged = await b.get(f"{base}/messages", params={"timeout_ms": 0}, headers=headers)
                    assert forged.status_code == 401 and REPLICA_CERT_KEY in forged.text, forged.text
            assert got == ["w"]
            credentials = grpc.ssl_channel_credentials(
                pki.ca.read_bytes(), pki.client.key.read_bytes(), pki.client.cert.read_bytes()
            )
            for _ in range(6):
                async with grpc.aio.secure_channel(f"127.0.0.1:{grpcs[1]}", credentials) as channel:
                    stub = gateway_pb2_grpc.GatewayServiceStub(channel)
                    await stub.Poll(pb.PollRequest(group="wrg", instance_id=instance, timeout_ms=0))
            refused = [
                r
                for g in replicas
                for r in g.records()
                if r.get("msg") == "relayed client certificate refused"
            ]
            assert len(refused) == 8  # bob's own, none of the replicas' relays
        finally:
            for served in replicas:
                served.stop()
