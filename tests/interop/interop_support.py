"""Pieces of the interop suite: where the real cluster is, the project's Java driver of the real TubeMQ client
(compiled on first use against the harness's ``CLIENT_CP``), and a gateway (REST + gRPC) on the real master.

Environment:

* ``TUBEMQ_REAL_MASTER``: ``host:port`` of the real master; unset = every interop test is skipped.
* ``TUBEMQ_REAL_HOME``: the real cluster's harness directory (default ``/tmp/tubemq-real``): its ``env.sh``
  gives the Java client classpath, ``run/broker.pid`` and ``start.sh`` the broker stop/start cases, and
  ``create_topic.sh`` creates a missing topic. Without it the cases that need it are skipped.
* ``TUBEMQ_REAL_WEB``: the master's web API (default ``http://127.0.0.1:18080``), read-only use; empty: no
  web API, the topics must exist (this also runs the suite against the embedded cluster, to compare).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import uvicorn

from gateway.api.app import create_app
from gateway.config import ConsumerSettings, PoolSettings, ProducerSettings, Settings
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc
from gateway.grpc.server import GrpcServer
from gateway.runtime import Runtime
from tests.support.waiting import eventually

MASTER = os.environ.get("TUBEMQ_REAL_MASTER", "").strip()
HOME = Path(os.environ.get("TUBEMQ_REAL_HOME", "/tmp/tubemq-real"))
WEB = os.environ.get("TUBEMQ_REAL_WEB", "http://127.0.0.1:18080").rstrip("/")
SKIP_REASON = (
    "interop suite against a real TubeMQ cluster: set TUBEMQ_REAL_MASTER=host:port of its master "
    "(scripts/interop.sh does) to run it"
)
JAVA_SOURCE = Path(__file__).parent / "java" / "InteropClient.java"
#: the real master makes a new group's members ready after its balance delay (about 13 s on the harness)
GROUP_READY = 60.0
#: topics the suite uses and their partition counts; ``require_topic`` creates a missing one
DEMO = ("demo", 3)
GW4 = ("gw4", 4)
#: one partition in its own store: its messages sit in consecutive index entries (dense offsets)
SOLO = ("solo", 1)


def run_tag(prefix: str) -> str:
    """A value prefix unique to this run, so messages of earlier runs never match."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def group_name(prefix: str) -> str:
    return f"interop_{prefix}_{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------------------- the harness


def harness_env() -> dict[str, str]:
    """``env.sh`` of the harness as a dict; skips the test when there is none."""
    env_sh = HOME / "env.sh"
    if not env_sh.is_file():
        pytest.skip(f"no real-TubeMQ harness at {HOME} (set TUBEMQ_REAL_HOME): needed for the Java client")
    out = subprocess.run(
        ["bash", "-c", f'. "{env_sh}" >/dev/null && env -0'],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def web_query(method: str, **params: str) -> dict[str, Any]:
    """A read-only master web API call (``op_query``)."""
    response = httpx.get(
        f"{WEB}/webapi.htm", params={"type": "op_query", "method": method, **params}, timeout=20.0
    )
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def topic_state(topic: str) -> tuple[int, bool]:
    """(running partitions, accepts publish) of ``topic`` as the master reports them; (0, False) if absent."""
    data = web_query("admin_query_topic_info", topicName=topic)
    if not data.get("count"):
        return 0, False
    row = data["data"][0]
    return int(row.get("totalRunNumPartCount", 0)), bool(row.get("isSrvAcceptPublish"))


def require_topic(spec: tuple[str, int]) -> str:
    """The topic's name once it is publishable with its partition count; creates it with the harness's
    ``create_topic.sh`` when missing (about 90 s), or skips saying why."""
    name, partitions = spec
    if not WEB:
        return name
    try:
        running, publish = topic_state(name)
    except httpx.HTTPError as exc:
        pytest.skip(f"master web API {WEB} not answering ({exc}): cannot check topic {name}")
    if running == partitions and publish:
        return name
    script = HOME / "create_topic.sh"
    if not script.is_file():
        pytest.skip(f"topic {name} ({partitions} partitions) missing and no {script} to create it")
    done = subprocess.run([str(script), name, str(partitions)], capture_output=True, timeout=400)
    if done.returncode != 0:
        pytest.skip(f"could not create topic {name}: {done.stderr.decode(errors='replace')[-400:]}")
    return name


_COMPILED: dict[str, str] = {}


def java_command(tmp_root: Path) -> list[str]:
    """``java -cp ... InteropClient`` with the class compiled (once per run) into ``tmp_root``."""
    env = harness_env()
    if "cmd" not in _COMPILED:
        javac = shutil.which("javac")
        if javac is None or not env.get("CLIENT_CP"):
            pytest.skip("javac or the harness's CLIENT_CP missing: cannot build the Java interop client")
        out = tmp_root / "interop-java"
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [javac, "-d", str(out), "-cp", env["CLIENT_CP"], str(JAVA_SOURCE)],
            check=True,
            capture_output=True,
            timeout=180,
        )
        java = env.get("JAVA") or shutil.which("java") or "java"
        cmd = [java]
        if env.get("CLIENT_LOG4J"):
            cmd.append(env["CLIENT_LOG4J"])
        cmd += ["-cp", f"{env['CLIENT_CP']}{os.pathsep}{out}", "InteropClient"]
        _COMPILED["cmd"] = json.dumps(cmd)
    cmd_list: list[str] = json.loads(_COMPILED["cmd"])
    return cmd_list


