"""The wire: TubeMQ's codecs, sans-IO (frames, RPC envelopes, metadata strings, message payloads).

This face is what the layers above the core use of the wire; the core's own modules and the embedded
cluster (a peer speaking the wire) import its modules directly. It imports nothing of ``net``.
"""

from gateway.tubemq.wire.attributes import ITEM_SEP, KV_SEP, RESERVED_IN_NAMES, RESERVED_IN_TEXT
from gateway.tubemq.wire.auth import Credentials
from gateway.tubemq.wire.client_id import consumer_id, local_ipv4
from gateway.tubemq.wire.meta import BrokerInfo, MetaFormatError, Partition
from gateway.tubemq.wire.methods import METHODS, Method
from gateway.tubemq.wire.payload import (
    BatchPreparer,
    PreparedMessage,
    format_msg_time,
    parse_msg_time,
    prepare_message,
)
from gateway.tubemq.wire.slots import slots_constructor
from gateway.tubemq.wire.speedups import ACTIVE as SPEEDUPS
from gateway.tubemq.wire.speedups import REASON as SPEEDUPS_REASON
from gateway.tubemq.wire.speedups import compiled_or

__all__ = [
    "ITEM_SEP",
    "KV_SEP",
    "METHODS",
    "RESERVED_IN_NAMES",
    "RESERVED_IN_TEXT",
    "SPEEDUPS",
    "SPEEDUPS_REASON",
    "BatchPreparer",
    "BrokerInfo",
    "Credentials",
    "MetaFormatError",
    "Method",
    "Partition",
    "PreparedMessage",
    "compiled_or",
    "consumer_id",
    "format_msg_time",
    "local_ipv4",
    "parse_msg_time",
    "prepare_message",
    "slots_constructor",
]
