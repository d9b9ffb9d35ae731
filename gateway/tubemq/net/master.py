"""Calls to the TubeMQ master with fail-over across the configured master addresses (§7.7).

The addresses are de-duplicated and sorted by their ``host:port`` text, as the Java client does, and a
rotating index picks the current master. A call goes to the current master; when the answer is a
``StandbyException`` or another remote IOException (``RemoteException.switch_node``), or the link fails
(``TransportError``: connect refused, lost link, timeout), the client moves to the next address and resends
the same request, up to one attempt per address. Any other remote exception is raised at once. When every
attempt failed, the last error is raised again (same class) with a message naming every master tried.

When the pool carries credentials (``pool.credentials``), every attempt carries a freshly signed
``authInfo`` (§9; see ``auth``): a master with authentication on checks it, and its timestamp, on every call.

The pool owns the links; moving on is just using another address. The client knows nothing about producers
or consumers: it carries any master method and returns the parsed response message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from gateway.tubemq.address import NodeAddress
from gateway.tubemq.errors import RemoteException, TransportError, TubeMQError

if TYPE_CHECKING:
    from gateway.tubemq.events import EventBus
    from gateway.tubemq.net.pool import ConnectionPool

__all__ = ["MasterClient", "MasterSwitched"]


@dataclass(frozen=True, slots=True)
class MasterSwitched:
    """Calls now go to ``current`` because ``previous`` failed with ``reason``."""

    previous: NodeAddress
    current: NodeAddress
    reason: str


class MasterClient:
    """Fail-over RPC to a list of masters.

    ``timeout`` (seconds) bounds each attempt; a call may take up to ``len(addresses)`` attempts.
    """

    def __init__(
        self,
        addresses: Sequence[NodeAddress],
        pool: ConnectionPool,
        *,
        timeout: float = 10.0,
        events: EventBus | None = None,
    ) -> None:
        unique = sorted(set(addresses), key=str)
        if not unique:
            raise ValueError("at least one master address is required")
        self._addresses: tuple[NodeAddress, ...] = tuple(unique)
        self._pool = pool
        self._timeout = timeout
        self._events = events
        self._index = 0

    def __repr__(self) -> str:
        return f"<MasterClient current={self.current} masters={','.join(map(str, self._addresses))}>"

    @property
    def addresses(self) -> tuple[NodeAddress, ...]:
        """Every master address, de-duplicated and sorted."""
        return self._addresses

    @property
    def current(self) -> NodeAddress:
        """The master the next call goes to first."""
        return self._addresses[self._index]

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def tls(self) -> bool:
        """Whether the masters are reached over TLS (their broker lists then name TLS ports)."""
        return self._pool.tls

    async def call(self, method: int, request: Message, *, timeout: float | None = None) -> Message:  # noqa: ASYNC109
        """Send ``request`` to the current master, failing over as described in the module docstring.

        ``timeout`` (seconds) overrides the per-attempt timeout given at construction.
        """
        per_attempt = self._timeout if timeout is None else timeout
        failures: list[tuple[NodeAddress, TubeMQError]] = []
        credentials = self._pool.credentials
        for _ in range(len(self._addresses)):
            address = self.current
            if credentials is not None:
                credentials.stamp_master_request(request)
            try:
                return await self._pool.request(address, method, request, per_attempt)
            except RemoteException as exc:
                if not exc.switch_node:
                    raise
                failures.append((address, exc))
            except TransportError as exc:
                failures.append((address, exc))
            self._advance(address, failures[-1][1])
        raise _all_failed(failures) from failures[-1][1]

    def _advance(self, failed: NodeAddress, error: TubeMQError) -> None:
        if self.current != failed:
            return  # a concurrent call has already moved on
        self._index = (self._index + 1) % len(self._addresses)
        if self._events is not None and len(self._addresses) > 1:
            self._events.emit(MasterSwitched(previous=failed, current=self.current, reason=str(error)))


def _all_failed(failures: list[tuple[NodeAddress, TubeMQError]]) -> TubeMQError:
    """The last error again, same class, with a message that names every master tried and why."""
    tried = "; ".join(f"{address}: {type(error).__name__}: {error}" for address, error in failures)
    text = f"no master answered ({len(failures)} tried): {tried}"
    last = failures[-1][1]
    if isinstance(last, RemoteException):
        return type(last)(last.status, last.exception_name, text)
    return type(last)(text)