@dataclass
class JavaClient:
    """One running InteropClient: its JSON events as they arrive."""

    proc: asyncio.subprocess.Process
    events: list[dict[str, Any]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stderr: list[str] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None
    err_reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            text = line.decode(errors="replace").strip()
            if text.startswith("{"):
                self.events.append(json.loads(text))
                self.changed.set()
        self.changed.set()

    async def _read_err(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace").rstrip())
            del self.stderr[:-40]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]

    def messages(self) -> list[dict[str, Any]]:
        return self.of("message")

    async def wait_for(self, check: Callable[[JavaClient], bool], within: float, what: str) -> None:
        deadline = time.monotonic() + within
        while not check(self):
            if self.reader is not None and self.reader.done():
                raise AssertionError(f"java client ended before {what}; stderr: {self.stderr[-10:]}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"timed out after {within}s waiting for {what}; stderr: {self.stderr[-10:]}"
                )
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))

    async def finish(self, timeout: float = 60.0) -> int:  # noqa: ASYNC109
        """Ask it to stop (consume mode) and wait for the exit; kills it after ``timeout``."""
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            with contextlib.suppress(OSError):
                self.proc.stdin.write(b"stop\n")
                await self.proc.stdin.drain()
                self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        for task in (self.reader, self.err_reader):
            if task is not None:
                await task
        assert self.proc.returncode is not None
        return self.proc.returncode


@asynccontextmanager
async def java_client(tmp_root: Path, *args: str) -> AsyncIterator[JavaClient]:
    """Run ``InteropClient args...`` (the master is prepended after the mode); stopped on exit."""
    cmd = java_command(tmp_root)
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        args[0],
        MASTER,
        *args[1:],
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(tmp_root),
    )
    client = JavaClient(proc)
    client.reader = asyncio.create_task(client._read())
    client.err_reader = asyncio.create_task(client._read_err())
    try:
        yield client
    finally:
        await client.finish()


async def java_produce(tmp_root: Path, topic: str, tag: str, count: int) -> list[dict[str, Any]]:
    """Send ``count`` messages with the real Java producer; their "sent" events (all must succeed)."""
    async with java_client(tmp_root, "produce", topic, tag, str(count)) as client:
        await client.wait_for(lambda c: bool(c.of("done")), 120.0, "the Java producer")
        sent = client.of("sent")
    failed = [e for e in sent if not e["ok"]]
    assert not failed, f"real Java producer failed: {failed[:3]}"
    return sent


async def java_consumer_ready(client: JavaClient) -> list[str]:
    """Wait until the Java consumer holds its partitions and fixed its start offsets; its partitions."""
    await client.wait_for(lambda c: bool(c.of("ready")), GROUP_READY, "the Java consumer to be ready")
    partitions: list[str] = client.of("ready")[0]["partitions"]
    return partitions


def java_held(client: JavaClient) -> list[str]:
    """The partitions the Java consumer reported holding last."""
    changes = [e for e in client.events if e["event"] in ("ready", "partitions")]
    return list(changes[-1]["partitions"]) if changes else []


def start_offsets(sent: list[dict[str, Any]]) -> dict[str, int]:
    """Per partition the index offset of the first of ``sent`` (Java "sent" events or REST publish
    results: both carry ``partitionKey`` and ``offset``)."""
    offsets: dict[str, int] = {}
    for event in sent:
        key = event["partitionKey"]
        offsets[key] = min(offsets.get(key, event["offset"]), event["offset"])
    return offsets


