"""The embedded cluster: brokers + master (+ standby) on loopback, broker stop/restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec, parse_topic_specs
from gateway.tubemq.errors import StandbyException
from gateway.tubemq.net.connection import Connection
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.wire.meta import parse_subscribe_info
from gateway.tubemq.wire.pb import BrokerService_pb2 as bpb
from gateway.tubemq.wire.pb import MasterService_pb2 as pb
from gateway.tubemq.wire.rpc import Method


def heartbeat(checksum: int) -> pb.HeartRequestP2M:
    return pb.HeartRequestP2M(
        clientId="p1", brokerCheckSum=checksum, hostName="10.0.0.1", topicList=["demo", "orders"]
    )


async def test_cluster_serves_producers_through_its_master_and_fails_over_from_the_standby(
    network: MemoryNetwork,
    tmp_path: Path,
) -> None:
    cluster = EmbeddedCluster(
        parse_topic_specs("demo:4,orders:2:2"),
        brokers=2,
        data_dir=tmp_path,
        standby_master=True,
        start_server=network.start_server,
    )
    async with cluster:
        assert [b.broker_id for b in cluster.brokers] == [1, 2]
        assert all(b.is_serving for b in cluster.brokers)
        assert cluster.master_addresses == [cluster.standby.address, cluster.master_address]  # type: ignore[union-attr]
        assert (tmp_path / "broker-1").is_dir() and (tmp_path / "broker-2").is_dir()
        standby = Connection(cluster.master_addresses[0], connector=network.create_connection)
        active = Connection(cluster.master_address, connector=network.create_connection)
        await standby.connect(2.0)
        await active.connect(2.0)
        try:
            register = pb.RegisterRequestP2M(clientId="p1", brokerCheckSum=-1, hostName="10.0.0.1")
            with pytest.raises(StandbyException):
                await standby.request(Method.PRODUCER_REGISTER, register, 2.0)
            answer = await active.request(Method.PRODUCER_REGISTER, register, 2.0)
            assert isinstance(answer, pb.RegisterResponseM2P) and answer.success
            assert list(answer.brokerInfos) == [f"{b.broker_id}:{b.address}" for b in cluster.brokers]
            beat = await active.request(Method.PRODUCER_HEARTBEAT, heartbeat(answer.brokerCheckSum), 2.0)
            assert isinstance(beat, pb.HeartResponseM2P)
            assert list(beat.topicInfos) == ["demo#1:4:1,2:4:1#", "orders#1:2:2,2:2:2#"]

            port = cluster.broker(2).address.port
            await cluster.stop_broker(2)
            assert not cluster.broker(2).is_serving
            stopped = await active.request(Method.PRODUCER_HEARTBEAT, heartbeat(beat.brokerCheckSum), 2.0)
            assert isinstance(stopped, pb.HeartResponseM2P)
            assert stopped.brokerCheckSum > beat.brokerCheckSum and len(stopped.brokerInfos) == 2
            assert list(stopped.topicInfos) == ["demo#1:4:1#", "orders#1:2:2#"]

            await cluster.start_broker(2)
            assert cluster.broker(2).address.port == port
            back = await active.request(Method.PRODUCER_HEARTBEAT, heartbeat(stopped.brokerCheckSum), 2.0)
            assert isinstance(back, pb.HeartResponseM2P) and back.brokerCheckSum > stopped.brokerCheckSum
            assert list(back.topicInfos) == list(beat.topicInfos)
        finally:
            await standby.close()
            await active.close()
    assert not any(b.is_serving for b in cluster.brokers)
    await cluster.stop()  # twice is fine


async def test_cluster_arguments_are_checked(network: MemoryNetwork) -> None:
    with pytest.raises(ValueError, match="at least one topic"):
        EmbeddedCluster([], start_server=network.start_server)
    with pytest.raises(ValueError, match="brokers must be"):
        EmbeddedCluster([TopicSpec("demo")], brokers=0, start_server=network.start_server)
    with pytest.raises(ValueError, match="2 brokers need 2 broker ports"):
        EmbeddedCluster([TopicSpec("demo")], brokers=2, broker_ports=[1], start_server=network.start_server)
    with pytest.raises(IndexError):
        EmbeddedCluster([TopicSpec("demo")], start_server=network.start_server).broker(2)


async def test_failed_start_stops_what_started(network: MemoryNetwork) -> None:
    async with EmbeddedCluster([TopicSpec("demo")], start_server=network.start_server) as first:
        taken = first.master_address.port
        clash = EmbeddedCluster([TopicSpec("demo")], master_port=taken, start_server=network.start_server)
        with pytest.raises(OSError):
            await clash.start()
        assert not clash.brokers[0].is_serving


async def test_assigned_partitions_can_be_registered_at_the_brokers_named_in_the_event(
    network: MemoryNetwork,
) -> None:
    async with EmbeddedCluster(
        [TopicSpec("demo", 2)], brokers=2, balance_period=0.02, start_server=network.start_server
    ) as cluster:
        master = Connection(cluster.master_address, connector=network.create_connection)
        await master.connect(2.0)
        links: dict[str, Connection] = {}
        try:
            register = pb.RegisterRequestC2M(
                clientId="c1", groupName="g", hostName="10.0.0.1", topicList=["demo"]
            )
            assert (await master.request(Method.CONSUMER_REGISTER, register, 2.0)).success  # type: ignore[attr-defined]
            beat = pb.HeartRequestC2M(clientId="c1", groupName="g", reportSubscribeInfo=False)
            async with asyncio.timeout(5.0):
                while True:
                    answer = await master.request(Method.CONSUMER_HEARTBEAT, beat, 2.0)
                    assert isinstance(answer, pb.HeartResponseM2C)
                    if answer.HasField("event"):
                        break
                    await asyncio.sleep(0.02)
            assert answer.event.opType == 10
            parts = [parse_subscribe_info(text).partition for text in answer.event.subscribeInfo]
            assert sorted(p.partition_key for p in parts) == ["1:demo:0", "1:demo:1", "2:demo:0", "2:demo:1"]
            for part in parts:
                address = part.broker.address
                assert address == cluster.broker(part.broker.broker_id).address
                link = links.get(str(address))
                if link is None:
                    link = links[str(address)] = Connection(address, connector=network.create_connection)
                    await link.connect(2.0)
                request = bpb.RegisterRequestC2B(
                    opType=31,
                    clientId="c1",
                    groupName="g",
                    topicName=part.topic,
                    partitionId=part.partition_id,
                    readStatus=0,
                )
                registered = await link.request(Method.CONSUMER_BROKER_REGISTER, request, 2.0)
                assert isinstance(registered, bpb.RegisterResponseB2C) and registered.errCode == 200
        finally:
            await master.close()
            for link in links.values():
                await link.close()
