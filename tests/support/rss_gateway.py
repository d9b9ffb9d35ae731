"""A gateway in its own process for the memory tests: runtime and uvicorn on 127.0.0.1, port 0, on an
embedded cluster (in this process, or with ``"cluster_process": true`` in the settings, in a child process
of its own, so the gateway's RSS is measured without the broker's). Prints ``PORT <n>`` once serving;
settings come as JSON in argv[1] (merged into Settings). ``--cluster`` runs only the cluster (it prints
``MASTERS <addresses>`` and serves until stdin closes)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

import uvicorn

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.serve import http_config


async def serve(masters: str, extra: dict[str, object]) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    settings = Settings(
        masters=masters,
        http_host="127.0.0.1",
        http_port=port,
        **extra,  # type: ignore[arg-type]
    )
    runtime = Runtime(settings)
    await runtime.start()
    server = uvicorn.Server(http_config(settings, create_app(runtime=runtime), lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 (uvicorn offers no event)
        await asyncio.sleep(0.01)
    print(f"PORT {port}", flush=True)
    await task
    await runtime.stop()


def masters_of(cluster: EmbeddedCluster) -> str:
    return ",".join(str(a) for a in cluster.master_addresses)


async def in_process(extra: dict[str, object]) -> None:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1) as cluster:
        await serve(masters_of(cluster), extra)


def main(extra: dict[str, object]) -> None:
    if not extra.pop("cluster_process", False):
        asyncio.run(in_process(extra))
        return
    child = subprocess.Popen(
        [sys.executable, __file__, "--cluster"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("MASTERS "), line
        asyncio.run(serve(line.split()[1], extra))
    finally:
        child.kill()  # it would also end when its stdin closes with this process
        child.wait(10)


async def cluster_only() -> None:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1) as cluster:
        print(f"MASTERS {masters_of(cluster)}", flush=True)
        await asyncio.to_thread(sys.stdin.read)  # until the parent goes


if __name__ == "__main__":
    if sys.argv[1:] == ["--cluster"]:
        asyncio.run(cluster_only())
    else:
        main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
