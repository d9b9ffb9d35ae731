"""TubeMQ client authentication: the signed credentials a client presents to masters and brokers (§9).

The signature is the Java client's (``TStringUtils.getAuthSignature``)::

    signature = form-url-encode(base64(HMAC-SHA1(key=password, msg=userName + timestamp + nonce)))

with ``timestamp`` in ms since the epoch and ``nonce`` a random int in ``[0, 2**31 - 1)``, all as UTF-8.

* Masters get ``MasterCertificateInfo.authInfo = AuthenticateInfo{userName, timestamp, nonce, othParams="",
  signature}``. A master with authentication on checks ``authInfo`` on every producer and consumer call
  (``SimpleCertificateMasterHandler``: non-blank user name and signature, timestamp within its window, 20 s
  by default), so :meth:`Credentials.stamp_master_request` puts a fresh one into every master request
  (the Java client sends it on register only and would be refused on its heartbeats by such a master).
* Brokers get ``AuthorizedInfo{visitAuthorizedToken, authAuthorizedToken}``: the master's
  ``authAuthorizedToken`` when it handed one out, else the broker token ``"userName timestamp nonce
  signature"`` (the Java consumer's ``genBrokerAuthenticateToken``). A broker with authentication on
  refuses a blank token (415).

The password never leaves this module except inside a signature: ``repr`` and ``str`` hide it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from urllib.parse import quote_plus

from google.protobuf.message import Message

from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb

__all__ = ["Credentials", "auth_signature", "parse_broker_token"]

_NONCE_BOUND = 2**31 - 1  # Java: SecureRandom.nextInt(Integer.MAX_VALUE), so [0, 2**31 - 2]


def auth_signature(username: str, password: str, timestamp_ms: int, nonce: int) -> str:
    """The signature the Java client computes for ``username`` at ``timestamp_ms`` with ``nonce``."""
    message = f"{username}{timestamp_ms}{nonce}".encode()
    mac = hmac.new(password.encode(), message, hashlib.sha1).digest()
    return quote_plus(base64.b64encode(mac).decode("ascii"), safe="")


def parse_broker_token(token: str) -> tuple[str, int, int, str] | None:
    """Split a broker token ``"userName timestamp nonce signature"``; None when it has another shape."""
    parts = token.split(" ")
    if len(parts) != 4 or not parts[0] or not parts[3]:
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2]), parts[3]
    except ValueError:
        return None


class Credentials:
    """A TubeMQ user name and password, and the signed tokens made from them.

    ``broker_token_ttl`` (seconds) is how long one broker token is reused before a fresh one is signed
    (brokers get one with every send, so signing each time would cost on the hot path; the shipped broker
    does not check its age). ``clock_ms`` returns wall-clock milliseconds (injectable for tests).
    """

    __slots__ = ("_broker_token", "_clock_ms", "_password", "_token_expires", "_ttl_ms", "username")

    def __init__(
        self,
        username: str,
        password: str,
        *,
        broker_token_ttl: float = 5.0,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if not username.strip() or username != username.strip():
            raise ValueError("the TubeMQ user name must be non-blank and carry no surrounding spaces")
        if " " in username:
            raise ValueError("the TubeMQ user name must not contain spaces (broker tokens are space-split)")
        if not password:
            raise ValueError("the TubeMQ password must not be empty (it is the signature's HMAC key)")
        self.username = username
        self._password = password
        self._ttl_ms = int(broker_token_ttl * 1000)
        self._clock_ms = clock_ms or _wall_ms
        self._broker_token = ""
        self._token_expires = 0

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=<hidden>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Credentials):
            return NotImplemented
        same = hmac.compare_digest(self._password.encode(), other._password.encode())
        return self.username == other.username and same

    def __hash__(self) -> int:
        return hash(self.username)

    def __reduce__(self) -> tuple[object, ...]:
        # Picklable for Spark tasks; the password travels only inside the pickle, never in a repr.
        return (Credentials, (self.username, self._password))

    def signed(self, timestamp_ms: int | None = None, nonce: int | None = None) -> tuple[int, int, str]:
        """A fresh ``(timestamp, nonce, signature)``; the arguments pin them for tests."""
        timestamp = self._clock_ms() if timestamp_ms is None else timestamp_ms
        nonce = secrets.randbelow(_NONCE_BOUND) if nonce is None else nonce
        return timestamp, nonce, auth_signature(self.username, self._password, timestamp, nonce)

    def verify(self, username: str, timestamp_ms: int, nonce: int, signature: str) -> bool:
        """Whether ``signature`` is what these credentials sign for the given values (server side)."""
        expected = auth_signature(self.username, self._password, timestamp_ms, nonce)
        return username == self.username and hmac.compare_digest(signature.encode(), expected.encode())

    def authenticate_info(self) -> master_pb.AuthenticateInfo:
        """A freshly signed ``AuthenticateInfo`` for a master call."""
        timestamp, nonce, signature = self.signed()
        return master_pb.AuthenticateInfo(
            userName=self.username, timestamp=timestamp, nonce=nonce, othParams="", signature=signature
        )

    def broker_token(self) -> str:
        """``"userName timestamp nonce signature"``, re-signed once older than ``broker_token_ttl``."""
        now = self._clock_ms()
        if now >= self._token_expires:
            timestamp, nonce, signature = self.signed(now)
            self._broker_token = f"{self.username} {timestamp} {nonce} {signature}"
            self._token_expires = now + self._ttl_ms
        return self._broker_token

    def stamp_master_request(self, request: Message, authorized_token: str | None = None) -> None:
        """Put fresh credentials into ``request.authInfo`` (a ``MasterCertificateInfo``) if it has one."""
        if _auth_field(request) is not _MASTER:
            return
        certificate: master_pb.MasterCertificateInfo = request.authInfo  # type: ignore[attr-defined]
        certificate.authInfo.CopyFrom(self.authenticate_info())
        if authorized_token:
            certificate.authorizedToken = authorized_token

    def stamp_broker_request(self, request: Message) -> None:
        """Fill a blank ``request.authInfo.authAuthorizedToken`` (an ``AuthorizedInfo``: send, partition
        register/unregister, broker heartbeat) with the broker token; a master-provided one is kept."""
        if _auth_field(request) is not _BROKER:
            return
        info: broker_pb.AuthorizedInfo = request.authInfo  # type: ignore[attr-defined]
        if not info.authAuthorizedToken:
            info.authAuthorizedToken = self.broker_token()


_MASTER = "master"
_BROKER = "broker"
_NONE = "none"
_AUTH_FIELDS: dict[str, str] = {}


def _auth_field(request: Message) -> str:
    """What the request's ``authInfo`` field is: a master certificate, a broker AuthorizedInfo, or none."""
    name = request.DESCRIPTOR.full_name
    kind = _AUTH_FIELDS.get(name)
    if kind is None:
        field = request.DESCRIPTOR.fields_by_name.get("authInfo")
        kind = _NONE
        if field is not None and field.message_type is not None:
            kind = {
                master_pb.MasterCertificateInfo.DESCRIPTOR.full_name: _MASTER,
                broker_pb.AuthorizedInfo.DESCRIPTOR.full_name: _BROKER,
            }.get(field.message_type.full_name, _NONE)
        _AUTH_FIELDS[name] = kind
    return kind


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000
