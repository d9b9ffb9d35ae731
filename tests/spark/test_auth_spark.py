"""The Spark source's gateway mode against a gateway that requires authentication: ``gatewayToken``, and
the lifetime of its cached HTTP clients."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from gateway.spark import rest
from gateway.spark.options import SourceOptions
from tests.support.auth_support import secure_gateway
from tests.support.files import ROOT


def test_the_token_is_an_option_of_the_gateway_mode_and_stays_out_of_repr() -> None:
    options = SourceOptions.parse(
        {"gateway": "http://127.0.0.1:1", "topic": "t", "gatewayToken": "tmq_secret"}
    )
    assert options.gateway_token == "tmq_secret" and "tmq_secret" not in repr(options)
    with pytest.raises(ValueError, match="needs option 'gateway'"):
        SourceOptions.parse({"masters": "127.0.0.1:8715", "topic": "t", "gatewayToken": "x"})


async def test_planning_and_writing_through_an_authenticated_gateway(tmp_path: Path) -> None:
    async with secure_gateway(tmp_path) as gw:
        base = {"gateway": gw.url, "topic": "demo", "timeout": "10"}
        written = SourceOptions.parse({**base, "gatewayToken": gw.files.keys["alice"]})
        # the gateway runs in this event loop: the blocking Spark client runs in a thread
        assert await asyncio.to_thread(rest.send_chunk, written, [(b"v", None, None, None, None)]) == 1
        planned = await asyncio.to_thread(rest.plan, written)
        assert len(planned) == 2
        anonymous = SourceOptions.parse(base)
        with pytest.raises(RuntimeError, match="401"):
            await asyncio.to_thread(rest.plan, anonymous)


async def test_cached_clients_are_closed_and_reopened(tmp_path: Path) -> None:
    async with secure_gateway(tmp_path) as gw:
        options = SourceOptions.parse(
            {"gateway": gw.url, "topic": "demo", "gatewayToken": gw.files.keys["alice"]}
        )
        assert len(await asyncio.to_thread(rest.plan, options)) == 2
        clients = list(rest._clients.values())
        assert clients and not any(client.is_closed for client in clients)
        rest.close_clients()
        assert all(client.is_closed for client in clients) and not rest._clients
        assert len(await asyncio.to_thread(rest.plan, options)) == 2  # a new client after closing
        rest.close_clients()


async def test_no_socket_is_left_open_at_exit(tmp_path: Path) -> None:
    """A process that used the gateway mode exits without an unclosed keep-alive socket (Python would warn
    at exit, after the garbage collector found it open)."""
    script = (
        "import sys\n"
        "from gateway.spark import rest\n"
        "from gateway.spark.options import SourceOptions\n"
        "gateway, token = sys.argv[1:]\n"
        "options = SourceOptions.parse({'gateway': gateway, 'topic': 'demo', 'gatewayToken': token})\n"
        "assert len(rest.plan(options)) == 2\n"
    )
    async with secure_gateway(tmp_path) as gw:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", script),
            *(gw.url, gw.files.keys["alice"]),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )
        _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert b"ResourceWarning" not in err and b"unclosed" not in err, err.decode()
