"""TLS to TubeMQ masters and brokers: the ``tubemq.tls`` settings, the pool, producer, consumer and gateway
against an embedded cluster listening with TLS (certificates made in the test), over real sockets."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from gateway.api.app import create_app
from gateway.config import Settings, TubeMQSettings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import StartPosition
from gateway.tubemq.errors import ConnectError, TransportError
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.link import ConnectionOpened
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.producer.routes import RouteTable
from gateway.tubemq.wire.meta import default_broker_port, parse_broker_info
from gateway.upstream import DEFAULT_MASTER_TLS_PORT, upstream_options
from tests.support.consumer_support import bodies_of, drain, fast
from tests.support.tls_support import Pki, make_pki

TOPICS = [TopicSpec("secure", 2)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), name="tubemq")


@pytest.fixture(scope="module")
def foreign_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("foreign"), name="foreign")


@pytest.fixture
async def tls_cluster(pki: Pki) -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster(TOPICS, brokers=2, ssl=pki.server_context()) as cluster:
        yield cluster


def tls_pool(events: EventBus | None = None, **tls: object) -> ConnectionPool:
    upstream = upstream_options(TubeMQSettings.model_validate({"tls": {"enabled": True, **tls}}))
    return ConnectionPool(connect_timeout=2.0, events=events, **upstream.pool_kwargs())  # type: ignore[arg-type]


async def test_producer_and_consumer_talk_tls_to_the_master_and_every_broker(
    tls_cluster: EmbeddedCluster, pki: Pki
) -> None:
    events = EventBus()
    opened: list[ConnectionOpened] = []
    events.subscribe(opened.append, ConnectionOpened)  # type: ignore[arg-type]
    pool = tls_pool(events, ca_file=str(pki.ca))
    producer = Producer(
        [tls_cluster.master_address], pool=pool, config=ProducerConfig(heartbeat_interval=0.2)
    )
    consumer = Consumer(
        [tls_cluster.master_address],
        "tls-group",
        {"secure": None},
        pool=pool,
        config=fast(start_position=StartPosition.EARLIEST),
    )
    try:
        await producer.start()
        await producer.register_topic("secure")
        sent = [f"m{i}".encode() for i in range(20)]
        for body in sent:
            await producer.send("secure", body)
        await consumer.start()
        assert await consumer.wait_for_assignment(5.0)
        assert sorted(bodies_of(await drain(consumer, len(sent)))) == sorted(sent)
    finally:
        await consumer.close()
        await producer.close()
        await pool.close()
    nodes = {tls_cluster.master_address} | {b.address for b in tls_cluster.brokers}
    assert {event.address for event in opened} == nodes
    assert all(event.tls for event in opened)


async def test_a_certificate_from_another_ca_fails_cleanly(
    tls_cluster: EmbeddedCluster, foreign_pki: Pki
) -> None:
    pool = tls_pool(ca_file=str(foreign_pki.ca))
    producer = Producer([tls_cluster.master_address], pool=pool)
    try:
        with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await producer.start()
    finally:
        await producer.close()
        await pool.close()


async def test_plain_tcp_to_a_tls_port_fails_instead_of_hanging(tls_cluster: EmbeddedCluster) -> None:
    pool = ConnectionPool(connect_timeout=2.0)
    producer = Producer([tls_cluster.master_address], pool=pool, config=ProducerConfig(rpc_timeout=1.0))
    try:
        with pytest.raises(TransportError):
            await producer.start()
    finally:
        await producer.close()
        await pool.close()


async def test_verify_off_accepts_any_certificate(tls_cluster: EmbeddedCluster, foreign_pki: Pki) -> None:
    pool = tls_pool(ca_file=str(foreign_pki.ca), verify=False)
    producer = Producer([tls_cluster.master_address], pool=pool)
    try:
        await producer.start()
        assert producer.registered
    finally:
        await producer.close()
        await pool.close()


async def test_server_hostname_is_the_name_the_certificate_must_carry(
    tls_cluster: EmbeddedCluster, pki: Pki
) -> None:
    for name, works in (("tubemq.test", True), ("not-in-the-certificate.test", False)):
        pool = tls_pool(ca_file=str(pki.ca), server_hostname=name)
        producer = Producer([tls_cluster.master_address], pool=pool)
        try:
            if works:
                await producer.start()
                assert producer.registered
            else:
                with pytest.raises(ConnectError, match=r"CERTIFICATE_VERIFY_FAILED|match"):
                    await producer.start()
        finally:
            await producer.close()
            await pool.close()


async def test_two_way_tls_presents_the_client_certificate(pki: Pki) -> None:
    server = pki.server_context(require_client_cert=True)
    async with EmbeddedCluster(TOPICS, ssl=server) as cluster:
        with_cert = tls_pool(
            ca_file=str(pki.ca), cert_file=str(pki.client.cert), key_file=str(pki.client.key)
        )
        without = tls_pool(ca_file=str(pki.ca))
        good = Producer([cluster.master_address], pool=with_cert)
        bad = Producer([cluster.master_address], pool=without, config=ProducerConfig(rpc_timeout=2.0))
        try:
            await good.start()
            await good.register_topic("secure")
            await good.send("secure", b"mutual")
            with pytest.raises(Exception, match=r"(?i)certificate|closed|reset|eof|timed out"):
                await bad.start()
        finally:
            await good.close()
            await bad.close()
            await with_cert.close()
            await without.close()


async def test_the_gateway_publishes_and_reads_ranges_over_tls(
    tls_cluster: EmbeddedCluster, pki: Pki
) -> None:
    settings = Settings(
        masters=",".join(str(a) for a in tls_cluster.master_addresses),
        producer={"heartbeat_interval": 0.5},
        tubemq={"tls": {"enabled": True, "ca_file": str(pki.ca)}},
    )
    runtime = Runtime(settings)
    await runtime.start()
    try:
        assert runtime.pool is not None and runtime.pool.tls
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
            answer = await http.post("/v1/topics/secure/messages", json={"messages": [{"value": "over tls"}]})
            assert answer.status_code == 200, answer.text
            parts = await http.get("/v1/topics/secure/partitions")
            assert parts.status_code == 200, parts.text
            values = []
            for part in parts.json()["partitions"]:
                key, end = part["partitionKey"], part["maxOffset"]
                url = f"/v1/topics/secure/partitions/{key}/messages"
                page = await http.get(url, params={"from": 0, "to": end})
                assert page.status_code == 200, page.text
                values += [base64.b64decode(m["value"]) for m in page.json()["messages"]]
            assert values == [b"over tls"]
    finally:
        await runtime.stop()


def test_a_tls_master_list_defaults_to_the_tls_ports() -> None:
    # Java's DataConverterUtil: a blank broker port is 8124 on the list a master sends over TLS.
    assert default_broker_port(tls=True) == 8124 and default_broker_port(tls=False) == 8123
    table = RouteTable(default_port=default_broker_port(True))
    assert parse_broker_info("1:127.0.0.1: ", table.default_port).port == 8124
    options = upstream_options(TubeMQSettings.model_validate({"tls": {"enabled": True}}))
    assert options.master_port == DEFAULT_MASTER_TLS_PORT == 8716
    assert options.ssl is not None and options.ssl.verify_mode == ssl.CERT_REQUIRED


async def test_a_producer_on_a_tls_pool_reads_blank_broker_ports_as_8124(pki: Pki) -> None:
    pool = tls_pool(ca_file=str(pki.ca))
    try:
        producer = Producer([parse_broker_info("1:127.0.0.1:8716").address], pool=pool)
        assert producer._routes.default_port == 8124  # the wiring under test
        plain = Producer([parse_broker_info("1:127.0.0.1:8715").address], pool=ConnectionPool())
        assert plain._routes.default_port == 8123
    finally:
        await pool.close()


def test_bad_tls_settings_name_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"key_file is set without tubemq\.tls\.cert_file"):
        TubeMQSettings.model_validate({"tls": {"enabled": True, "key_file": str(tmp_path / "k.pem")}})
    missing = TubeMQSettings.model_validate({"tls": {"enabled": True, "ca_file": str(tmp_path / "none.pem")}})
    with pytest.raises(ValueError, match=r"tubemq.tls.ca_file .*none.pem"):
        upstream_options(missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    bad_cert = TubeMQSettings.model_validate({"tls": {"enabled": True, "cert_file": str(garbage)}})
    with pytest.raises(ValueError, match=r"tubemq\.tls\.cert_file"):
        upstream_options(bad_cert)
    assert upstream_options(TubeMQSettings()).ssl is None


def test_tls_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, pki: Pki) -> None:
    monkeypatch.setenv("TUBEMQ_GATEWAY_TUBEMQ__TLS__ENABLED", "true")
    monkeypatch.setenv("TUBEMQ_GATEWAY_TUBEMQ__TLS__CA_FILE", str(pki.ca))
    monkeypatch.setenv("TUBEMQ_GATEWAY_TUBEMQ__TLS__SERVER_HOSTNAME", "tubemq.test")
    tls = Settings().tubemq.tls
    assert tls.enabled and tls.ca_file == pki.ca and tls.server_hostname == "tubemq.test" and tls.verify
