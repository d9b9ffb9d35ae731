"""Which replicas a gateway may forward a consumer instance's requests to.

An instance id names its owner's base URL (:mod:`gateway.service.instance_id`). Before anything connects
there, the URL must pass a :class:`PeerPolicy`, built from configuration only:

* the scheme is this replica's own advertised scheme (replicas of one deployment share it);
* the port is this replica's advertised port, or one of the configured extra ports;
* the host is an IP address inside one of the allowed networks (``10.0.0.0/8``, ``127.0.0.1``), or a name
  equal to an allowed name (``gw-0.gw.ns.svc``) or ending in an allowed suffix (``*.gw.ns.svc``). Names are
  compared as text, never resolved here; an IP address never matches a name entry.

An empty allowlist allows no peer: forwarding is off and another replica's instance is answered 410.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["PeerPolicy", "parse_allow_entry"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_allow_entry(entry: str) -> IPNetwork | str:
    """An allowlist entry as a network (an address is a /32 or /128) or a lower-case host name pattern
    (``name`` or ``*.suffix``). Raises ValueError naming the entry."""
    text = entry.strip().lower()
    if not text:
        raise ValueError("an empty entry")
    try:
        return ipaddress.ip_network(text.strip("[]"), strict=False)
    except ValueError:
        pass
    name = text.removeprefix("*.")
    labels = name.split(".")
    if "*" in name or not all(label and _is_label(label) for label in labels):
        raise ValueError(
            f"{entry!r} is neither an IP address, a CIDR network (10.0.0.0/8) nor a host name "
            "(gw.example.svc, or *.example.svc for every name under it)"
        )
    return text


def _is_label(label: str) -> bool:
    return len(label) <= 63 and all(ch.isalnum() or ch in "-_" for ch in label) and label.isascii()


@dataclass(frozen=True, slots=True)
class PeerPolicy:
    """The peers forwarding may connect to (see the module docstring)."""

    scheme: str
    ports: frozenset[int]
    networks: tuple[IPNetwork, ...] = ()
    names: tuple[str, ...] = ()

    @classmethod
    def build(cls, advertised_url: str, allow: Iterable[str] = (), ports: Iterable[int] = ()) -> PeerPolicy:
        """The policy of the replica advertised at ``advertised_url`` (already normalized). Raises
        ValueError naming a bad allowlist entry."""
        parts = urlsplit(advertised_url)
        own_port = parts.port or (443 if parts.scheme == "https" else 80)
        networks: list[IPNetwork] = []
        names: list[str] = []
        for entry in allow:
            parsed = parse_allow_entry(entry)
            if isinstance(parsed, str):
                names.append(parsed)
            else:
                networks.append(parsed)
        return cls(parts.scheme, frozenset({own_port, *ports}), tuple(networks), tuple(names))

    @property
    def enabled(self) -> bool:
        """False when no host is allowed: forwarding is off."""
        return bool(self.networks or self.names)

    def allows(self, url: str) -> bool:
        """Whether ``url`` (a normalized base URL from a verified instance id) names an allowed peer."""
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        host = (parts.hostname or "").lower()
        if parts.scheme != self.scheme or port not in self.ports or not host:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return any(host == n or (n.startswith("*.") and host.endswith(n[1:])) for n in self.names)
        return any(address in network for network in self.networks)

    def describe(self) -> str:
        allowed = [str(n) for n in self.networks] + list(self.names)
        return f"{self.scheme} ports {sorted(self.ports)} hosts {allowed or 'none'}"
