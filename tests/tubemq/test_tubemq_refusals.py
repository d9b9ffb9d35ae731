"""What the gateway tells its operator when a TubeMQ cluster refuses it (gateway/tubemq/refusals.py): each
refusal the real cluster sends in TLS_AUTH mode (tests/interop/test_interop_tls_refusals.py), made here by an
embedded cluster with two-way TLS and authentication, over real sockets, and the advice that comes with it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Settings
from gateway.embedded.auth import ServerAuth
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.service.core_errors import Doing, service_error
from gateway.service.errors import UpstreamError
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer.client import Consumer
from gateway.tubemq.errors import CertificateFailure, ConnectError, TransportError, TubeMQError
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.producer.client import Producer, ProducerConfig
from gateway.tubemq.refusals import Refusal, credential_hint, tls_hint
from gateway.tubemq.wire.auth import Credentials
from gateway.upstream import refusal_settings, upstream_options
from tests.support.consumer_support import fast
from tests.support.tls_support import Pki, make_pki

USER, PASSWORD = "gateway", "pa55"
NO_CREDENTIALS = "the cluster requires authentication and this client sent no credentials"
CLOCK = "this host's clock and the master's differ; synchronise them (NTP)"
CLIENT_CERT = "the TubeMQ node refused this client's TLS certificate"
SERVER_CERT = "this client does not trust the node's certificate"
AUTH_SETTINGS = (
    "tubemq.auth.username and tubemq.auth.password (TUBEMQ_GATEWAY_TUBEMQ__AUTH__USERNAME, "
    "TUBEMQ_GATEWAY_TUBEMQ__AUTH__PASSWORD)"
)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("refusals"), name="refusals")


@pytest.fixture
async def cluster(pki: Pki) -> AsyncIterator[EmbeddedCluster]:
    auth = ServerAuth(Credentials(USER, PASSWORD))
    server = pki.server_context(require_client_cert=True)
    async with EmbeddedCluster([TopicSpec("guarded", 1)], ssl=server, auth=auth) as running:
        yield running


def tubemq(pki: Pki, **tls: Any) -> dict[str, Any]:
    """Working ``tubemq`` settings for the cluster above; ``tls`` keys replace (None drops) the TLS ones."""
    settings: dict[str, Any] = {
        "enabled": True,
        "ca_file": str(pki.ca),
        "cert_file": str(pki.client.cert),
        "key_file": str(pki.client.key),
        "server_hostname": "127.0.0.1",
    }
    for key, value in tls.items():
        if value is None:
            settings.pop(key)
        else:
            settings[key] = value
    return {"tls": settings, "auth": {"username": USER, "password": PASSWORD}}


async def start_error(cluster: EmbeddedCluster, tubemq: dict[str, Any]) -> TubeMQError:
    """The error a gateway with these settings stops with at start."""
    runtime = Runtime(Settings(masters=str(cluster.master_address), tubemq=tubemq))
    with pytest.raises(TubeMQError) as refused:
        await runtime.start()
    assert runtime.pool is None  # stopped again
    return refused.value


async def test_the_configuration_that_works(cluster: EmbeddedCluster, pki: Pki) -> None:
    runtime = Runtime(Settings(masters=str(cluster.master_address), tubemq=tubemq(pki)))
    await runtime.start()
    try:
        assert runtime.producer is not None and runtime.producer.registered
    finally:
        await runtime.stop()


async def test_missing_credentials_say_to_set_them(cluster: EmbeddedCluster, pki: Pki) -> None:
    error = await start_error(cluster, {"tls": tubemq(pki)["tls"]})
    assert isinstance(error, CertificateFailure)
    assert str(error) == (
        "Illegal value: authInfo.userName is Blank! [errCode 415 CERTIFICATE_FAILURE: "
        f"{NO_CREDENTIALS}: set the TubeMQ user name and password]"
    )
    # the gateway adds its settings to the error it stops with (logged with the traceback)
    assert error.__notes__ == [f"the gateway's settings for this: {AUTH_SETTINGS}"]


async def test_a_clock_off_by_more_than_the_window_says_to_synchronise_it(
    cluster: EmbeddedCluster, pki: Pki
) -> None:
    behind = Credentials(USER, PASSWORD, clock_ms=lambda: time.time_ns() // 1_000_000 - 60_000)
    options = upstream_options(Settings(tubemq=tubemq(pki)).tubemq)
    pool = ConnectionPool(ssl=options.ssl, server_hostname=options.server_hostname, credentials=behind)
    producer = Producer([cluster.master_address], pool=pool)
    try:
        with pytest.raises(CertificateFailure) as refused:
            await producer.start()
    finally:
        await producer.close()
        await pool.close()
    assert refused.value.message == "Illegal value: timestamp out of effective period in authenticateToken!"
    assert CLOCK in str(refused.value) and "user name" not in str(refused.value)
    assert refusal_settings(refused.value) is None  # a clock is no setting


async def test_a_wrong_password_keeps_the_credentials_advice(cluster: EmbeddedCluster, pki: Pki) -> None:
    settings = tubemq(pki)
    settings["auth"]["password"] = "wrong"
    error = await start_error(cluster, settings)
    assert isinstance(error, CertificateFailure)
    assert "userName or password is not correct" in str(error)
    assert "set the TubeMQ user name and password it presents" in str(error)
    assert error.__notes__ == [f"the gateway's settings for this: {AUTH_SETTINGS}"]


def test_the_service_says_the_operator_must_fix_it() -> None:
    # the path through a consumer service on an embedded cluster: test_tubemq_auth.py (wrong password)
    for message, advice in (
        ("Illegal value: authInfo.userName is Blank!", NO_CREDENTIALS),
        ("Illegal value: timestamp out of effective period in authenticateToken!", CLOCK),
    ):
        error = service_error(CertificateFailure(message), Doing.JOIN, group="refused-group")
        assert isinstance(error, UpstreamError)
        body = error.to_dict()
        assert body["tubemqErrorCode"] == 415
        assert advice in str(body["message"]) and "operator must fix" in str(body["message"]), body


async def test_a_consumer_refused_for_its_credentials_is_told_at_once(
    cluster: EmbeddedCluster, pki: Pki
) -> None:
    # registering again with the same credentials gets the same 415: no retry (its wait would be 60 s here)
    options = upstream_options(Settings(tubemq=tubemq(pki)).tubemq)
    pool = ConnectionPool(ssl=options.ssl, server_hostname=options.server_hostname)  # no credentials
    consumer = Consumer(
        [cluster.master_address],
        "refused-group",
        {"guarded": None},
        pool=pool,
        config=fast(register_retry_wait=60.0),
    )
    try:
        with pytest.raises(CertificateFailure, match=r"authInfo\.userName is Blank"):
            await asyncio.wait_for(consumer.start(), 20.0)
    finally:
        await consumer.close()
        await pool.close()


@contextmanager
def alerting_tls_node(context: ssl.SSLContext) -> Iterator[NodeAddress]:
    """A TLS listener that, like the real (Java) TubeMQ servers, sends its alert when it refuses a client
    certificate (asyncio's TLS server, the embedded cluster's, closes without sending it)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            with conn, contextlib.suppress(OSError):
                refuse(conn, context)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield NodeAddress("127.0.0.1", listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def refuse(conn: socket.socket, context: ssl.SSLContext) -> None:
    """Run the server's side of a handshake over memory buffers until it fails, send what it wrote (the
    alert), then read the client's bytes to their end before closing: a close with unread bytes is a reset,
    which can reach the client before it has read the alert (with TLS 1.3 the client writes its request as
    soon as its side of the handshake is done)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_side=True)
    while True:
        try:
            tls.do_handshake()
            tls.read(1)
        except ssl.SSLWantReadError:
            conn.sendall(outgoing.read())
            data = conn.recv(65536)
            if not data:
                return
            incoming.write(data)
            continue
        except ssl.SSLError:
            pass  # the refusal is the point: its alert is in outgoing
        break
    conn.sendall(outgoing.read())
    conn.shutdown(socket.SHUT_WR)
    while conn.recv(65536):
        pass


async def register_error(address: NodeAddress, pki: Pki, **tls: Any) -> TubeMQError:
    options = upstream_options(Settings(tubemq=tubemq(pki, **tls)).tubemq)
    pool = ConnectionPool(ssl=options.ssl, server_hostname=options.server_hostname, connect_timeout=5.0)
    producer = Producer([address], pool=pool, config=ProducerConfig(rpc_timeout=5.0))
    try:
        with pytest.raises(TubeMQError) as refused:
            await producer.start()
    finally:
        await producer.close()
        await pool.close()
    return refused.value


@pytest.mark.parametrize("client", ["none", "stranger"])
async def test_a_refused_client_certificate_says_to_give_one_it_trusts(pki: Pki, client: str) -> None:
    files = {"cert_file": None, "key_file": None}
    if client == "stranger":
        files = {"cert_file": str(pki.stranger.cert), "key_file": str(pki.stranger.key)}
    with alerting_tls_node(pki.server_context(require_client_cert=True)) as node:
        error = await register_error(node, pki, **files)
    assert isinstance(error, TransportError)
    alert = "CERTIFICATE_REQUIRED" if client == "none" else "UNKNOWN_CA"
    assert alert in str(error) and CLIENT_CERT in str(error), str(error)
    assert "tubemq.tls.cert_file and tubemq.tls.key_file" in str(refusal_settings(error))


async def test_a_ca_that_did_not_sign_the_node_says_so(
    cluster: EmbeddedCluster, pki: Pki, tmp_path: Path
) -> None:
    foreign = make_pki(tmp_path / "foreign", name="foreign")
    error = await start_error(cluster, tubemq(pki, ca_file=str(foreign.ca)))
    assert isinstance(error, ConnectError)
    assert "CERTIFICATE_VERIFY_FAILED" in str(error) and SERVER_CERT in str(error), str(error)
    assert "TUBEMQ_GATEWAY_TUBEMQ__TLS__CA_FILE" in error.__notes__[0]


async def test_tls_to_a_port_that_answers_in_plain_says_to_use_the_tls_port(pki: Pki) -> None:
    async def answer_plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_plain, "127.0.0.1", 0)
    async with server:
        error = await register_error(NodeAddress("127.0.0.1", server.sockets[0].getsockname()[1]), pki)
    assert "WRONG_VERSION_NUMBER" in str(error) and "the port does not speak TLS" in str(error), str(error)
    assert "masters' TLS port (8716" in str(refusal_settings(error))


def test_hints_for_what_they_do_not_know() -> None:
    assert credential_hint("something else") == Refusal.CREDENTIALS.value
    assert tls_hint(OSError("reset")) is None
    assert tls_hint(ssl.SSLError(1, "[SSL] internal error")) is None
    assert str(CertificateFailure("")).endswith("set the TubeMQ user name and password it presents]")
    assert refusal_settings(OSError("reset")) is None and refusal_settings(ValueError()) is None
