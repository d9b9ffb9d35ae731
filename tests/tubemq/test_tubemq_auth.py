"""TubeMQ client authentication (§9): the Java client's signature, credentials on every master call and the
broker token on broker calls, against an embedded cluster that verifies them, over real sockets."""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.api.app import create_app
from gateway.config import Settings, TubeMQSettings
from gateway.embedded.auth import ServerAuth
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.service.consumers import ConsumerService, InstanceSpec
from gateway.service.errors import UpstreamError
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.consumer.config import StartPosition
from gateway.tubemq.errors import CertificateFailure
from gateway.tubemq.events import EventBus
from gateway.tubemq.net.master import MasterClient
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.producer.master_requests import build_heartbeat_request, build_register_request
from gateway.tubemq.producer.send_request import SendRequestTemplate
from gateway.tubemq.ranges.partitions import discover_partitions
from gateway.tubemq.ranges.reader import RangeReader
from gateway.tubemq.wire.auth import Credentials, auth_signature, parse_broker_token
from gateway.tubemq.wire.payload import encode_payload
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import Method
from gateway.upstream import upstream_options
from tests.support.consumer_support import bodies_of, drain, fast

TOPICS = [TopicSpec("guarded", 2)]
USER, PASSWORD = "gateway", "s3cret-pa55"


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedCluster]:
    auth = ServerAuth(Credentials(USER, PASSWORD))
    async with EmbeddedCluster(TOPICS, brokers=2, balance_period=0.1, auth=auth) as running:
        yield running


def authed_pool(username: str = USER, password: str = PASSWORD) -> ConnectionPool:
    return ConnectionPool(credentials=Credentials(username, password))


# --- the signature ------------------------------------------------------------------------------------


def test_the_signature_is_the_java_clients() -> None:
    # The protocol doc's vector (TStringUtils.getAuthSignature: URL-encoded Base64 of HMAC-SHA1).
    assert auth_signature("admin", "secret", 1700000000000, 12345) == "GzIEn3jIHQZaZeKFky5I832KCzg%3D"


@given(
    user=st.text(
        st.characters(min_codepoint=33, max_codepoint=0x2FFF, exclude_categories=("Z", "C")),
        min_size=1,
        max_size=20,
    ),
    password=st.text(min_size=1, max_size=30),
    timestamp=st.integers(0, 2**62),
    nonce=st.integers(0, 2**31 - 2),
)
def test_credentials_verify_what_they_sign_and_nothing_else(
    user: str, password: str, timestamp: int, nonce: int
) -> None:
    credentials = Credentials(user, password)
    _, _, signature = credentials.signed(timestamp, nonce)
    assert credentials.verify(user, timestamp, nonce, signature)
    assert not credentials.verify(user, timestamp + 1, nonce, signature)
    assert not Credentials(user, password + "x").verify(user, timestamp, nonce, signature)
    token = f"{user} {timestamp} {nonce} {signature}"
    assert parse_broker_token(token) == (user, timestamp, nonce, signature)
    assert "%" not in signature.replace("%2B", "").replace("%2F", "").replace("%3D", "")


def test_the_password_never_shows() -> None:
    credentials = Credentials(USER, PASSWORD)
    assert PASSWORD not in repr(credentials) and PASSWORD not in str(credentials)
    settings = TubeMQSettings.model_validate({"auth": {"username": USER, "password": PASSWORD}})
    assert PASSWORD not in repr(settings) and PASSWORD not in settings.model_dump_json()
    assert pickle.loads(pickle.dumps(credentials)) == credentials
    assert Credentials("u", "pässwort") == Credentials("u", "pässwort") != Credentials("u", "passwort")


def test_auth_settings_need_both_fields() -> None:
    with pytest.raises(ValidationError, match="both username and password"):
        TubeMQSettings.model_validate({"auth": {"username": USER}})
    with pytest.raises(ValidationError, match="both username and password"):
        TubeMQSettings.model_validate({"auth": {"password": PASSWORD}})
    assert upstream_options(TubeMQSettings()).credentials is None
    with pytest.raises(ValueError, match=r"tubemq\.auth: .*spaces"):
        upstream_options(TubeMQSettings.model_validate({"auth": {"username": "a b", "password": "p"}}))


def test_auth_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUBEMQ_GATEWAY_TUBEMQ__AUTH__USERNAME", USER)
    monkeypatch.setenv("TUBEMQ_GATEWAY_TUBEMQ__AUTH__PASSWORD", PASSWORD)
    credentials = upstream_options(Settings().tubemq).credentials
    assert credentials == Credentials(USER, PASSWORD)


# --- against the embedded cluster ---------------------------------------------------------------------


