"""The network: links to TubeMQ nodes, the pool that shares them, the master client, the broker breaker.

This face is what the layers above the core use of ``net``: the pool (``ConnectionPool``), the master
client, the events of links, pool and breaker (for metrics and logs), the teardown helpers, and the in-memory
network a pool and an embedded cluster can share instead of sockets; and the C allocator's thresholds that a
process moving answers sets at its start.
"""

from gateway.tubemq.net.allocator import retain_freed_memory
from gateway.tubemq.net.breaker import BreakerState, ShieldReason
from gateway.tubemq.net.connection import Outcome, RequestCompleted
from gateway.tubemq.net.link import CloseReason, ConnectionOpened, ConnectionTerminated
from gateway.tubemq.net.master import MasterClient, MasterSwitched
from gateway.tubemq.net.memory import MemoryNetwork
from gateway.tubemq.net.pool import ConnectionPool
from gateway.tubemq.net.pool_state import PoolConnectFailed, PoolLinkOpened, PoolLinkReclaimed
from gateway.tubemq.net.teardown import CloseOnce, cancel_and_wait

__all__ = [
    "BreakerState",
    "CloseOnce",
    "CloseReason",
    "ConnectionOpened",
    "ConnectionPool",
    "ConnectionTerminated",
    "MasterClient",
    "MasterSwitched",
    "MemoryNetwork",
    "Outcome",
    "PoolConnectFailed",
    "PoolLinkOpened",
    "PoolLinkReclaimed",
    "RequestCompleted",
    "ShieldReason",
    "cancel_and_wait",
    "retain_freed_memory",
]
