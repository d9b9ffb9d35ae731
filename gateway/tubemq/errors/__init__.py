"""The one exception tree of the TubeMQ client core.

Every error the core raises is a :class:`TubeMQError`; the service layer and the REST/gRPC adapters
translate this tree once, at their boundary::

    TubeMQError                          retriable: bool (class default, some instances override)
    ├── ProtocolError                    the peer sent bytes we cannot parse; the link must close
    │                                    (frame.FrameError, rpc decode errors subclass it)
    ├── TransportError                   retriable; the link failed, the request may be resent
    │   ├── ConnectError                 could not open (or TLS-handshake) the TCP link
    │   ├── ConnectionClosed             the link closed while the request was pending
    │   └── RequestTimeout               no answer within the request's timeout
    ├── RemoteException                  an RPC ERROR/FATAL answer (RspExceptionBody, §8.2):
    │   │                                status, exception_name, message; built by remote_exception()
    │   ├── StandbyException             switch_node: the master is a standby, use another one
    │   ├── ServerNotReadyException      switch_node: the RPC server has not started yet
    │   ├── UnknownProtocolException     switch_node: the node could not decode our frames
    │   └── ServiceStoppingException     the node is shutting down; use another node or retry later
    ├── ServerError                      an errCode answer inside a SUCCESS response (§8.1):
    │   │                                errno, message, retriable; built by for_code()
    │   ├── Moved (301), BadRequest (400), Unauthorized (401), Forbidden (403), NoData (404),
    │   ├── PartitionOccupied (410), HeartbeatNoNode (411), DuplicatePartition (412),
    │   ├── CertificateFailure (415), ServerReceiveOverflow (419),
    │   ├── InconsistentConsumeType (424) ... TopicNotDeployed (431),
    │   ├── ConsumeGroupForbidden (450), ConsumeSpeedLimit (452), ConsumeContentForbidden (455),
    │   └── InternalServerError (500), ServiceUnavailable (503)
    └── ClientError                      a local check failed; nothing was sent
        ├── InvalidAttribute             also a ValueError: bad message attribute key or value
        │   └── InvalidMessage           a field of a message to publish breaks a publish rule; names it
        ├── MessageTooLarge              body + attributes exceed the topic's limit
        ├── TopicNotPublished            the producer has not published the topic
        ├── NoPartition                  the topic has no partition available for sending
        │   └── PartitionsAway           retriable: it had partitions, its brokers are offline now
        └── ClientClosed                 the producer/consumer/session was closed

``retriable`` means "the same request may succeed if sent again later (possibly to another node)".

The kinds live in their own modules: the root in :mod:`.base`, protocol and transport failures in
:mod:`.transport`, RPC exception answers in :mod:`.remote`, errCode answers in :mod:`.server` and local
checks in :mod:`.client`; this module re-exports every name, so ``from gateway.tubemq.errors import ...``
takes any of them.
"""

from __future__ import annotations

from gateway.tubemq.errors.base import (
    TubeMQError,
)
from gateway.tubemq.errors.client import (
    ClientClosed,
    ClientError,
    InvalidAttribute,
    InvalidMessage,
    MessageTooLarge,
    NoPartition,
    PartitionsAway,
    TopicNotPublished,
)
from gateway.tubemq.errors.remote import (
    STATUS_ERROR,
    STATUS_FATAL,
    RemoteException,
    ServerNotReadyException,
    ServiceStoppingException,
    StandbyException,
    UnknownProtocolException,
    remote_exception,
)
from gateway.tubemq.errors.server import (
    BadRequest,
    CertificateFailure,
    ConsumeContentForbidden,
    ConsumeGroupForbidden,
    ConsumeSpeedLimit,
    DuplicateIndexId,
    DuplicatePartition,
    Forbidden,
    HeartbeatNoNode,
    InconsistentConsumeType,
    InconsistentFilterSet,
    InconsistentSelectBig,
    InconsistentSessionKey,
    InconsistentSourceCount,
    InconsistentTopicSet,
    InternalServerError,
    Moved,
    NoData,
    PartitionOccupied,
    ServerError,
    ServerReceiveOverflow,
    ServiceUnavailable,
    TopicNotDeployed,
    Unauthorized,
    for_code,
)
from gateway.tubemq.errors.transport import (
    ConnectError,
    ConnectionClosed,
    ProtocolError,
    RequestTimeout,
    TransportError,
)

__all__ = [
    "STATUS_ERROR",
    "STATUS_FATAL",
    "BadRequest",
    "CertificateFailure",
    "ClientClosed",
    "ClientError",
    "ConnectError",
    "ConnectionClosed",
    "ConsumeContentForbidden",
    "ConsumeGroupForbidden",
    "ConsumeSpeedLimit",
    "DuplicateIndexId",
    "DuplicatePartition",
    "Forbidden",
    "HeartbeatNoNode",
    "InconsistentConsumeType",
    "InconsistentFilterSet",
    "InconsistentSelectBig",
    "InconsistentSessionKey",
    "InconsistentSourceCount",
    "InconsistentTopicSet",
    "InternalServerError",
    "InvalidAttribute",
    "InvalidMessage",
    "MessageTooLarge",
    "Moved",
    "NoData",
    "NoPartition",
    "PartitionOccupied",
    "PartitionsAway",
    "ProtocolError",
    "RemoteException",
    "RequestTimeout",
    "ServerError",
    "ServerNotReadyException",
    "ServerReceiveOverflow",
    "ServiceStoppingException",
    "ServiceUnavailable",
    "StandbyException",
    "TopicNotDeployed",
    "TopicNotPublished",
    "TransportError",
    "TubeMQError",
    "Unauthorized",
    "UnknownProtocolException",
    "for_code",
    "remote_exception",
]
