"""Requests that offer a protocol upgrade the gateway does not take (``Upgrade: h2c``) are served as the
plain HTTP/1.1 requests they also are, body included.

Java's ``HttpClient`` (its default version is HTTP/2) and Spring's ``RestClient`` offer ``Upgrade: h2c`` on
the first request of a plain-http connection, and RFC 9110 (7.8) lets a server ignore the offer. llhttp,
under uvicorn's httptools protocol, ends such a request at the end of its header section: it reports the
message complete with no body and stops at the body with ``HttpParserUpgrade``, and uvicorn only logs
"Unsupported upgrade request". The app then saw an empty body: a publish was refused as not JSON, and a
commit of some tokens (or a rollback) became ``{}``, a commit of everything delivered (upstream:
uvicorn issue #2722, open).

Here the premature "complete" is not passed on; the body that follows is read by a fresh parser, which is
first given a header section holding only the request's framing (Content-Length, or chunked
Transfer-Encoding) and whose callbacks go to the protocol's own ``on_body`` and ``on_message_complete``.
That parser then stays the connection's parser, now passing every callback on, so a request pipelined
behind the body is served as usual. A WebSocket upgrade, which this gateway does not serve either, takes
the same path.
"""

from __future__ import annotations

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["DeclinedUpgrade"]


class DeclinedUpgrade(HttpToolsProtocol):
    """Mixed in before uvicorn's httptools protocol (``http_guard.guarded_protocol``): replaces its
    ``data_received`` (the same, but for an upgrade offer) and holds back llhttp's early completion."""

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade as upgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
                return
            self._read_body_after_declined_upgrade(data[upgrade.args[0] :])

    def on_message_complete(self) -> None:
        if self.parser.should_upgrade() and not self._should_upgrade():
            return  # llhttp's end of the header section of an upgrade offer, not of the request
        super().on_message_complete()

    def _read_body_after_declined_upgrade(self, rest: bytes) -> None:
        framing = b"content-length: 0"
        for name, value in self.headers:
            if name == b"transfer-encoding" and b"chunked" in value.lower():
                framing = b"transfer-encoding: chunked"
                break
            if name == b"content-length":
                framing = b"content-length: " + value
        relay = _Relay(self)
        self.parser = httptools.HttpRequestParser(relay)
        try:  # llhttp took the framing header in the request's own head already
            self.parser.feed_data(b"POST / HTTP/1.1\r\n" + framing + b"\r\n\r\n")
        except httptools.HttpParserError:
            self.send_400_response("Invalid HTTP request received.")
            return
        if rest:
            self.data_received(rest)


class _Relay:
    """The callbacks of the parser that reads a declined upgrade's body: its own head is ignored, the body
    and the end go to the protocol, and from then on every callback (later requests) goes there too."""

    def __init__(self, protocol: DeclinedUpgrade) -> None:
        self.protocol = protocol
        self.reading_body = True  # its head's end is the body's start: an empty body ends there
        self.passing_on = False

    def on_message_begin(self) -> None:
        if self.passing_on:
            self.protocol.on_message_begin()

    def on_url(self, url: bytes) -> None:
        if self.passing_on:
            self.protocol.on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.passing_on:
            self.protocol.on_header(name, value)

    def on_headers_complete(self) -> None:
        if self.passing_on:
            self.protocol.on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self.passing_on or self.reading_body:
            self.protocol.on_body(body)

    def on_message_complete(self) -> None:
        if self.passing_on:
            self.protocol.on_message_complete()
        elif self.reading_body:
            self.reading_body = False
            self.passing_on = True
            self.protocol.on_message_complete()