async def test_producer_and_consumer_authenticate_to_master_and_brokers(cluster: EmbeddedCluster) -> None:
    pool = authed_pool()
    masters = [cluster.master_address]
    events = EventBus()
    failures: list[object] = []
    events.subscribe(lambda event: failures.append(event) if "Failed" in type(event).__name__ else None)
    producer = Producer(masters, pool=pool, config=ProducerConfig(heartbeat_interval=0.1), events=events)
    consumer = Consumer(
        masters,
        "auth-group",
        {"guarded": None},
        pool=pool,
        config=fast(start_position=StartPosition.EARLIEST),
        events=events,
    )
    try:
        await producer.start()
        await producer.register_topic("guarded")
        sent = [f"m{i}".encode() for i in range(20)]
        for body in sent:
            await producer.send("guarded", body)
        await consumer.start()
        assert await consumer.wait_for_assignment(5.0)
        got = await drain(consumer, len(sent))
        assert sorted(bodies_of(got)) == sorted(sent)
        await asyncio.sleep(0.5)  # several master and broker heartbeats, each with fresh credentials
        assert producer.registered and failures == []
    finally:
        await consumer.close()
        await producer.close()
        await pool.close()


async def test_range_reads_authenticate_too(cluster: EmbeddedCluster) -> None:
    pool = authed_pool()
    producer = Producer([cluster.master_address], pool=pool)
    try:
        await producer.start()
        await producer.register_topic("guarded")
        result = await producer.send("guarded", b"ranged", partition=0)
        master = MasterClient([cluster.master_address], pool)
        layout = await discover_partitions(
            master, "guarded", client_id="range-1", group="range_group", host_name="127.0.0.1"
        )
        reader = RangeReader(pool, group_prefix="authrange", rpc_timeout=2.0)
        reader.visit_token = layout.visit_token
        partition = next(p for p in layout.partitions if p.partition_key == result.partition_key)
        bounds = await reader.bounds(partition)
        bodies = [
            m.body
            async for batch in reader.read(partition, bounds.min_offset, bounds.max_offset)
            for m in batch.messages
        ]
        assert b"ranged" in bodies
    finally:
        await producer.close()
        await pool.close()


async def test_a_wrong_password_is_refused_with_415(cluster: EmbeddedCluster) -> None:
    pool = authed_pool(password="wrong")
    producer = Producer([cluster.master_address], pool=pool)
    consumer = Consumer([cluster.master_address], "auth-group", {"guarded": None}, pool=pool, config=fast())
    try:
        with pytest.raises(CertificateFailure) as refused:
            await producer.start()
        assert refused.value.errno == 415
        assert "Illegal value: userName or password is not correct!" in str(refused.value)
        assert "set the TubeMQ user name and password" in str(refused.value)
        with pytest.raises(CertificateFailure, match="userName or password is not correct"):
            await consumer.start()
    finally:
        await consumer.close()
        await producer.close()
        await pool.close()


async def test_the_master_answers_like_the_real_one(cluster: EmbeddedCluster) -> None:
    async with ConnectionPool() as pool:

        async def register(
            certificate: master_pb.MasterCertificateInfo | None,
        ) -> master_pb.RegisterResponseM2P:
            request = build_register_request(
                "p-1", "127.0.0.1", broker_checksum=-1, config_id=-2, topics=["guarded"]
            )
            if certificate is not None:
                request.authInfo.CopyFrom(certificate)
            answer = await pool.request(cluster.master_address, Method.PRODUCER_REGISTER, request, 2.0)
            assert isinstance(answer, master_pb.RegisterResponseM2P)
            return answer

        def certificate(
            user: str = USER, password: str = PASSWORD, age_ms: int = 0
        ) -> master_pb.MasterCertificateInfo:
            credentials = Credentials(user, password)
            timestamp, nonce, signature = credentials.signed(credentials.signed()[0] - age_ms)
            info = master_pb.AuthenticateInfo(
                userName=user, timestamp=timestamp, nonce=nonce, othParams="", signature=signature
            )
            return master_pb.MasterCertificateInfo(authInfo=info)

        cases = [
            (None, "Illegal value: authInfo.userName is Blank!"),
            (
                master_pb.MasterCertificateInfo(authorizedToken="t"),
                "Illegal value: authInfo.userName is Blank!",
            ),
            (certificate("intruder"), "Illegal value: userName is not equal in authenticateToken!"),
            (
                certificate(age_ms=25_000),
                "Illegal value: timestamp out of effective period in authenticateToken!",
            ),
            (certificate(password="guess"), "Illegal value: userName or password is not correct!"),
        ]
        for cert, message in cases:
            answer = await register(cert)
            assert (answer.success, answer.errCode, answer.errMsg, answer.brokerCheckSum) == (
                False,
                415,
                message,
                -1,
            )
        blank_signature = certificate()
        blank_signature.authInfo.signature = " "
        assert (await register(blank_signature)).errMsg == "Illegal value: authInfo.signature is Blank!"
        good = await register(certificate())
        assert good.success and good.errCode == 200 and good.authorizedInfo.visitAuthorizedToken > 0
        heartbeat = build_heartbeat_request(
            "p-1", "127.0.0.1", broker_checksum=-1, config_id=-2, topics=["guarded"]
        )
        answer = await pool.request(cluster.master_address, Method.PRODUCER_HEARTBEAT, heartbeat, 2.0)
        assert isinstance(answer, master_pb.HeartResponseM2P)
        assert (answer.errCode, answer.errMsg) == (415, "Illegal value: authInfo.userName is Blank!")


