"""gRPC consumer calls relayed between replicas (issue #23 row 2): behind a gRPC load balancer a call may land
on any replica; one for an instance another replica owns is relayed there with the rules of REST forwarding
(a verified id, ``forward_allow`` and ``forward_ports``, the caller authenticated again at the owner, never
relayed twice), and an owner that is gone is told as FAILED_PRECONDITION (REST's 410)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc
import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.replicas import FORWARDED_KEY
from gateway.security.replica_subject import REPLICA_CERT_KEY, ReplicaSubjects, certificate_digest
from gateway.service.instance_id import decode_instance_id
from tests.support.auth_support import AuthFiles, write_auth_files, write_mtls_auth_files
from tests.support.replica_support import SECRET, mtls_replica_pair, replica
from tests.support.serving import free_port
from tests.support.tls_support import make_pki


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[EmbeddedCluster]:
    cluster = EmbeddedCluster([TopicSpec("rel", 2), TopicSpec("relretry", 1)])
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
def files(tmp_path: Path) -> AuthFiles:
    return write_auth_files(tmp_path)


def _ports() -> tuple[list[int], list[int]]:
    return [free_port(), free_port()], [free_port(), free_port()]


async def _failure(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def test_consumer_calls_on_either_replica_reach_the_owner(
    cluster: EmbeddedCluster, files: AuthFiles
) -> None:
    https, grpcs = _ports()
    allow = {"forward_allow": ["127.0.0.1"], "forward_ports": https + grpcs}
    async with AsyncExitStack() as stack:
        owner = await stack.enter_async_context(replica(cluster, files, https[0], grpcs[0], **allow))
        other = await stack.enter_async_context(replica(cluster, files, https[1], grpcs[1], **allow))
        alice, bob = files.metadata("alice"), files.metadata("bob")
        created = await owner.stub.CreateConsumer(
            pb.CreateConsumerRequest(group="rg", topics=["rel"], start_position=pb.START_POSITION_EARLIEST),
            metadata=alice,
        )
        instance = created.instance_id
        assert decode_instance_id("rg", instance, SECRET.encode()).grpc_port == grpcs[0]
        await other.stub.Publish(
            pb.PublishRequest(topic="rel", messages=[pb.Message(value=f"v{i}".encode()) for i in range(5)]),
            metadata=alice,
        )
        polled = await other.stub.Poll(
            pb.PollRequest(group="rg", instance_id=instance, timeout_ms=5000, max_messages=5), metadata=alice
        )
        assert sorted(m.value for m in polled.messages) == [f"v{i}".encode() for i in range(5)]
        assert owner.runtime.consumer_service().instance_count == 1
        assert other.runtime.consumer_service().instance_count == 0
        committed = await other.stub.Commit(
            pb.CommitRequest(group="rg", instance_id=instance, tokens=[polled.messages[0].token]),
            metadata=alice,
        )
        assert committed.committed == 1 and committed.pending == 4

        # the owner authenticates the relayed call again: bob's key is valid, but the instance is alice's
        foreign = await _failure(
            other.stub.Poll(pb.PollRequest(group="rg", instance_id=instance, timeout_ms=0), metadata=bob)
        )
        assert foreign.code() is grpc.StatusCode.NOT_FOUND
        anonymous = await _failure(other.stub.Poll(pb.PollRequest(group="rg", instance_id=instance)))
        assert anonymous.code() is grpc.StatusCode.UNAUTHENTICATED

        # Subscribe is relayed message by message
        stream = other.stub.Subscribe(pb.SubscribeRequest(group="rg", instance_id=instance), metadata=alice)
        first = await asyncio.wait_for(stream.read(), 10)
        assert isinstance(first, pb.SubscribeResponse) and first.messages
        stream.cancel()

        # a call another replica relayed is never relayed again
        relayed = (*alice, (FORWARDED_KEY, f"http://127.0.0.1:{https[0]}"))
        twice = await _failure(
            other.stub.Poll(pb.PollRequest(group="rg", instance_id=instance, timeout_ms=0), metadata=relayed)
        )
        assert twice.code() is grpc.StatusCode.FAILED_PRECONDITION

        deleted = other.stub.DeleteConsumer(
            pb.DeleteConsumerRequest(group="rg", instance_id=instance), metadata=alice
        )
        await deleted
        assert owner.runtime.consumer_service().instance_count == 0
        gone = await _failure(
            other.stub.Poll(pb.PollRequest(group="rg", instance_id=instance, timeout_ms=0), metadata=alice)
        )
        assert gone.code() is grpc.StatusCode.FAILED_PRECONDITION

        # the owner goes away: its instances' clients are told FAILED_PRECONDITION through the other
        again = await owner.stub.CreateConsumer(
            pb.CreateConsumerRequest(group="rg", topics=["rel"]), metadata=alice
        )
        await owner.server.stop(0)
        lost = await _failure(
            other.stub.Poll(
                pb.PollRequest(group="rg", instance_id=again.instance_id, timeout_ms=0), metadata=alice
            )
        )
        assert lost.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "cannot be reached" in (lost.details() or "")


async def test_nack_deadlines_and_seek_on_either_replica_reach_the_owner(
    cluster: EmbeddedCluster, files: AuthFiles
) -> None:
    """The consumer calls of #25 (Nack, ExtendDeadlines, Seek) are relayed like Poll and Commit, and the owner
    checks ownership again (another principal's key: NOT_FOUND)."""
    https, grpcs = _ports()
    allow = {"forward_allow": ["127.0.0.1"], "forward_ports": https + grpcs}
    async with AsyncExitStack() as stack:
        owner = await stack.enter_async_context(replica(cluster, files, https[0], grpcs[0], **allow))
        other = await stack.enter_async_context(replica(cluster, files, https[1], grpcs[1], **allow))
        alice, bob = files.metadata("alice"), files.metadata("bob")
        created = await owner.stub.CreateConsumer(
            pb.CreateConsumerRequest(
                group="rn", topics=["rel"], start_position=pb.START_POSITION_EARLIEST, retry_topic="relretry"
            ),
            metadata=alice,
        )
        key = {"group": "rn", "instance_id": created.instance_id}
        await other.stub.Publish(
            pb.PublishRequest(topic="rel", messages=[pb.Message(value=f"n{i}".encode()) for i in range(3)]),
            metadata=alice,
        )
        got: list[Any] = []
        async with asyncio.timeout(15):
            while len(got) < 3:
                got += (await other.stub.Poll(pb.PollRequest(**key, timeout_ms=500), metadata=alice)).messages
        extended = await other.stub.ExtendDeadlines(
            pb.ExtendDeadlinesRequest(**key, tokens=[got[0].token], extend_ms=5000), metadata=alice
        )
        assert extended.extended == 1
        nacked = await other.stub.Nack(pb.NackRequest(**key, tokens=[got[1].token]), metadata=alice)
        assert (nacked.retried, list(nacked.failed)) == (1, [])
        seeked = await other.stub.Seek(
            pb.SeekRequest(**key, position=pb.START_POSITION_EARLIEST), metadata=alice
        )
        assert seeked.partitions and {p.curr_offset for p in seeked.partitions} == {0}
        for method, request in (
            ("Nack", pb.NackRequest(**key, tokens=[got[2].token])),
            ("ExtendDeadlines", pb.ExtendDeadlinesRequest(**key, tokens=[got[2].token], extend_ms=1000)),
            ("Seek", pb.SeekRequest(**key, position=pb.START_POSITION_LATEST)),
        ):
            foreign = await _failure(getattr(other.stub, method)(request, metadata=bob))
            assert foreign.code() is grpc.StatusCode.NOT_FOUND, method
        await other.stub.DeleteConsumer(pb.DeleteConsumerRequest(**key), metadata=alice)
        assert owner.runtime.consumer_service().instance_count == 0


async def test_no_relay_where_forwarding_may_not_reach(cluster: EmbeddedCluster, files: AuthFiles) -> None:
    https, grpcs = _ports()
    # the owner's HTTP port is allowed, its gRPC port is not
    allow = {"forward_allow": ["127.0.0.1"], "forward_ports": https}
    async with AsyncExitStack() as stack:
        owner = await stack.enter_async_context(replica(cluster, files, https[0], grpcs[0], **allow))
        other = await stack.enter_async_context(replica(cluster, files, https[1], grpcs[1], **allow))
        alice = files.metadata("alice")
        created = await owner.stub.CreateConsumer(
            pb.CreateConsumerRequest(group="rn", topics=["rel"]), metadata=alice
        )
        refused = await _failure(
            other.stub.Poll(
                pb.PollRequest(group="rn", instance_id=created.instance_id, timeout_ms=0), metadata=alice
            )
        )
        assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "may not relay" in (refused.details() or "")
        assert owner.runtime.consumer_service().instance_count == 1


async def test_the_relay_presents_the_replicas_certificate_where_listeners_require_one(
    cluster: EmbeddedCluster, files: AuthFiles, tmp_path: Path
) -> None:
    """With ``tls.client_auth: required`` the replicas' listeners ask every client for a certificate, the
    relaying replica too: it presents the replicas' own certificate, as REST forwarding does (the relay
    presented none: its TLS handshake failed and every relayed call was told the owner is gone)."""
    pki = make_pki(tmp_path / "pki")
    https, grpcs = _ports()
    allow = {"forward_allow": ["127.0.0.1"], "forward_ports": https + grpcs}
    async with AsyncExitStack() as stack:
        owner = await stack.enter_async_context(replica(cluster, files, https[0], grpcs[0], pki=pki, **allow))
        other = await stack.enter_async_context(replica(cluster, files, https[1], grpcs[1], pki=pki, **allow))
        alice = files.metadata("alice")
        created = await owner.stub.CreateConsumer(
            pb.CreateConsumerRequest(group="rt", topics=["rel"], start_position=pb.START_POSITION_EARLIEST),
            metadata=alice,
        )
        await other.stub.Publish(
            pb.PublishRequest(topic="rel", messages=[pb.Message(value=b"t")]), metadata=alice
        )
        polled = await other.stub.Poll(
            pb.PollRequest(group="rt", instance_id=created.instance_id, timeout_ms=5000), metadata=alice
        )
        assert [m.value for m in polled.messages] == [b"t"]
        await other.stub.DeleteConsumer(
            pb.DeleteConsumerRequest(group="rt", instance_id=created.instance_id), metadata=alice
        )
        assert owner.runtime.consumer_service().instance_count == 0


async def test_a_client_certificate_principal_reaches_its_instance_on_either_replica(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    """An mTLS caller's call relayed to the owner carries its verified subject, signed with the replicas'
    secret: the owner serves it as that caller (it saw the replicas' own certificate, mtls:CN=replica,
    and answered PERMISSION_DENIED). A forged subject, or one on a connection without the certificate of
    the replica that signed it, is refused (UNAUTHENTICATED)."""
    pki = make_pki(tmp_path / "pki")
    subject = pki.client.subject.rfc4514_string()
    files = write_mtls_auth_files(tmp_path, subject)
    https, grpcs = _ports()
    async with mtls_replica_pair(cluster, files, pki, https, grpcs) as (owner, other):
        created = await owner.stub.CreateConsumer(
            pb.CreateConsumerRequest(group="rm", topics=["rel"], start_position=pb.START_POSITION_EARLIEST)
        )
        key = {"group": "rm", "instance_id": created.instance_id}
        await other.stub.Publish(pb.PublishRequest(topic="rel", messages=[pb.Message(value=b"c")]))
        polled = await other.stub.Poll(pb.PollRequest(**key, timeout_ms=5000))
        assert [m.value for m in polled.messages] == [b"c"]
        committed = await other.stub.Commit(pb.CommitRequest(**key, all_delivered=True))
        assert committed.committed == 1
        # on a connection with the replicas' certificate: the subject believed only signed with their secret
        replica_cert = grpc.ssl_channel_credentials(
            pki.ca.read_bytes(), pki.dual.key.read_bytes(), pki.dual.cert.read_bytes()
        )
        async with grpc.aio.secure_channel(owner.server.address, replica_cert) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            forwarded = (FORWARDED_KEY, f"http://127.0.0.1:{https[1]}")
            owner_url, poll = f"http://127.0.0.1:{https[0]}", "/tubemq.gateway.v1.GatewayService/Poll"
            dual = certificate_digest(pki.dual.cert.read_text())
            forger = ReplicaSubjects(b"not-the-replicas-secret-0123456789", owner_url, dual)
            forged = (REPLICA_CERT_KEY, forger.sign(subject, audience=owner_url, request=poll) or "")
            refused = await _failure(
                stub.Poll(pb.PollRequest(**key, timeout_ms=0), metadata=(forwarded, forged))
            )
            assert refused.code() is grpc.StatusCode.UNAUTHENTICATED, refused.details()
            assert REPLICA_CERT_KEY in (refused.details() or "")
            relaying = other.runtime.replica_subjects
            assert relaying is not None
            signed = (REPLICA_CERT_KEY, relaying.sign(subject, audience=owner_url, request=poll) or "")
            await stub.Poll(pb.PollRequest(**key, timeout_ms=0), metadata=(forwarded, signed))
            # without the replicas' certificate on the connection (the replicas' own listener's client)
            fresh = (REPLICA_CERT_KEY, relaying.sign(subject, audience=owner_url, request=poll) or "")
            unsigned = await _failure(
                owner.stub.Poll(pb.PollRequest(**key, timeout_ms=0), metadata=(forwarded, fresh))
            )
            assert unsigned.code() is grpc.StatusCode.UNAUTHENTICATED
        await other.stub.DeleteConsumer(pb.DeleteConsumerRequest(**key))
        assert owner.runtime.consumer_service().instance_count == 0
