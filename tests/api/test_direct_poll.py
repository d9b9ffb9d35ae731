"""A poll answered below ASGI, in the httptools protocol, answers as the ASGI way does, over real sockets: two
gateways, one with ``http.direct_poll`` on and one with it off, each on an embedded cluster of its own with
the same messages, get the same requests; their answers must be the same bytes (but for Date, the request id,
the instance id and the commit tokens), and so must their access lines and HTTP metrics. Each test also
checks which requests the direct way served, so none passes by going the ASGI way unnoticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from gateway.api.forwarding import CLIENT_CERT_HEADER, WORKER_HOP_HEADER
from gateway.api.worker_listener import OWN_METRICS_PATH, WORKER_TOKEN_HEADER, private_app
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.serve import http_config
from gateway.service.errors import Unavailable
from tests.support.auth_support import write_auth_files, write_mtls_auth_files
from tests.support.direct_support import (
    Served,
    access_lines,
    comparable,
    counting_direct,
    http_series,
    line,
    read_answer,
    request,
    serving,
    talk,
)
from tests.support.jwks_support import AUDIENCE, ISSUER, SigningKey, jwks_server
from tests.support.serving import uvicorn_serving
from tests.support.tls_support import make_pki
from tests.support.workers_support import start_workers

GROUP = "dg"
JSON = {"content-type": "application/json"}
SECRET = {"id_secret": "direct-secret-0123456789"}
#: an instance id (three dot-separated parts) and a commit token as the answers carry them
_INSTANCE = re.compile(rb"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_TOKEN = re.compile(rb'"token": ?"[^"]*"')
_DEADLINE = re.compile(rb'"deadline": ?\d+')

#: the requests of one gateway, given its instance's poll path
Script = Callable[[str], list[bytes]]


@pytest.fixture
async def clusters() -> AsyncIterator[tuple[EmbeddedCluster, EmbeddedCluster]]:
    topics = [TopicSpec("demo", 1), TopicSpec("other_t", 1)]
    async with EmbeddedCluster(topics, brokers=1) as a, EmbeddedCluster(topics, brokers=1) as b:
        yield a, b


@contextlib.asynccontextmanager
async def _pair(
    clusters: tuple[EmbeddedCluster, EmbeddedCluster], **settings: Any
) -> AsyncIterator[tuple[Served, Served]]:
    """The direct gateway and the ASGI one, each on a cluster of its own."""
    settings = {"consumers": SECRET, **settings}
    async with (
        serving(clusters[0], True, **settings) as direct,
        serving(clusters[1], False, **settings) as plain,
    ):
        yield direct, plain


def _masked(answer: bytes) -> Any:
    """:func:`comparable`, with the instance id, the commit tokens and the deadlines masked too."""
    status, headers, body = comparable(answer)
    body = _DEADLINE.sub(
        b'"deadline":0', _TOKEN.sub(b'"token":"<token>"', _INSTANCE.sub(b"<instance>", body))
    )
    return status, headers, body


def _line(record: Any) -> dict[str, Any]:
    """An access line, the end of the instance id its path keeps masked."""
    found = line(record)
    if "path" in found:
        found["path"] = re.sub(r"\.\.\.[A-Za-z0-9_-]+", "...", found["path"])
    return found


def _statuses(answers: list[Any]) -> list[int]:
    return [int(status.split()[1]) for status, _, _ in answers]


async def _instance(gateway: Served, headers: dict[str, str], group: str = GROUP, **options: Any) -> str:
    """A new instance's poll path, with its first (empty) poll done: its partitions are assigned."""
    body = json.dumps({"topics": ["demo"]}).encode()
    created = (
        await talk(
            gateway.port, [request("POST", f"/v1/consumers/{group}", {**JSON, **headers}, body)], **options
        )
    )[0]
    assert created.startswith(b"HTTP/1.1 201 "), created
    instance = json.loads(created.partition(b"\r\n\r\n")[2])["instanceId"]
    path = f"/v1/consumers/{group}/instances/{instance}/messages"
    first = await talk(gateway.port, [request("GET", path + "?timeout_ms=50", headers)], **options)
    assert first[0].startswith(b"HTTP/1.1 200 "), first
    return path


