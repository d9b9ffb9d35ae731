"""``tubemq-gateway serve`` as a user runs it: a real process, HTTP on a port, the embedded default."""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config import Settings
from gateway.process_server import served_urls
from tests.support.auth_support import write_auth_files
from tests.support.serve_support import http_ready, start_serve, stop_serve, wait_ready
from tests.support.serving import free_port


def test_serve_runs_on_the_embedded_cluster_and_publishes(tmp_path: Path) -> None:
    port = free_port()
    proc = start_serve(
        [
            *("--http-host", "127.0.0.1", "--http-port", str(port), "--grpc-port", str(free_port())),
            *("--embedded-topics", "orders:3", "--embedded-data-dir", str(tmp_path / "data")),
        ]
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(proc, http_ready(base))
        r = httpx.post(
            f"{base}/v1/topics/orders/messages", json={"messages": [{"value": "hi"}] * 3}, timeout=10
        )
        assert r.status_code == 200, r.text
        assert len(r.json()["results"]) == 3
        topic = httpx.get(f"{base}/v1/topics/orders", timeout=10).json()
        assert len(topic["partitions"]) == 3
    finally:
        code, _ = stop_serve(proc)
    assert code == 0
    # the embedded cluster kept the messages on disk
    assert any((tmp_path / "data").rglob("*.log"))


def _serve_until_ready(
    args: list[str], env: dict[str, str], while_ready: Callable[[int], None] | None = None
) -> str:
    """Runs ``serve`` with ``args`` until /readyz answers 200 (then calls ``while_ready`` with the HTTP
    port), stops it; its output."""
    port = free_port()
    proc = start_serve(["--http-port", str(port), *args], env)
    try:
        wait_ready(proc, http_ready(f"http://127.0.0.1:{port}"), timeout=60)
        time.sleep(0.5)  # every worker's start-up lines are out
        if while_ready is not None:
            while_ready(port)
    finally:
        code, output = stop_serve(proc)
    assert code == 0, output
    return output.replace(str(port), "PORT")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_names_the_console_url_once_and_does_not_warn_a_lone_replica(workers: str) -> None:
    out = _serve_until_ready(
        ["--http-host", "127.0.0.1", "--grpc-port", str(free_port()), "--workers", workers], {}
    )
    serving = [
        json.loads(line)
        for line in out.splitlines()
        if line.startswith('{"ts"') and '"msg":"serving ' in line
    ]
    assert len(serving) == 1, out
    assert serving[0]["msg"] == (
        "serving http://127.0.0.1:PORT: web console http://127.0.0.1:PORT/console, "
        "API docs http://127.0.0.1:PORT/docs"
    )
    assert serving[0]["console_url"] == "http://127.0.0.1:PORT/console"
    # a replica alone has no other replica's instances to forward to: nothing to warn about
    assert "forward_allow" not in out


def test_the_forward_allow_warning_stays_for_several_replicas() -> None:
    env = {
        "TUBEMQ_GATEWAY_CONSUMERS__REPLICAS": "2",
        "TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET": "a-secret-of-at-least-16-chars",
        "TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL": "http://127.0.0.1:8080",
    }
    out = _serve_until_ready(
        ["--http-host", "127.0.0.1", "--grpc-port", str(free_port()), "--workers", "1"], env
    )
    assert "consumers.forward_allow is empty" in out, out


def test_served_urls_follow_tls_the_admin_listener_and_the_console_setting() -> None:
    plain = Settings(http_host="0.0.0.0")
    assert served_urls(plain, 8080, None) == {
        "url": "http://localhost:8080",
        "docs_url": "http://localhost:8080/docs",
        "console_url": "http://localhost:8080/console",
    }
    v6 = Settings(http_host="::1", console={"enabled": False})
    assert served_urls(v6, 8080, None) == {"url": "http://[::1]:8080", "docs_url": "http://[::1]:8080/docs"}
    admin = Settings(
        http_host="127.0.0.1",
        admin={"port": 9100},
        console={"listener": "admin", "api_url": "http://127.0.0.1:8080"},
    )
    urls = served_urls(admin, 8080, 9100)
    assert urls["docs_url"] == "http://127.0.0.1:9100/docs"
    assert urls["console_url"] == "http://127.0.0.1:9100/console"


def _listening(port: int) -> set[str]:
    """The local addresses of the sockets listening on ``port`` (from /proc/net/tcp and tcp6; an IPv4 address
    mapped into IPv6 as the IPv4 address)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            address, port_hex = fields[1].split(":")
            if int(port_hex, 16) != port or fields[3] != "0A":  # 0A: LISTEN
                continue
            raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8))
            ip = ipaddress.ip_address(raw)
            mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
            found.add(str(mapped or ip))
    return found


@pytest.mark.parametrize("workers", ["1", "2"])
def test_open_mode_listens_on_loopback_unless_told_otherwise(workers: str, tmp_path: Path) -> None:
    """No http_host: an open gateway (auth.mode=open) binds HTTP and gRPC to 127.0.0.1 and says so; with
    authentication required it binds every address (it used to bind 0.0.0.0 open as well)."""
    grpc_port = free_port()
    seen: dict[str, set[str]] = {}

    def look(port: int) -> None:
        seen.update(http=_listening(port), grpc=_listening(grpc_port))

    out = _serve_until_ready(["--grpc-port", str(grpc_port), "--workers", workers], {}, look)
    assert seen == {"http": {"127.0.0.1"}, "grpc": {"127.0.0.1"}}, seen
    (said,) = [r for r in out.splitlines() if r.startswith('{"ts"') and "listening on" in r]
    assert '"msg":"listening on 127.0.0.1:PORT (gRPC 127.0.0.1:' in said and "this machine only" in said, said
    assert '"level":"info"' in said.lower() and '"host":"127.0.0.1"' in said, said

    files = write_auth_files(tmp_path)
    grpc_port = free_port()
    secured = files.environment(TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET="a-secret-of-at-least-16-chars")
    out = _serve_until_ready(["--grpc-port", str(grpc_port), "--workers", workers], secured, look)
    assert seen["http"] == {"0.0.0.0"} and seen["grpc"] in ({"0.0.0.0"}, {"::"}), seen  # gRPC: dual stack
    assert "listening on 0.0.0.0:PORT" in out and "authentication is required" in out


def test_an_open_gateway_on_every_address_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    from gateway.serve import log_listen_address

    with caplog.at_level("INFO", logger="gateway.serve"):
        log_listen_address(Settings(http_host="0.0.0.0"))
        log_listen_address(Settings(grpc={"host": "::"}))
    (everywhere, grpc_everywhere) = caplog.records
    assert everywhere.levelname == grpc_everywhere.levelname == "WARNING"
    assert "anyone who reaches these addresses" in everywhere.getMessage()
    assert Settings().http_host == "127.0.0.1"
    assert Settings(auth={"mode": "required", "api_keys_file": "k.json"}).http_host == "0.0.0.0"


def test_a_retry_topic_missing_from_the_embedded_cluster_is_refused_with_the_flag_that_adds_it() -> None:
    """The README's nack on ``serve``'s embedded default: the 404 names the retry topic and the ``serve``
    flag that starts the cluster with it; started as it says, the same instance is created and a nacked
    message comes back with its next delivery attempt."""
    common = ["--http-host", "127.0.0.1", "--workers", "1"]
    body = {"topics": ["demo"], "startPosition": "earliest", "retryTopic": "demo_retry"}
    advice: list[str] = []

    def refused(port: int) -> None:
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/consumers/g1", json=body, timeout=30)
        assert answer.status_code == 404, answer.text
        error = answer.json()["error"]
        assert error["field"] == "retryTopic" and "'demo_retry'" in error["message"], error
        found = re.search(r"serve (--embedded-topics \S+)", error["message"])
        assert found is not None, error["message"]
        advice.extend(found.group(1).split())

    _serve_until_ready([*common, "--grpc-port", str(free_port())], {}, refused)
    assert advice == ["--embedded-topics", "demo:1:4,demo_retry:1"]

    def nacked(port: int) -> None:
        base = f"http://127.0.0.1:{port}"
        created = httpx.post(f"{base}/v1/consumers/g1", json=body, timeout=30)
        assert created.status_code == 201, created.text
        instance = created.json()["baseUrl"]
        published = httpx.post(
            f"{base}/v1/topics/demo/messages", json={"messages": [{"value": "v"}]}, timeout=10
        )
        assert published.status_code == 200, published.text
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while not any(m["deliveryAttempt"] == 2 for m in seen):
            assert time.monotonic() < deadline, seen
            poll = httpx.get(
                f"{instance}/messages", params={"timeout_ms": 1000, "format": "utf8"}, timeout=10
            )
            assert poll.status_code == 200, poll.text
            for message in poll.json()["messages"]:
                seen.append(message)
                if message["deliveryAttempt"] == 1:
                    nack = httpx.post(
                        f"{instance}/nacks", json={"tokens": [message["token"]], "delayMs": 0}, timeout=10
                    )
                    assert nack.status_code == 200, nack.text
        assert [m["value"] for m in seen] == ["v", "v"]
        assert httpx.delete(instance, timeout=10).status_code == 204

    _serve_until_ready([*common, "--grpc-port", str(free_port()), *advice], {}, nacked)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_port_0_names_the_port_it_serves(workers: str) -> None:
    """``--http-port 0``: a free port is chosen before the replica's URL (and the consumer instance ids made
    from it) are, so the start-up line and the ids name the port that answers."""
    proc = start_serve(["--http-port", "0", "--grpc-port", "0", "--workers", workers])
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        url = None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            if '"msg":"serving ' in line:
                url = json.loads(line)["url"]
                break
            assert time.monotonic() < deadline, "no 'serving' line in 60 s"
        assert url is not None, "serve exited before it served"
        port = int(url.rsplit(":", 1)[1])
        assert port != 0, url
        r = httpx.post(f"{url}/v1/consumers/g0", json={"topics": ["demo"]}, timeout=10)
        assert r.status_code == 201, r.text
        owner = r.json()["instanceId"].split(".")[0]
        assert base64.urlsafe_b64decode(owner + "=" * (-len(owner) % 4)).decode().startswith(url), owner
        assert httpx.delete(
            f"{url}/v1/consumers/g0/instances/{r.json()['instanceId']}", timeout=10
        ).is_success
    finally:
        code, output = stop_serve(proc)
    assert code == 0, output
