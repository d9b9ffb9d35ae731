"""A one-message publish answered below ASGI, in the httptools protocol (issue #26), answers as the ASGI way
does, over real sockets: two gateways on one embedded cluster, one with ``http.direct_publish`` on and one
with it off, get the same requests on one connection each; their answers must be the same bytes (but for
Date, the request id and what the broker assigns), and so must their access lines and HTTP metrics. Each test
also checks which requests the direct way served, so none passes by going the ASGI way unnoticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.observability import tracing
from tests.support.auth_support import write_auth_files, write_mtls_auth_files
from tests.support.direct_support import (
    access_lines,
    comparable,
    counting_direct,
    http_series,
    line,
    pair,
    read_answer,
    request,
    serving,
    span_view,
    spans_exporter,
    talk,
)
from tests.support.jwks_support import AUDIENCE, ISSUER, SigningKey, jwks_server
from tests.support.serving import free_port
from tests.support.tls_support import make_pki
from tests.support.topology_support import Replica, running_nginx
from tests.support.workers_support import start_workers

PUBLISH = "/v1/topics/demo/messages"
ORIGIN = "https://app.example"
ONE = json.dumps({"messages": [{"value": "a"}]}).encode()
JSON = {"content-type": "application/json"}


@pytest.fixture
async def cluster() -> AsyncIterator[EmbeddedCluster]:
    async with EmbeddedCluster([TopicSpec("demo", 1), TopicSpec("other_t", 1)], brokers=1) as c:
        yield c


@pytest.fixture
def spans() -> Iterator[Any]:
    with spans_exporter() as exporter:
        yield exporter


async def _both(
    gateways: tuple[Any, Any],
    requests: list[bytes],
    monkeypatch: pytest.MonkeyPatch,
    spans: Any = None,
    **options: Any,
) -> tuple[list[Any], list[str]]:
    """Send ``requests`` to both gateways; assert that everything they leave behind is alike; return the
    comparable answers and the paths the direct way served."""
    seen = []
    served: list[str] = []
    for gateway in gateways:
        with access_lines() as records, counting_direct(monkeypatch) as direct:
            answers = await talk(gateway.port, requests, **options)
            await asyncio.sleep(0.05)  # the access line follows the write
        served = served or direct
        seen.append(
            (
                [comparable(a) for a in answers],
                [line(r) for r in records],
                span_view(spans) if spans is not None else None,
            )
        )
    for i, (direct, plain) in enumerate(zip(seen[0][0], seen[1][0], strict=True)):
        assert direct == plain, f"answer {i}:\n{direct}\n{plain}"
    assert seen[0][1] == seen[1][1]
    assert seen[0][2] == seen[1][2]
    assert http_series(gateways[0].app) == http_series(gateways[1].app)
    return seen[0][0], served


def _statuses(answers: list[Any]) -> list[int]:
    return [int(status.split()[1]) for status, _, _ in answers]


async def test_every_auth_method_and_refusal(
    cluster: EmbeddedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = write_auth_files(tmp_path)
    signer = SigningKey.rsa("direct-key")
    async with jwks_server(signer) as issuer:
        jwt = {"issuer": ISSUER, "audience": [AUDIENCE], "jwks_url": issuer.url, "roles_claim": "roles"}
        secret = {"id_secret": "direct-secret-0123456789"}
        async with pair(cluster, auth=files.auth_settings(jwt=jwt), consumers=secret) as gateways:
            token = signer.token(roles=["app"])
            narrow = signer.token(sub="narrow-user", roles=["narrow"])
            bearer = {"authorization": f"Bearer {token}"}
            requests = [
                request("POST", PUBLISH, {**JSON, **files.headers("alice")}, ONE),  # API key
                request("POST", PUBLISH, {**JSON, "x-api-key": files.keys["bob"]}, ONE),
                request("POST", PUBLISH, {**JSON, **bearer}, ONE),  # JWT
                request("POST", PUBLISH, {**JSON, "authorization": f"Bearer {narrow}"}, ONE),  # 403 on demo
                request(
                    "POST", "/v1/topics/other_t/messages", {**JSON, "authorization": f"Bearer {narrow}"}, ONE
                ),
                request("POST", PUBLISH, {**JSON, **files.headers("nobody")}, ONE),  # valid key, no rule: 403
                request("POST", PUBLISH, {**JSON, "authorization": "Bearer not-a-key"}, ONE),  # 401
                request("POST", PUBLISH, JSON, ONE),  # no credentials: 401
                request("POST", PUBLISH, {**JSON, "authorization": f"Bearer {token}x"}, ONE),  # bad signature
                request("POST", PUBLISH, {**JSON, **files.headers("alice")}, b"{"),  # authenticated, then 400
                request("POST", "/v1/topics/missing_t/messages", {**JSON, **bearer}, ONE),  # no such topic
                request("POST", "/v1/topics/bad%20name/messages", {**JSON, **bearer}, ONE),  # the ASGI way
                # a non-ASCII path: the parser refuses the request before either way sees it
                "POST /v1/topics/caf\u00e9/messages HTTP/1.1\r\ncontent-length: 0\r\n\r\n".encode(),
            ]
            answers, served = await _both(gateways, requests, monkeypatch)
            assert _statuses(answers) == [200, 200, 200, 403, 200, 403, 401, 401, 401, 400, 404, 400, 400]
            assert len(served) == len(requests) - 2  # not the percent-encoded path, nor the refused one


async def test_limits_quotas_gzip_cors_and_tracing(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch, spans: Any
) -> None:
    settings: dict[str, Any] = {
        "limits": {"max_batch_messages": 3, "max_request_bytes": 2048, "max_concurrent_per_caller": 4},
        # 4 messages at once, then one every 10 s: the requests below meet the limit on a loaded machine too
        # (the suite runs in parallel workers: one gateway's nine requests may take seconds there)
        "rate_limits": {"publish_messages_per_second": 0.1, "burst_seconds": 40},
        "compression": {"min_bytes": 0},
        "cors": {"allow_origins": [ORIGIN]},
    }
    async with pair(cluster, **settings) as gateways:
        assert tracing.enabled()  # the spans fixture: TracingMiddleware is installed
        gzip = {"accept-encoding": "gzip"}
        browser = {"origin": ORIGIN}
        traced = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
        two = json.dumps({"messages": [{"value": "b"}] * 2}).encode()
        big = json.dumps({"messages": [{"value": "x" * 3000}]}).encode()
        requests = [
            request("POST", PUBLISH, {**JSON, **gzip, **browser, **traced}, ONE),
            request("POST", PUBLISH, {**JSON, **gzip, "x-request-id": "client-chosen-id"}, two),
            request("POST", PUBLISH, {**JSON, "origin": "https://evil.example"}, ONE),  # 1 token left
            request("POST", PUBLISH, {**JSON, **browser}, ONE),  # above the quota: 429
            request(
                "POST", PUBLISH, {**JSON, **browser}, json.dumps({"messages": [{"value": "v"}] * 4}).encode()
            ),
            request("POST", PUBLISH, {"content-type": "text/plain", **browser}, b"a"),  # 415
            request("POST", PUBLISH, {"content-type": "application/octet-stream", **gzip}, b"raw"),  # 429
            request("OPTIONS", PUBLISH, {**browser, "access-control-request-method": "POST"}),  # preflight
            request("POST", PUBLISH, {**JSON, **gzip}, big),  # above max_request_bytes: 413, closes
        ]
        answers, served = await _both(gateways, requests, monkeypatch, spans)
        assert _statuses(answers) == [200, 200, 200, 429, 400, 415, 429, 200, 413]
        assert len(served) == 7  # not the preflight, not the body above the limit


async def test_errors_and_the_access_line(cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unhandled error (500 naming the request id), a broker's refusal of an oversized message (413),
    HTTP/1.0 and Connection: close (the connection ends after the answer)."""
    async with pair(cluster) as gateways:
        for gateway in gateways:
            service = gateway.runtime.publisher()
            for name in ("publish", "publish_prepared"):  # the usual batch comes prepared (publish_json.c)
                original = getattr(service, name)

                async def broken(topic: str, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
                    if topic == "other_t":
                        raise RuntimeError("a bug")
                    return await __original(topic, *args, **kwargs)

                monkeypatch.setattr(service, name, broken)
        huge = json.dumps({"messages": [{"value": "y" * 2_000_000}]}).encode()
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (ONE[:5], ONE[5:], b""))
        requests = [
            request("POST", "/v1/topics/other_t/messages", JSON, ONE),  # 500
            request("POST", PUBLISH, JSON, huge),  # above the topic's message size: 413 from the service
            request("POST", PUBLISH, {**JSON, "transfer-encoding": "chunked"}, chunked),  # the ASGI way
            request("POST", PUBLISH, {**JSON, "connection": "close"}, ONE),
        ]
        answers, served = await _both(gateways, requests, monkeypatch)
        assert _statuses(answers) == [500, 413, 200, 200]
        assert (b"connection", b"close") in answers[3][1]
        assert len(served) == 3
        for version in ("1.0", "1.1"):
            seen = []
            for gateway in gateways:
                reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
                writer.write(request("POST", PUBLISH, JSON, ONE, version=version))
                first = comparable(await read_answer(reader))
                if version == "1.0":
                    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed after the answer
                writer.close()
                seen.append(first)
            assert seen[0] == seen[1]