async def _publish(gateway: Served, values: list[str], headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"messages": [{"value": v} for v in values]}).encode()
    published = await talk(
        gateway.port, [request("POST", "/v1/topics/demo/messages", {**JSON, **(headers or {})}, body)]
    )
    assert published[0].startswith(b"HTTP/1.1 200 "), published


async def _both(
    gateways: tuple[Served, Served],
    script: Script,
    paths: tuple[str, str],
    **options: Any,
) -> tuple[list[Any], list[str]]:
    """Send each gateway its ``script``'s requests on one connection; assert that everything they leave
    behind is alike; return the comparable answers and the paths the direct way served."""
    seen = []
    served: list[str] = []
    for gateway, path in zip(gateways, paths, strict=True):
        with access_lines() as records, counting_direct(pytest.MonkeyPatch()) as direct:
            answers = await talk(gateway.port, script(path), **options)
            await asyncio.sleep(0.05)  # the access line follows the write
        served = served or direct
        seen.append(([_masked(a) for a in answers], [_line(r) for r in records]))
    for i, (direct_answer, plain_answer) in enumerate(zip(seen[0][0], seen[1][0], strict=True)):
        assert direct_answer == plain_answer, f"answer {i}:\n{direct_answer}\n{plain_answer}"
    assert seen[0][1] == seen[1][1]
    assert http_series(gateways[0].app) == http_series(gateways[1].app)
    return seen[0][0], served


async def test_messages_long_polls_parameters_and_errors(clusters: Any) -> None:
    settings = {"compression": {"min_bytes": 0}, "cors": {"allow_origins": ["https://app.example"]}}
    async with _pair(clusters, **settings) as gateways:
        paths = []
        for gateway in gateways:
            paths.append(await _instance(gateway, {}))
            await _publish(gateway, ["a", "b", "c"])

        def script(path: str) -> list[bytes]:
            other_group = path.replace(f"/{GROUP}/", "/elsewhere/")
            return [
                request("GET", path + "?max_messages=2&timeout_ms=5000", {}),  # 200, two messages
                request("GET", path + "?format=utf8&timeout_ms=5000", {"accept-encoding": "gzip"}),
                request(
                    "GET", path + "?timeout_ms=100", {"origin": "https://app.example"}
                ),  # long poll, none
                request("GET", path + "?&&timeout_ms=10&unknown=x&max_bytes=1&", {}),  # others ignored
                request("GET", path + "?timeout_ms=0", {"x-request-id": "client-chosen"}),
                request("GET", f"/v1/consumers/{GROUP}/instances/nope/messages", {}),  # 404 malformed
                request("GET", other_group + "?timeout_ms=10", {}),  # 404: another group's id
                request("GET", path + "?max_messages=0", {}),  # 400, the ASGI way from here on
                request("GET", path + "?max_messages=abc", {}),
                request("GET", path + "?timeout_ms=-1", {}),
                request("GET", path + "?format=xml", {}),
                request("GET", path + "?max_bytes=", {}),
                request("GET", path + "?timeout_ms=1&timeout_ms=2", {}),  # repeated: 200
                request("GET", path + "?timeout_ms=%310", {}),  # percent-encoded: 200
                request("GET", path + "?timeout_ms=9999999999999999999", {}),  # above the digits read here
                request("GET", path + "?timeout_ms=1", {"content-length": "2"}) + b"{}",  # a body
            ]

        answers, served = await _both(gateways, script, (paths[0], paths[1]))
        assert _statuses(answers[:7]) == [200, 200, 200, 200, 200, 404, 404]
        assert len(json.loads(answers[0][2])["messages"]) == 2
        assert json.loads(answers[1][2])["messages"][0]["value"] == "c"
        assert any(n == b"content-encoding" for n, _ in answers[1][1])
        assert any(n == b"access-control-allow-origin" for n, _ in answers[2][1])
        assert _statuses(answers[7:12]) == [400] * 5
        assert [json.loads(a[2])["error"]["field"] for a in answers[7:12]] == [
            "max_messages",
            "max_messages",
            "timeout_ms",
            "format",
            "max_bytes",
        ]
        assert len(served) == 7  # the first seven, and none after

        # a deleted instance: 410, both ways
        def deleted(path: str) -> list[bytes]:
            base = path.removesuffix("/messages")
            return [request("DELETE", base, {}), request("GET", path + "?timeout_ms=10", {})]

        answers, served = await _both(gateways, deleted, (paths[0], paths[1]))
        assert _statuses(answers) == [204, 410] and len(served) == 1


