"""What a worker process knows of itself and its siblings (handed over by the supervisor)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["WorkerContext"]


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """Worker ``index`` of ``count`` in one gateway replica.

    ``socket_dir`` is the replica's private directory (mode 0700) holding each worker's private listeners,
    unix sockets (HTTP and gRPC) its siblings forward consumer requests to and read metrics from.
    ``embedded_masters`` are the master addresses of the embedded cluster the supervisor runs for the whole
    replica (empty when ``masters`` is configured).
    """

    index: int
    count: int
    socket_dir: Path
    embedded_masters: tuple[str, ...] = ()
    #: ``host:port`` of that embedded master's web API
    embedded_master_web: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"worker {self.index} is not one of {self.count} workers")

    def http_socket(self, worker: int) -> str:
        """The path of worker ``worker``'s private HTTP listener."""
        return str(self.socket_dir / f"w{worker}.sock")

    def grpc_socket(self, worker: int) -> str:
        """The path of worker ``worker``'s private gRPC listener."""
        return str(self.socket_dir / f"g{worker}.sock")

    def siblings(self) -> dict[int, str]:
        """The other workers' private HTTP listeners by index."""
        return {i: self.http_socket(i) for i in range(self.count) if i != self.index}
