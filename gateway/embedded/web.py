"""The embedded master's and brokers' web API: the read-only subset of TubeMQ's admin HTTP API in use.

A real TubeMQ master serves ``/webapi.htm?type=op_query&method=...`` on its ``webPort`` (the master's
``WebBrokerConfHandler``, ``WebOtherInfoHandler``), a broker serves ``?method=...`` on its own ``webPort``
(``BrokerAdminServlet``, any path). Both answer JSON with ``result``, ``errCode`` and ``errMsg``. The
methods served here, with the fields the real ones give:

* master ``admin_query_broker_configure``: every broker (``brokerId``, ``brokerIp``, ``brokerPort``,
  ``brokerWebPort``, ``manageStatus``, ``acceptPublish``, ``acceptSubscribe``...) in ``data``;
* master ``admin_query_sub_info`` (``groupName``: a comma list): each group with consumers, its
  ``consumerNum`` and ``topicSet``;
* master ``admin_query_consume_group_detail`` (``consumeGroup``): the group's consumers in ``data``
  (``consumerId``, ``parCount``...), their number in ``count``, the topics in ``topicSet``;
* broker ``admin_query_offset`` (``groupName``, ``topicName``: comma lists, empty = all booked groups /
  their topics): per group, per topic, per partition ``curOffset``, ``flightOffset``, ``offsetMax``,
  ``offsetLag`` (index bytes: 28 per message), ``dataMax``, ``curDataOffset`` and ``dataLag`` (-2: unknown);
* broker ``admin_get_booked_groupname``: the groups holding offsets on the broker.

The server is a bare HTTP/1.1 GET endpoint on loopback (one request per connection, bounded request size
and time): enough for the gateway's offsets reader and tests, standard library only (the embedded cluster
builds on the core alone).

A request's head is bounded as the real nodes bound it: both run Jetty 9.4 with its default
``requestHeaderSize`` (the master's and the broker's ``WebServer`` build ``new Server(webPort)``), 8 KiB for
the request line and header lines together. A request target over 8 KiB is answered ``414 URI Too Long``, a
longer head ``431 Request Header Fields Too Large``, each with Jetty's HTML body; no more than the bound and
its blank line is read. (Jetty does not count the header fields it knows by heart, such as
``Connection: close``, so the real bound lets through up to a few dozen bytes more.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gateway.embedded.listen import Listening, StartServer, tcp_server

__all__ = ["WebApi", "WebHandler", "fail"]

log = logging.getLogger("gateway.embedded.web")

#: a request's head (request line and header lines, without the blank line) longer than this is refused
#: (Jetty's default requestHeaderSize, which the real master and brokers run with)
MAX_HEAD_BYTES = 8 * 1024
#: Jetty's answers to a head over the bound: status, reason
URI_TOO_LONG = (414, "URI Too Long")
HEAD_TOO_LARGE = (431, "Request Header Fields Too Large")
#: seconds a client has to send its request
REQUEST_TIMEOUT = 5.0

WebHandler = Callable[[str, Mapping[str, str]], dict[str, Any]]


def fail(message: str, code: int = 400) -> dict[str, Any]:
    """A failed answer as the real web API gives it."""
    return {"result": False, "errCode": code, "errMsg": message}


class WebApi:
    """An HTTP server answering ``?method=NAME&k=v`` with ``handler(NAME, params)`` as JSON."""

    def __init__(
        self,
        handler: WebHandler,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "web",
        start_server: StartServer = tcp_server,
    ) -> None:
        self.handler = handler
        self.host = host
        self.name = name
        self._port = port
        self._start_server = start_server
        self._server: Listening | None = None
        # connections being served: closed by stop() (Python 3.11's Server.wait_closed does not wait for
        # them, so a client that connected and never sent would leave its task pending past the loop)
        self._open: set[asyncio.StreamWriter] = set()

    def __repr__(self) -> str:
        return f"<WebApi {self.name} {self.host}:{self._port} {'up' if self._server else 'down'}>"

    @property
    def port(self) -> int:
        return self._port

    async def start(self) -> None:
        self._server, self._port = await self._start_server(self._serve, self.host, self._port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            for writer in list(self._open):
                writer.transport.abort()
            await server.wait_closed()
            for _ in range(100):  # the aborted connections' handlers end within a few loop turns
                if not self._open:
                    break
                await asyncio.sleep(0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            await self._exchange(reader, writer)
        finally:
            self._open.discard(writer)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(_read_head(reader), REQUEST_TIMEOUT)
            status, reason, content_type, data = self._reply(head)
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            status, reason, content_type, data = _json(400, fail("bad request"))
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    def _reply(self, head: bytes) -> tuple[int, str, str, bytes]:
        """Status, reason, content type and body of the answer to a request's ``head``."""
        refused = _oversize(head)
        if refused is not None:
            status, reason = refused
            page = f"<h1>Bad Message {status}</h1><pre>reason: {reason}</pre>"
            return status, reason, "text/html;charset=iso-8859-1", page.encode()
        return _json(*self._answer(head))

    def _answer(self, head: bytes) -> tuple[int, dict[str, Any]]:
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != "GET":
            return 400, fail("only GET is served")
        params = dict(parse_qsl(urlsplit(parts[1]).query, keep_blank_values=True))
        method = params.pop("method", "")
        try:
            return 200, self.handler(method, params)
        except Exception:  # a handler bug must not take the node down
            log.exception("web API method failed", extra={"node": self.name, "method": method})
            return 200, fail("internal error", 500)


def _json(status: int, body: dict[str, Any]) -> tuple[int, str, str, bytes]:
    reason = "OK" if status == 200 else "Bad Request"
    return status, reason, "application/json;charset=UTF-8", json.dumps(body, separators=(",", ":")).encode()


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    """The request's head with its blank line, or (a head over :data:`MAX_HEAD_BYTES`) its first
    ``MAX_HEAD_BYTES + 5`` bytes: no more is read."""
    head = b""
    while b"\r\n\r\n" not in head and len(head) <= MAX_HEAD_BYTES + 4:
        chunk = await reader.read(MAX_HEAD_BYTES + 5 - len(head))
        if not chunk:
            raise asyncio.IncompleteReadError(head, None)
        head += chunk
    return head


def _oversize(head: bytes) -> tuple[int, str] | None:
    """Jetty's refusal of a head over the bound: 414 when the request target alone is over it, else 431;
    None for a head within it."""
    end = head.find(b"\r\n\r\n")
    if end >= 0 and end + 2 <= MAX_HEAD_BYTES:
        return None
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if len(parts) > 1 and len(parts[1]) > MAX_HEAD_BYTES:
        return URI_TOO_LONG
    return HEAD_TOO_LARGE