async def test_every_auth_method_and_refusal(clusters: Any, tmp_path: Path) -> None:
    files = write_auth_files(tmp_path)
    signer = SigningKey.rsa("direct-key")
    async with jwks_server(signer) as issuer:
        jwt = {"issuer": ISSUER, "audience": [AUDIENCE], "jwks_url": issuer.url, "roles_claim": "roles"}
        async with _pair(clusters, auth=files.auth_settings(jwt=jwt)) as gateways:
            alice = files.headers("alice")
            bearer = {"authorization": f"Bearer {signer.token(roles=['app'])}"}
            narrow = {"authorization": f"Bearer {signer.token(sub='narrow-user', roles=['narrow'])}"}
            paths = [await _instance(g, alice) for g in gateways]
            jwt_paths = [await _instance(g, bearer, group="dj") for g in gateways]
            for gateway in gateways:
                await _publish(gateway, ["a"], alice)

            def script(path: str) -> list[bytes]:
                jwt_path = jwt_paths[paths.index(path)]
                return [
                    request("GET", path + "?timeout_ms=5000", alice),  # API key: 200 with the message
                    request("GET", path + "?timeout_ms=10", {"x-api-key": files.keys["alice"]}),
                    request("GET", jwt_path + "?timeout_ms=5000", bearer),  # JWT, its own instance
                    # another principal's instance is not known to the caller (404: its existence is not told)
                    request("GET", path + "?timeout_ms=10", files.headers("bob")),
                    request("GET", jwt_path + "?timeout_ms=10", alice),  # the JWT user's instance
                    request("GET", path + "?timeout_ms=10", narrow),  # a principal with no rule for the group
                    request("GET", path + "?timeout_ms=10", files.headers("nobody")),  # no rule at all: 403
                    request("GET", path + "?timeout_ms=10", {"authorization": "Bearer not-a-key"}),  # 401
                    request("GET", path + "?timeout_ms=10", {}),  # no credentials: 401
                    request("GET", path + "?timeout_ms=10", {"authorization": bearer["authorization"] + "x"}),
                ]

            answers, served = await _both(gateways, script, (paths[0], paths[1]))
            assert _statuses(answers) == [200, 200, 200, 404, 404, 404, 403, 401, 401, 401]
            assert len(served) == len(answers)


async def test_tls_with_client_certificates(clusters: Any, tmp_path: Path) -> None:
    """Over TLS: a client certificate's subject authenticates (mTLS) and owns its instance; an API key on a
    connection without a certificate is another principal (404: not its instance); none: 401."""
    pki = make_pki(tmp_path)
    files = write_mtls_auth_files(tmp_path, pki.client.subject.rfc4514_string())
    tls = {
        "cert_file": str(pki.server.cert),
        "key_file": str(pki.server.key),
        "client_ca_file": str(pki.ca),
        "client_auth": "optional",
    }
    with_cert = {"ssl": pki.client_context(pki.client)}
    async with _pair(clusters, tls=tls, auth=files.auth_settings(mtls_principal=True)) as gateways:
        paths = [await _instance(g, {}, context=with_cert["ssl"]) for g in gateways]
        answers, served = await _both(
            gateways,
            lambda path: [
                request("GET", path + "?timeout_ms=10", {}),
                request("GET", path + "?format=bad", {}),
            ],
            (paths[0], paths[1]),
            context=with_cert["ssl"],
        )
        assert _statuses(answers) == [200, 400] and len(served) == 1
        answers, served = await _both(
            gateways,
            lambda path: [
                request("GET", path + "?timeout_ms=10", {}),
                request("GET", path + "?timeout_ms=10", files.headers("alice")),
            ],
            (paths[0], paths[1]),
            context=pki.client_context(),
        )
        assert _statuses(answers) == [401, 404] and len(served) == 2


