"""Local protocol and transport failures: unparsable bytes from a peer, a link that failed."""

from __future__ import annotations

from gateway.tubemq.errors.base import TubeMQError


class ProtocolError(TubeMQError):
    """The peer sent bytes that cannot be parsed; the byte stream is unusable and the link must close."""


class TransportError(TubeMQError):
    """The link to a node failed; the request was not answered and may be sent again."""

    retriable = True


class ConnectError(TransportError):
    """Opening the TCP (or TLS) link to a node failed."""


class ConnectionClosed(TransportError):
    """The link closed while the request was pending (or before it could be written)."""


class RequestTimeout(TransportError):
    """No answer arrived within the request's timeout."""
