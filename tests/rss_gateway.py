"""A gateway in its own process for the memory tests: embedded cluster, runtime and uvicorn on 127.0.0.1,
port 0. Prints ``PORT <n>`` once serving; settings come as JSON in argv[1] (merged into Settings)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import uvicorn

from gateway.api.app import create_app
from gateway.config import Settings
from gateway.embedded.cluster import EmbeddedCluster
from gateway.embedded.topics import TopicSpec
from gateway.runtime import Runtime
from gateway.serve import http_config


async def main(extra: dict[str, object]) -> None:
    async with EmbeddedCluster([TopicSpec("demo", 2)], brokers=1) as cluster:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        settings = Settings(
            masters=",".join(str(a) for a in cluster.master_addresses),
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


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