async def test_brokers_refuse_calls_without_a_valid_token(cluster: EmbeddedCluster) -> None:
    broker = cluster.broker(1)
    data, flag = encode_payload(b"x", None, None, None)

    def send(token: str | None) -> bytes:
        template = SendRequestTemplate("p-1", "guarded", sent_addr=0, visit_token=-2, auth_token=token)
        return template.encode(0, data, flag, None, None)

    good_token = Credentials(USER, PASSWORD).broker_token()
    forged = good_token.rsplit(" ", 1)[0] + " AAAA"
    async with ConnectionPool() as pool:
        expected = [
            (None, "authAuthorizedToken is Blank!"),
            (forged, "Illegal value: userName or password is not correct!"),
            ("not a token", "Illegal value: userName or password is not correct!"),
        ]
        for token, message in expected:
            answer = await pool.request(broker.address, Method.SEND_MESSAGE, send(token), 2.0)
            assert isinstance(answer, broker_pb.SendMessageResponseB2P)
            assert (answer.success, answer.errCode, answer.errMsg) == (False, 415, message)
        answer = await pool.request(broker.address, Method.SEND_MESSAGE, send(good_token), 2.0)
        assert isinstance(answer, broker_pb.SendMessageResponseB2P)
        assert answer.success and answer.errCode == 200
        register = broker_pb.RegisterRequestC2B(
            opType=31, clientId="c-1", groupName="g", topicName="guarded", partitionId=0, readStatus=0
        )
        register.authInfo.visitAuthorizedToken = -2
        answer = await pool.request(broker.address, Method.CONSUMER_BROKER_REGISTER, register, 2.0)
        assert isinstance(answer, broker_pb.RegisterResponseB2C)
        assert (answer.errCode, answer.errMsg, answer.currOffset) == (
            415,
            "authAuthorizedToken is Blank!",
            -1,
        )


async def test_a_cluster_without_auth_ignores_credentials() -> None:
    async with EmbeddedCluster(TOPICS) as plain:
        pool = authed_pool()
        producer = Producer([plain.master_address], pool=pool)
        try:
            await producer.start()
            await producer.register_topic("guarded")
            await producer.send("guarded", b"fine")
        finally:
            await producer.close()
            await pool.close()


# --- through the gateway ------------------------------------------------------------------------------


def gateway_settings(cluster: EmbeddedCluster, password: str) -> Settings:
    return Settings(
        masters=",".join(str(a) for a in cluster.master_addresses),
        producer={"heartbeat_interval": 0.5},
        consumers={"heartbeat_interval": 0.1, "assignment_wait": 5.0},
        tubemq={"auth": {"username": USER, "password": password}},
    )


async def test_the_gateway_publishes_and_consumes_with_credentials(
    cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    runtime = Runtime(gateway_settings(cluster, PASSWORD))
    await runtime.start()
    try:
        app = create_app(runtime=runtime)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
            answer = await http.post("/v1/topics/guarded/messages", json={"messages": [{"value": "signed"}]})
            assert answer.status_code == 200, answer.text
            body = {"topics": ["guarded"], "startPosition": "earliest", "autoCommit": True}
            created = await http.post("/v1/consumers/gw-auth", json=body)
            assert created.status_code == 201, created.text
            instance = created.json()["instanceId"]
            url = f"/v1/consumers/gw-auth/instances/{instance}/messages"
            got = await http.get(url, params={"timeout_ms": 5000})
            assert got.status_code == 200, got.text
            assert [m["value"] for m in got.json()["messages"]] == ["c2lnbmVk"]  # base64 of "signed"
    finally:
        await runtime.stop()
    assert PASSWORD not in caplog.text


async def test_the_gateway_refuses_to_start_with_a_wrong_password(cluster: EmbeddedCluster) -> None:
    runtime = Runtime(gateway_settings(cluster, "wrong"))
    with pytest.raises(CertificateFailure, match=r"userName or password is not correct.*errCode 415"):
        await runtime.start()
    assert runtime.pool is None  # stopped again


async def test_a_consumer_refused_by_the_master_is_a_clear_upstream_error(cluster: EmbeddedCluster) -> None:
    # A producer with good credentials, a consumer service whose pool has a wrong password.
    pool = authed_pool(password="wrong")
    service = ConsumerService([cluster.master_address], pool, advertised_url="http://127.0.0.1:1")
    await service.start()
    try:
        with pytest.raises(UpstreamError) as refused:
            await service.create("gw-auth", InstanceSpec(topics={"guarded": None}))
        body = refused.value.to_dict()
        assert body["tubemqErrorCode"] == 415
        assert "userName or password is not correct" in str(body["message"])
    finally:
        await service.close()
        await pool.close()
