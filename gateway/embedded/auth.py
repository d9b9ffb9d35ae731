"""Client authentication on the embedded master and brokers, answered like TubeMQ's shipped handlers (§9).

The master (``SimpleCertificateMasterHandler``) checks the ``authInfo`` of every producer call (methods 1-3)
when produce authentication is on, and of every consumer call (4-6, 20-22) when consume authentication is
on; a failure is an errCode 415 (CERTIFICATE_FAILURE) answer with the real master's message:

* ``Illegal value: authInfo.userName is Blank!`` / ``Illegal value: authInfo.signature is Blank!``
* ``Illegal value: timestamp out of effective period in authenticateToken!`` (``|now - timestamp|`` above
  ``window`` seconds; the real default is 20 s)

The shipped master leaves the password check to an external "certificate centre" (it checks only a broker's
signature, against ``visitName``/``visitPassword``). The embedded master checks client signatures the way
that broker check does, against the one configured account, with the same messages:
``Illegal value: userName is not equal in authenticateToken!`` and
``Illegal value: userName or password is not correct!``.

Brokers (``SimpleCertificateBrokerHandler``) refuse a send (produce) or a partition register/unregister or
heartbeat (consume) whose ``authAuthorizedToken`` is blank: 415 ``authAuthorizedToken is Blank!``. The
embedded broker also verifies the token's signature (``userName timestamp nonce signature``), answering 415
``Illegal value: userName or password is not correct!``; the shipped one hands it to the certificate centre.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import Message

from gateway.tubemq.wire.auth import Credentials, parse_broker_token
from gateway.tubemq.wire.pb import BrokerService_pb2 as broker_pb
from gateway.tubemq.wire.pb import MasterService_pb2 as master_pb
from gateway.tubemq.wire.rpc import Method

__all__ = ["CERTIFICATE_FAILURE", "ServerAuth", "refusal"]

CERTIFICATE_FAILURE = 415

_PRODUCER_METHODS = frozenset({Method.PRODUCER_REGISTER, Method.PRODUCER_HEARTBEAT, Method.PRODUCER_CLOSE})
_CONSUMER_METHODS = frozenset(
    {
        Method.CONSUMER_REGISTER,
        Method.CONSUMER_HEARTBEAT,
        Method.CONSUMER_CLOSE,
        Method.CONSUMER_REGISTER_V2,
        Method.CONSUMER_HEARTBEAT_V2,
        Method.CONSUMER_GET_PART_META,
    }
)
_BROKER_PRODUCE = frozenset({Method.SEND_MESSAGE})
_BROKER_CONSUME = frozenset({Method.CONSUMER_BROKER_REGISTER, Method.CONSUMER_BROKER_HEARTBEAT})

_WRONG = "Illegal value: userName or password is not correct!"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ServerAuth:
    """The account an embedded cluster accepts and what it authenticates.

    ``window`` (seconds) is the master's ``authValidTimeStampPeriodMs``; ``produce`` / ``consume`` are
    ``startProduceAuthenticate`` / ``startConsumeAuthenticate``.
    """

    credentials: Credentials
    window: float = 20.0
    produce: bool = True
    consume: bool = True
    clock_ms: Callable[[], int] = field(default=_wall_ms, repr=False)

    def _covers(self, method: int, produce_methods: frozenset[int], consume_methods: frozenset[int]) -> bool:
        return (self.produce and method in produce_methods) or (self.consume and method in consume_methods)

    def check_master_call(self, method: int, request: Message) -> str | None:
        """None when the call may proceed, else the 415 message of the refusal."""
        if not self._covers(method, _PRODUCER_METHODS, _CONSUMER_METHODS):
            return None
        certificate: master_pb.MasterCertificateInfo = request.authInfo  # type: ignore[attr-defined]
        info = certificate.authInfo
        if not info.userName.strip():
            return "Illegal value: authInfo.userName is Blank!"
        if not info.signature.strip():
            return "Illegal value: authInfo.signature is Blank!"
        if info.userName.strip() != self.credentials.username:
            return "Illegal value: userName is not equal in authenticateToken!"
        if abs(self.clock_ms() - info.timestamp) > self.window * 1000:
            return "Illegal value: timestamp out of effective period in authenticateToken!"
        user, signature = info.userName.strip(), info.signature.strip()
        if not self.credentials.verify(user, info.timestamp, info.nonce, signature):
            return _WRONG
        return None

    def check_broker_call(self, method: int, request: Message) -> str | None:
        """None when the call may proceed, else the 415 message of the refusal."""
        if not self._covers(method, _BROKER_PRODUCE, _BROKER_CONSUME):
            return None
        info: broker_pb.AuthorizedInfo = request.authInfo  # type: ignore[attr-defined]
        token = info.authAuthorizedToken
        if not token.strip():
            return "authAuthorizedToken is Blank!"
        parsed = parse_broker_token(token.strip())
        if parsed is None or not self.credentials.verify(*parsed):
            return _WRONG
        return None


def refusal(response: Message, message: str) -> Message:
    """``response`` (an empty answer of the call's type) filled as a 415 refusal, with the required fields
    the real server sets before its checks (``brokerCheckSum = -1``, ``currOffset = -1``)."""
    fields = response.DESCRIPTOR.fields_by_name
    if "success" in fields:
        response.success = False  # type: ignore[attr-defined]
    if "brokerCheckSum" in fields:
        response.brokerCheckSum = -1  # type: ignore[attr-defined]
    if isinstance(response, broker_pb.RegisterResponseB2C):
        response.currOffset = -1
    response.errCode = CERTIFICATE_FAILURE  # type: ignore[attr-defined]
    response.errMsg = message  # type: ignore[attr-defined]
    return response