async def test_pipelined_requests_are_answered_in_order(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests sent at once on one connection: the first publish goes the direct way, those pipelined behind
    it wait in uvicorn's queue (the ASGI way), and every answer comes back in order."""
    async with pair(cluster) as gateways:
        requests = [
            request("POST", PUBLISH, {**JSON, "x-request-id": f"pipelined-{i}"}, ONE) for i in range(3)
        ]
        requests.insert(2, request("GET", "/healthz", {}))
        requests.append(request("POST", PUBLISH, JSON, b"{"))
        answers, served = await _both(gateways, requests, monkeypatch, pipelined=True)
        assert _statuses(answers) == [200, 200, 200, 200, 400]
        assert served == [PUBLISH]
        direct = await talk(gateways[0].port, requests, pipelined=True)
        assert [a.count(b"x-request-id: pipelined-") for a in direct] == [1, 1, 0, 1, 0]
        assert b"pipelined-0" in direct[0] and b"pipelined-1" in direct[1] and b"pipelined-2" in direct[3]


async def test_a_stalled_body_is_bounded_in_time_and_a_client_that_leaves_is_logged(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers, then a body that never comes: 408 within the body timeout. Headers and half a body, then
    the client goes away: 499 in the access line and the metrics, as the ASGI way logs it. A client that
    goes away while its publish is with the broker: the publish completes (200 logged), nothing breaks."""
    # a body timeout the client's leaving (0.05 s after half a body) beats on a loaded machine too (the suite
    # runs in parallel processes): else the half body may be answered 408 before its close is seen
    async with pair(cluster, limits={"body_timeout": 1.0, "header_timeout": 30}) as gateways:
        views = []
        for gateway in gateways:
            with access_lines() as records, counting_direct(monkeypatch) as served:
                reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
                writer.write(request("POST", PUBLISH, {**JSON, "content-length": "40"}))
                stalled = comparable(await asyncio.wait_for(read_answer(reader), 10))
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
                writer.write(request("POST", PUBLISH, {**JSON, "content-length": "40"}, b'{"mess'))
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
                writer.write(request("POST", PUBLISH, JSON, ONE))
                await writer.drain()
                writer.close()
                for _ in range(200):
                    if len(records) == 3:
                        break
                    await asyncio.sleep(0.02)
            assert len(served) == (3 if gateway is gateways[0] else 0)
            views.append((stalled, sorted(line(r)["status"] for r in records)))
        assert views[0] == views[1]
        assert int(views[0][0][0].split()[1]) == 408
        assert views[0][1] == [200, 408, 499]
        assert http_series(gateways[0].app) == http_series(gateways[1].app)


async def test_the_direct_way_can_be_turned_off_and_serves_nothing_then(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(cluster, False) as plain:
        with counting_direct(monkeypatch) as served:
            answers = await talk(plain.port, [request("POST", PUBLISH, JSON, ONE)])
        assert answers[0].startswith(b"HTTP/1.1 200 ") and served == []


def test_a_middleware_the_direct_way_does_not_know_sends_publishes_the_asgi_way(tmp_path: Path) -> None:
    from fastapi.middleware.trustedhost import TrustedHostMiddleware

    from gateway.api.app import create_app
    from gateway.api.direct_ways import direct_publish_of
    from gateway.config import Settings
    from gateway.runtime import Runtime

    app = create_app(runtime=Runtime(Settings()))
    assert direct_publish_of(app) is not None
    app.user_middleware.insert(
        3, app.user_middleware[0].__class__(TrustedHostMiddleware, allowed_hosts=["*"])
    )
    app.middleware_stack = None
    assert direct_publish_of(app) is None
    logging.getLogger(__name__).debug("checked")


async def test_tls_with_client_certificates(
    cluster: EmbeddedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TLS: a client certificate's subject authenticates (mTLS), an API key on a connection without a
    certificate too, and no credentials are refused, alike both ways."""
    pki = make_pki(tmp_path)
    subject = pki.client.subject.rfc4514_string()
    files = write_mtls_auth_files(tmp_path, subject)
    tls = {
        "cert_file": str(pki.server.cert),
        "key_file": str(pki.server.key),
        "client_ca_file": str(pki.ca),
        "client_auth": "optional",
    }
    auth = files.auth_settings(mtls_principal=True)
    secret = {"id_secret": "direct-secret-0123456789"}
    async with pair(cluster, tls=tls, auth=auth, consumers=secret) as gateways:
        with_cert = [request("POST", PUBLISH, JSON, ONE), request("POST", PUBLISH, JSON, b"[")]
        answers, served = await _both(
            gateways, with_cert, monkeypatch, context=pki.client_context(pki.client)
        )
        assert _statuses(answers) == [200, 400] and len(served) == 2
        without = [
            request("POST", PUBLISH, JSON, ONE),  # 401
            request("POST", PUBLISH, {**JSON, **files.headers("alice")}, ONE),
        ]
        answers, served = await _both(gateways, without, monkeypatch, context=pki.client_context())
        assert _statuses(answers) == [401, 200] and len(served) == 2


async def test_behind_nginx_the_client_address_comes_from_the_proxy(
    cluster: EmbeddedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real nginx (HTTP/1.1 keep-alive upstream): answers alike both ways, and the client address
    a trusted proxy forwards is the caller's (the quota refusal names it)."""
    limits = {"rate_limits": {"publish_messages_per_second": 1, "burst_seconds": 1}}
    async with pair(cluster, **limits) as gateways, contextlib.AsyncExitStack() as stack:
        proxied = []
        for i, gateway in enumerate(gateways):
            replica = Replica(f"r{i}", gateway.port, free_port())
            nginx = running_nginx(tmp_path / f"nginx{i}", [replica])
            url, _ = await asyncio.to_thread(nginx.__enter__)
            stack.push_async_callback(asyncio.to_thread, nginx.__exit__, None, None, None)
            proxied.append(dataclasses.replace(gateway, port=int(url.rsplit(":", 1)[1])))
        forwarded = {**JSON, "x-forwarded-for": "10.9.8.7"}
        requests = [request("POST", PUBLISH, forwarded, ONE), request("POST", PUBLISH, forwarded, ONE)]
        answers, served = await _both((proxied[0], proxied[1]), requests, monkeypatch)
        assert _statuses(answers) == [200, 429] and len(served) == 2
        assert b"client 10.9.8.7 is above" in answers[1][2]


async def test_two_worker_processes(tmp_path: Path) -> None:
    """``serve --workers 2`` (SO_REUSEPORT workers, each with its private listener) answers publishes on
    the shared port alike with the direct way on and off."""
    seen = []
    for direct in ("true", "false"):
        (tmp_path / direct).mkdir()
        gateway = await asyncio.to_thread(
            start_workers, tmp_path / direct, 2, env={"TUBEMQ_GATEWAY_HTTP__DIRECT_PUBLISH": direct}
        )
        try:
            answers = []
            for _ in range(4):  # new connections: either worker
                answers += await talk(
                    gateway.http_port,
                    [
                        request("POST", PUBLISH, JSON, ONE),
                        request("POST", PUBLISH, JSON, b"{"),
                        request("POST", PUBLISH, {"content-type": "text/plain"}, b"x"),
                    ],
                )
        finally:
            await asyncio.to_thread(gateway.stop)
        seen.append([_BROKER_CHOSEN.sub(rb'"\1":0', comparable(a)[2]) for a in answers])
        assert _statuses([comparable(a) for a in answers]) == [200, 400, 415] * 4
    assert seen[0] == seen[1]


#: what a broker of a topic with several partitions chooses for a message
_BROKER_CHOSEN = re.compile(rb'"(partition|partitionKey|brokerId|partitionId)":"?[^,}"]*"?')


async def test_a_graceful_shutdown_lets_a_publish_in_progress_finish(
    cluster: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shutdown begins while a publish is with the broker: it is answered (200, ``connection: close``), the
    connection then ends, and the listener takes no new connection. Alike both ways."""
    seen = []
    for direct in (True, False):
        # a long keep-alive: the connection must end because of the shutdown, not of an idle timer
        async with serving(cluster, direct, limits={"keep_alive_timeout": 60}) as gateway:
            service = gateway.runtime.publisher()
            for name in ("publish", "publish_prepared"):  # the usual batch comes prepared (publish_json.c)
                original = getattr(service, name)

                async def slow(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
                    await asyncio.sleep(0.5)
                    return await __original(*args, **kwargs)

                monkeypatch.setattr(service, name, slow)
            with counting_direct(monkeypatch) as served:
                reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
                writer.write(request("POST", PUBLISH, JSON, ONE))
                await writer.drain()
                await asyncio.sleep(0.2)
                gateway.server.should_exit = True
                answer = comparable(await read_answer(reader))
                assert await asyncio.wait_for(reader.read(), 3) == b""
                writer.close()
                for _ in range(100):
                    if not gateway.server.servers or not gateway.server.servers[0].is_serving():
                        break
                    await asyncio.sleep(0.05)
                with pytest.raises(OSError):
                    await asyncio.open_connection("127.0.0.1", gateway.port)
            assert len(served) == (1 if direct else 0)
            seen.append(answer)
    assert seen[0] == seen[1]
    assert _statuses(seen) == [200, 200] and (b"connection", b"close") in seen[0][1]
