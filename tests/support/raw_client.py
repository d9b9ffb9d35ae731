"""A bare TubeMQ client for the embedded server's tests: hand-built request frames in, the parsed answer
envelopes out, so that a test can send what no real client would."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.embedded.server import RpcServer
from gateway.tubemq.wire.frame import Frame, decode_delimited, encode_delimited, encode_frame
from gateway.tubemq.wire.frame_decoder import FrameDecoder
from gateway.tubemq.wire.pb.RPC_pb2 import (
    RequestBody,
    RequestHeader,
    ResponseHeader,
    RpcConnHeader,
    RspExceptionBody,
    RspResponseBody,
)

#: the method id of a producer's heartbeat to the master, which the echo handler (faultproxy) answers
HEARTBEAT = 2


class RawClient:
    """A bare TubeMQ client: sends hand-built frames, returns the parsed answer envelopes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []

    @classmethod
    async def open(cls, server: RpcServer) -> RawClient:
        return cls(*await asyncio.open_connection(server.host, server.port))

    def send(
        self,
        serial: int,
        method: int,
        inner: bytes,
        *,
        service: int | None = 1,
        timeout_ms: int | None = 5000,
        version: int = 3,
    ) -> None:
        header = RequestHeader(protocolVer=version)
        if service is not None:
            header.serviceType = service
        body = RequestBody(method=method, request=inner)
        if timeout_ms is not None:
            body.timeout = timeout_ms
        payload = encode_delimited(
            RpcConnHeader(flag=0).SerializeToString(), header.SerializeToString(), body.SerializeToString()
        )
        self.writer.write(encode_frame(serial, payload))

    async def answer(
        self, wait: float = 2.0
    ) -> tuple[int, ResponseHeader, RspExceptionBody | RspResponseBody]:
        async with asyncio.timeout(wait):
            while not self.frames:
                data = await self.reader.read(65536)
                assert data, "server closed the link"
                self.frames.extend(self.decoder.feed(data))
        frame = self.frames.pop(0)
        conn_raw, head_raw, body_raw = decode_delimited(frame.payload, 3)
        assert RpcConnHeader.FromString(conn_raw).flag == 1
        head = ResponseHeader.FromString(head_raw)
        body: RspExceptionBody | RspResponseBody
        if head.status == 0:
            body = RspResponseBody.FromString(body_raw)
        else:
            body = RspExceptionBody.FromString(body_raw)
        return frame.serial, head, body

    async def no_answer(self, wait: float) -> None:
        with pytest.raises(TimeoutError):
            await self.answer(wait)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()
