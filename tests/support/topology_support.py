"""The production topology's harness: gateway replicas (``serve --workers 2`` each) on one embedded cluster,
behind a real nginx balancing REST (``proxy_pass``) and gRPC (``grpc_pass``) round robin without affinity.
nginx comes from the Debian package (``scripts/ensure_nginx.sh``); without it the tests skip, saying so."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from tests.support.serving import free_port
from tests.support.workers_support import WorkerGateway

SECRET = "topology-shared-secret-0123456789"


def nginx_binary() -> str:
    """The nginx binary (Debian's package); the test skips, saying so, without it."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found is None:
        pytest.skip("nginx not found: install the Debian package 'nginx' (scripts/ensure_nginx.sh does it)")
    return found


@dataclass
class Replica:
    """One gateway replica (``serve --workers 2``, started by the test) on its HTTP and gRPC ports."""

    name: str
    http_port: int
    grpc_port: int
    gateway: WorkerGateway | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def pids(self) -> list[int]:
        assert self.gateway is not None
        workers = [r["pid"] for r in self.gateway.records() if r.get("msg") == "worker process started"]
        return [self.gateway.proc.pid, *workers]


def replica_env(cluster: EmbeddedCluster, replica: Replica, everyone: list[Replica]) -> dict[str, str]:
    """The environment of ``replica``'s serve process: one of ``everyone``, forwarding to each other."""
    ports = [p for r in everyone for p in (r.http_port, r.grpc_port)]
    return {
        "TUBEMQ_GATEWAY_MASTERS": str(cluster.master_address),
        "TUBEMQ_GATEWAY_CONSUMERS__REPLICAS": str(len(everyone)),
        "TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET": SECRET,
        "TUBEMQ_GATEWAY_CONSUMERS__ADVERTISED_URL": replica.url,
        "TUBEMQ_GATEWAY_CONSUMERS__FORWARD_ALLOW": '["127.0.0.1"]',
        "TUBEMQ_GATEWAY_CONSUMERS__FORWARD_PORTS": json.dumps(ports),
        "TUBEMQ_GATEWAY_CONSUMERS__ASSIGNMENT_WAIT": "10",
        "TUBEMQ_GATEWAY_TUBEMQ__MASTER_WEB_PORT": str(cluster.master_web.port),
        "TUBEMQ_GATEWAY_TUBEMQ__GROUP_LAG_INTERVAL": "1",
        "TUBEMQ_GATEWAY_PRODUCER__HEARTBEAT_INTERVAL": "1",
    }


def nginx_config(directory: Path, replicas: list[Replica], http_port: int, grpc_port: int) -> Path:
    http_servers = "".join(f"server 127.0.0.1:{r.http_port};" for r in replicas)
    grpc_servers = "".join(f"server 127.0.0.1:{r.grpc_port};" for r in replicas)
    temp = "".join(
        f"{kind}_temp_path {directory / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;" if os.geteuid() == 0 else ""
    config = f"""
{user}
worker_processes 1;
daemon off;
pid {directory / "nginx.pid"};
error_log {directory / "error.log"} warn;
events {{ worker_connections 512; }}
http {{
  access_log off;
  {temp}
  upstream gw_http {{ {http_servers} keepalive 8; }}
  upstream gw_grpc {{ {grpc_servers} }}
  server {{
    listen 127.0.0.1:{http_port};
    location / {{
      proxy_pass http://gw_http;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_buffering off;
      proxy_read_timeout 60s;
    }}
  }}
  server {{
    listen 127.0.0.1:{grpc_port} http2;
    location / {{
      grpc_pass grpc://gw_grpc;
      grpc_read_timeout 60s;
    }}
  }}
}}
"""
    path = directory / "nginx.conf"
    path.write_text(config, encoding="utf-8")
    return path


@contextlib.contextmanager
def running_nginx(directory: Path, replicas: list[Replica]) -> Iterator[tuple[str, str]]:
    """nginx in front of ``replicas``: yields its HTTP base URL and its gRPC target."""
    nginx = nginx_binary()
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (directory / kind).mkdir(parents=True, exist_ok=True)
    http_port, grpc_port = free_port(), free_port()
    config = nginx_config(directory, replicas, http_port, grpc_port)
    checked = subprocess.run(
        [nginx, "-t", "-c", str(config), "-p", str(directory)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    proc = subprocess.Popen([nginx, "-c", str(config), "-p", str(directory)], stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            assert proc.poll() is None, (directory / "error.log").read_text()
            with contextlib.suppress(OSError), httpx.Client() as probe:
                probe.get(f"http://127.0.0.1:{http_port}/livez", timeout=2)
                break
            assert time.monotonic() < deadline, "nginx did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@asynccontextmanager
async def cluster_of(*topics: TopicSpec, consumer_timeout: float = 30.0) -> AsyncIterator[EmbeddedCluster]:
    """An embedded cluster of ``topics`` balancing every half second, stopped on exit; a consumer silent for
    ``consumer_timeout`` seconds is released by its master and brokers."""
    cluster = EmbeddedCluster(list(topics), balance_period=0.5, consumer_timeout=consumer_timeout)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()