def decode_value(event: dict[str, Any]) -> bytes:
    return base64.b64decode(event["value"])


def attributes_of(raw: str | None) -> dict[str, str]:
    """The user attributes of a Java ``Message.getAttribute()`` string (system headers left out)."""
    result: dict[str, str] = {}
    for item in (raw or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key and not key.startswith("$"):
            result[key] = value
    return result


# ---------------------------------------------------------------------------------------- the gateway


@dataclass
class RealGateway:
    url: str
    runtime: Runtime
    http: httpx.AsyncClient
    grpc_stub: gateway_pb2_grpc.GatewayServiceStub


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def real_settings(port: int, **groups: Any) -> Settings:
    consumers: dict[str, Any] = {
        "heartbeat_interval": 5.0,
        "empty_fetch_wait": 0.1,
        "rebalance_commit_wait": 1.0,
        "assignment_wait": GROUP_READY,
        "sse_keepalive": 1.0,
        "poll_max_timeout": 30.0,
    }
    consumers.update(groups.pop("consumers", {}))
    producer: dict[str, Any] = {"heartbeat_interval": 2.0, "rpc_timeout": 5.0, "send_timeout": 10.0}
    producer.update(groups.pop("producer", {}))
    pool: dict[str, Any] = groups.pop("pool", {})
    return Settings(
        masters=groups.pop("masters", MASTER),
        http_host="127.0.0.1",
        http_port=port,
        producer=ProducerSettings(**producer),
        consumers=ConsumerSettings(**consumers),
        pool=PoolSettings(**pool),
        **groups,
    )


@asynccontextmanager
async def real_gateway(**groups: Any) -> AsyncIterator[RealGateway]:
    """A gateway on the real master: REST (uvicorn) and gRPC on ephemeral loopback ports, one Runtime."""
    sock = _bound_socket()
    port = sock.getsockname()[1]
    runtime = Runtime(real_settings(port, **groups))
    try:
        await runtime.start()
    except BaseException:
        sock.close()
        raise
    grpc_server = GrpcServer(runtime, grace=0.5)
    config = uvicorn.Config(
        create_app(runtime=runtime), log_config=None, log_level=None, access_log=False, lifespan="on"
    )
    server = uvicorn.Server(config)
    task: asyncio.Task[None] | None = None
    try:
        await grpc_server.start()
        task = asyncio.create_task(server.serve(sockets=[sock]))
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            await asyncio.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        async with (
            httpx.AsyncClient(base_url=url, timeout=60.0) as http,
            grpc.aio.insecure_channel(grpc_server.address) as channel,
        ):
            yield RealGateway(url, runtime, http, gateway_pb2_grpc.GatewayServiceStub(channel))
    finally:
        if task is not None:
            server.should_exit = True
            await task
        await grpc_server.stop(0)
        await runtime.stop()
        sock.close()


async def poll_tagged(
    http: httpx.AsyncClient, base: str, tag: str, timeout_ms: int = 2000
) -> list[dict[str, Any]]:
    """One poll of the instance at ``base``; messages of other runs are committed at once, this run's (values
    starting with ``tag``) are returned."""
    answer = await http.get(f"{base}/messages", params={"timeout_ms": timeout_ms, "format": "utf8"})
    assert answer.status_code == 200, answer.text
    messages = answer.json()["messages"]
    other = [m["token"] for m in messages if not str(m["value"]).startswith(tag)]
    if other:
        await http.post(f"{base}/commits", json={"tokens": other})
    return [m for m in messages if str(m["value"]).startswith(tag)]


async def wait_until(check: Callable[[], Any], timeout: float, what: str, step: float = 0.5) -> Any:  # noqa: ASYNC109
    """Await ``check()`` (sync or async) until truthy; its value. Fails the test after ``timeout``."""
    return await eventually(check, timeout, what, step)


# ---------------------------------------------------------------------------------------- broker stop/start


def broker_pid() -> int | None:
    """The harness broker's pid, only if the recorded pid really is that broker."""
    pid_file = HOME / "run" / "broker.pid"
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    if b"BrokerStartup" in cmdline and f"-Dtubemq.harness={HOME}".encode() in cmdline:
        return pid
    return None


def start_broker() -> None:
    done = subprocess.run([str(HOME / "start.sh")], capture_output=True, timeout=400)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-1000:]
