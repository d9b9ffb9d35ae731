"""The Spark source's gateway mode against a gateway that requires authentication: ``gatewayToken``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from auth_support import secure_gateway

from gateway.spark import rest
from gateway.spark.options import SourceOptions


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