async def test_limits_and_service_errors(clusters: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """503 above a caller's share of concurrent requests (a long poll holds the one slot), 503 with
    Retry-After from the service, 500 naming the request id for an error nobody expected, and 503 while the
    gateway drains."""
    async with _pair(clusters, limits={"max_concurrent_per_caller": 1}) as gateways:
        paths = [await _instance(g, {}) for g in gateways]
        for gateway in gateways:
            service = gateway.runtime.consumer_service()
            original = service.poll

            async def poll(group: str, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
                if kwargs.get("max_messages") == 7:
                    raise Unavailable("no partition is readable now; retry", retry_after=2.0)
                if kwargs.get("max_messages") == 9:
                    raise RuntimeError("a bug")
                return await __original(group, *args, **kwargs)

            monkeypatch.setattr(service, "poll", poll)
        seen = []
        for gateway, path in zip(gateways, paths, strict=True):
            with counting_direct(monkeypatch) as served:
                waiting = asyncio.ensure_future(
                    talk(gateway.port, [request("GET", path + "?timeout_ms=1500", {})])
                )
                await asyncio.sleep(0.5)
                refused = []
                for query in ("?timeout_ms=10", "?max_messages=7"):  # each refusal closes its connection
                    refused += await talk(gateway.port, [request("GET", path + query, {})])
                await waiting
                failed = []
                for query in ("?max_messages=7", "?max_messages=9"):
                    failed += await talk(gateway.port, [request("GET", path + query, {})])
            seen.append(([_masked(a) for a in refused + failed], len(served)))
        assert seen[0][0] == seen[1][0]
        assert _statuses(seen[0][0]) == [503, 503, 503, 500]
        assert seen[0][1] == 5 and seen[1][1] == 0
        assert (b"retry-after", b"2") in seen[0][0][2][1]
        assert http_series(gateways[0].app) == http_series(gateways[1].app)

        # a gateway that is stopping: a poll with nothing to take is answered 503 at once
        for gateway in gateways:
            gateway.runtime.consumer_service().begin_drain()
        answers, served = await _both(
            gateways, lambda path: [request("GET", path + "?timeout_ms=20000", {})], (paths[0], paths[1])
        )
        assert _statuses(answers) == [503] and len(served) == 1


async def test_abuse(clusters: Any) -> None:
    """Hostile query strings, huge headers, a client leaving mid-poll, pipelined requests."""
    async with _pair(clusters, limits={"max_header_bytes": 8192}) as gateways:
        paths = [await _instance(g, {}) for g in gateways]

        def hostile(path: str) -> list[bytes]:
            return [
                request("GET", path + "?" + "&".join(f"p{i}=v" for i in range(500)) + "&timeout_ms=1", {}),
                request("GET", path + "?timeout_ms=1&" + "=" * 300, {}),
                request("GET", path + "?max_messages=1;x=2", {}),
                request("GET", path + "?format=utf8%00", {}),
                request("GET", path + "?timeout_ms=+1", {}),
                request("GET", path + "?timeout_ms=1&max_messages=" + "9" * 16, {}),
                request("GET", path + "?timeout_ms=1", {"x-big": "a" * 7000}),
                request("GET", path + "?timeout_ms=1", {"x-huge": "a" * 9000}),  # 431, closes
            ]

        answers, served = await _both(gateways, hostile, (paths[0], paths[1]))
        statuses = _statuses(answers)
        assert statuses[:2] == [200, 200] and statuses[2:4] == [400, 400] and statuses[-2:] == [200, 431]
        assert len(served) == 3

        def pipelined(path: str) -> list[bytes]:
            return [
                request("GET", path + "?timeout_ms=300", {"x-request-id": "pipelined-0"}),
                request(
                    "POST",
                    "/v1/topics/demo/messages",
                    JSON,
                    json.dumps({"messages": [{"value": "p"}]}).encode(),
                ),
                request("GET", path + "?timeout_ms=3000", {"x-request-id": "pipelined-1"}),
                request("GET", "/healthz", {}),
            ]

        answers, served = await _both(gateways, pipelined, (paths[0], paths[1]), pipelined=True)
        assert _statuses(answers) == [200, 200, 200, 200]
        assert json.loads(answers[2][2])["messages"][0]["value"] == "cA=="  # "p", base64
        assert len(served) == 1  # the first; the rest waited in uvicorn's queue

        # a client that leaves while its poll waits: the poll ends at once (the instance takes the next
        # poll), logged and counted as 499, alike both ways
        views = []
        for gateway, path in zip(gateways, paths, strict=True):
            with access_lines() as records:
                _, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
                writer.write(request("GET", path + "?timeout_ms=20000", {}))
                await writer.drain()
                await asyncio.sleep(0.3)
                writer.close()
                started = asyncio.get_running_loop().time()
                for _ in range(200):
                    if records:
                        break
                    await asyncio.sleep(0.02)
                assert asyncio.get_running_loop().time() - started < 3
                # and with a request pipelined behind the poll
                _, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
                writer.write(request("GET", path + "?timeout_ms=2000", {}) + request("GET", "/healthz", {}))
                await writer.drain()
                await asyncio.sleep(0.3)
                writer.close()
                for _ in range(200):
                    if len(records) >= 2:
                        break
                    await asyncio.sleep(0.02)
            views.append([_line(r)["status"] for r in records if "/messages" in _line(r)["path"]])
        # with a request pipelined behind it, the poll waits its time out: uvicorn stops reading the
        # connection while a request waits in its queue, so neither way sees the client leave
        assert views[0] == views[1] == [499, 200]


async def test_two_worker_processes_forward_alike(tmp_path: Path) -> None:
    """``serve --workers 2``: a poll reaching the worker that does not own the instance is forwarded to its
    sibling; the answers are alike with the direct way on and off."""
    seen = []
    for direct in ("true", "false"):
        (tmp_path / direct).mkdir()
        gateway = await asyncio.to_thread(
            start_workers, tmp_path / direct, 2, env={"TUBEMQ_GATEWAY_HTTP__DIRECT_POLL": direct}
        )
        try:
            body = json.dumps({"topics": ["demo"]}).encode()
            created = (
                await talk(gateway.http_port, [request("POST", f"/v1/consumers/{GROUP}", JSON, body)])
            )[0]
            instance = json.loads(created.partition(b"\r\n\r\n")[2])["instanceId"]
            path = f"/v1/consumers/{GROUP}/instances/{instance}/messages"
            answers = []
            for _ in range(8):  # new connections: either worker
                answers += await talk(
                    gateway.http_port,
                    [
                        request("GET", path + "?timeout_ms=20", {}),
                        request("GET", path + "?max_messages=0", {}),
                    ],
                )
        finally:
            await asyncio.to_thread(gateway.stop)
        seen.append([_masked(a)[2] for a in answers])
        assert _statuses([_masked(a) for a in answers]) == [200, 400] * 8
    assert seen[0] == seen[1]


async def test_a_workers_private_listener_serves_polls_the_direct_way(clusters: Any, tmp_path: Path) -> None:
    """A worker's private listener (``gateway/api/worker_listener.py``, where siblings forward polls) answers
    polls below ASGI too, with the scope that listener gives (the hop believed, a relayed certificate subject
    as the TLS extension), alike both ways; its own metrics path goes the ASGI way."""
    seen = []
    async with _pair(clusters) as gateways:
        for i, gateway in enumerate(gateways):
            path = await _instance(gateway, {})
            where = str(tmp_path / f"w{i}.sock")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(where)
            settings = gateway.runtime.settings
            server = uvicorn.Server(
                http_config(settings, private_app(gateway.app), log_level=None, lifespan="off")
            )
            hop = {WORKER_HOP_HEADER: "1", CLIENT_CERT_HEADER: "Q049c2libGluZw=="}
            requests = [
                request("GET", path + "?timeout_ms=10", hop),
                request("GET", path + "?timeout_ms=10", {}),
                request("GET", f"/v1/consumers/{GROUP}/instances/nope/messages", hop),
                request("GET", OWN_METRICS_PATH, {WORKER_TOKEN_HEADER: "wrong"}),
            ]
            with counting_direct(pytest.MonkeyPatch()) as served:
                async with uvicorn_serving(server, [sock]):
                    reader, writer = await asyncio.open_unix_connection(where)
                    answers = []
                    for raw in requests:
                        writer.write(raw)
                        answers.append(_masked(await read_answer(reader)))
                    writer.close()
            sock.close()
            seen.append((answers, len(served)))
    assert seen[0][0] == seen[1][0]
    assert _statuses(seen[0][0]) == [200, 200, 404, 404]
    assert (seen[0][1], seen[1][1]) == (3, 0)
