"""Consumer calls for another replica's instance, relayed to that replica's gRPC server.

A gRPC load balancer (the chart's gRPC ingress, nginx ``grpc_pass``) spreads calls over the replicas without
knowing which one holds an instance. A Poll, Commit, DeleteConsumer or Subscribe for an instance another
replica owns is relayed to it with the rules of REST forwarding (:mod:`gateway.api.forwarding`):

* where to: the owner's host from its verified instance id (signed with the replicas' shared secret), which
  must pass the :class:`~gateway.service.peers.PeerPolicy` (``consumers.forward_allow``); the port is the
  owner's gRPC port, also from the id, which must be this replica's own gRPC port or one of
  ``consumers.forward_ports``. Never an address a client chose;
* who: the caller's ``authorization`` and ``x-api-key`` (and ``x-request-id``) go along, and the owner
  authenticates and authorizes the call again; a verified client certificate's subject goes along signed
  with the replicas' shared secret for that method, that owner and this replica's certificate, once
  (:mod:`gateway.security.replica_subject`), as with REST;
* never twice: the relayed call carries ``x-tubemq-forwarded-by`` and is not relayed to a third replica (it
  may still take one hop to a sibling worker of the owner);
* over TLS when this replica serves TLS (the replicas share their certificate setup), verified against
  ``consumers.forward_ca_file``, presenting the replicas' certificate where the listeners ask for one;
* an owner that cannot be reached: the instance is lost with it (FAILED_PRECONDITION, as REST's 410); any
  status the owner answers is passed back as it is.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import urlsplit

import grpc

from gateway.config import Settings
from gateway.grpc.siblings import Relay, passed_metadata
from gateway.runtime import peer_policy
from gateway.security.replica_subject import REPLICA_CERT_KEY, ReplicaSubjects
from gateway.service.consumers import Owner
from gateway.service.errors import Gone
from gateway.service.instance_id import normalize_base_url
from gateway.service.peers import PeerPolicy

__all__ = ["FORWARDED_KEY", "GrpcReplicas"]

FORWARDED_KEY = "x-tubemq-forwarded-by"
#: channels to other replicas kept open (least recently used closed first)
MAX_CHANNELS = 64


class GrpcReplicas:
    """Channels to the other replicas' gRPC servers (opened on first use, at most :data:`MAX_CHANNELS`)."""

    def __init__(
        self,
        self_url: str,
        peers: PeerPolicy,
        ports: frozenset[int],
        service: str,
        credentials: grpc.ChannelCredentials | None = None,
        subjects: Callable[[], ReplicaSubjects | None] = lambda: None,
    ) -> None:
        self.self_url = self_url
        self.subjects = subjects
        self.peers = peers
        self.ports = ports
        self.service = service
        self.credentials = credentials
        self._channels: OrderedDict[str, grpc.aio.Channel] = OrderedDict()

    @classmethod
    def from_settings(
        cls, settings: Settings, service: str, subjects: Callable[[], ReplicaSubjects | None] = lambda: None
    ) -> GrpcReplicas | None:
        """The relay of ``settings`` (None when forwarding is off: ``consumers.forward_allow`` empty);
        ``subjects`` returns what signs the client certificate subjects it relays (the runtime's, once
        started)."""
        peers = peer_policy(settings)
        if not peers.enabled:
            return None
        credentials = None
        tls = settings.tls
        if tls.enabled:
            ca = settings.consumers.forward_ca_file
            key = chain = None
            if tls.client_auth != "none" and tls.cert_file is not None and tls.key_file is not None:
                # listeners that ask clients for a certificate ask the relaying replica too: it presents
                # the replicas' own, as REST forwarding does (gateway.tls.forwarding_ssl_context)
                key, chain = tls.key_file.read_bytes(), tls.cert_file.read_bytes()
            credentials = grpc.ssl_channel_credentials(
                ca.read_bytes() if ca is not None else None, key, chain
            )
        ports = frozenset({settings.grpc.port, *settings.consumers.forward_ports} - {0})
        self_url = normalize_base_url(settings.advertised_url())
        return cls(self_url, peers, ports, service, credentials, subjects)

    def __repr__(self) -> str:
        return f"<GrpcReplicas from {self.self_url} open={len(self._channels)}>"

    def allow_port(self, port: int) -> None:
        """Also allow this replica's own bound gRPC port (known once bound, when configured as 0)."""
        self.ports = self.ports | {port}

    @staticmethod
    def relayed(metadata: dict[str, str | bytes]) -> bool:
        """Whether another replica relayed this call here."""
        return FORWARDED_KEY in metadata

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), OrderedDict()
        for channel in channels:
            await channel.close()

    def relay(self, owner: Owner, context: grpc.aio.ServicerContext, subject: str | None = None) -> Relay:
        """The relay of the call in ``context`` to ``owner`` (with the caller's verified client certificate
        subject, signed: :mod:`gateway.security.replica_subject`); Gone when it may not be relayed there."""
        target = self._target(owner)
        metadata = (*passed_metadata(context), (FORWARDED_KEY, self.self_url))
        subjects = self.subjects()
        bound = None
        if subject is not None and subjects is not None:

            def bound(path: str) -> tuple[tuple[str, str], ...]:
                signed = subjects.sign(subject, audience=owner.url, request=path)
                return () if signed is None else ((REPLICA_CERT_KEY, signed),)

        unreachable = (
            f"the gateway at {owner.url}, which owns this consumer instance, cannot be reached; the "
            "instance is lost with it: create a new instance with CreateConsumer"
        )
        return Relay(self._channel(target), self.service, context, metadata, unreachable, bound=bound)

    def _target(self, owner: Owner) -> str:
        if owner.grpc_port is None:
            raise Gone(
                f"the consumer instance is owned by the gateway at {owner.url}, which serves no gRPC port "
                "this gateway knows of; call it through REST or create a new instance with CreateConsumer"
            )
        if not self.peers.allows(owner.url) or owner.grpc_port not in self.ports:
            raise Gone(
                f"the consumer instance is owned by the gateway at {owner.url} (gRPC port "
                f"{owner.grpc_port}), which this gateway may not relay to (consumers.forward_allow, "
                "consumers.forward_ports); create a new instance with CreateConsumer"
            )
        host = urlsplit(owner.url).hostname or ""
        return f"[{host}]:{owner.grpc_port}" if ":" in host else f"{host}:{owner.grpc_port}"

    def _channel(self, target: str) -> grpc.aio.Channel:
        channel = self._channels.get(target)
        if channel is not None:
            self._channels.move_to_end(target)
            return channel
        if len(self._channels) >= MAX_CHANNELS:
            _, oldest = self._channels.popitem(last=False)
            # closed with a grace, so that calls still running on it end on their own
            _close_later(oldest)
        if self.credentials is None:
            channel = grpc.aio.insecure_channel(target)
        else:
            channel = grpc.aio.secure_channel(target, self.credentials)
        self._channels[target] = channel
        return channel


def _close_later(channel: grpc.aio.Channel) -> None:
    task = asyncio.get_running_loop().create_task(channel.close(grace=30.0))
    _CLOSING.add(task)
    task.add_done_callback(_CLOSING.discard)


_CLOSING: set[asyncio.Task[None]] = set()
