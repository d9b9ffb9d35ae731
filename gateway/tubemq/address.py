"""Network addresses of TubeMQ nodes (masters and brokers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class NodeAddress:
    """A ``host:port`` pair; the key under which the pool keeps links to a node."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str, default_port: int | None = None) -> NodeAddress:
        """Parse ``host:port`` (or ``[v6]:port``); ``default_port`` fills a missing port."""
        raw = text.strip()
        if not raw:
            raise ValueError("empty address: expected host:port")
        host, sep, port_text = raw.rpartition(":")
        if not sep or "]" in port_text:
            host, port_text = raw, ""
        host = host.strip("[]")
        if not port_text.strip():
            if default_port is None:
                raise ValueError(f"address {text!r} has no port: expected host:port")
            return cls(host, default_port)
        try:
            port = int(port_text)
        except ValueError:
            raise ValueError(f"address {text!r} has a non-numeric port") from None
        if not 0 < port < 65536 or not host:
            raise ValueError(f"address {text!r} is not a valid host:port")
        return cls(host, port)


def parse_address_list(text: str, default_port: int | None = None) -> list[NodeAddress]:
    """Parse ``host:port[,host:port...]``; blank items are skipped, duplicates removed, order kept."""
    seen: dict[NodeAddress, None] = {}
    for item in text.split(","):
        if item.strip():
            seen.setdefault(NodeAddress.parse(item, default_port), None)
    if not seen:
        raise ValueError("no address given: expected host:port[,host:port...]")
    return list(seen)
