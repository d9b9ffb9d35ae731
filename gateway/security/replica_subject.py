"""A verified client certificate's subject, carried from the replica a client reached to the replica that owns
its consumer instance.

A request (REST) or call (gRPC) for another replica's instance is forwarded there, and the owner authenticates
it again. An API key or a bearer token travels with it; a client certificate cannot (the forwarding replica's
TLS connection presents the replicas' own certificate). So the forwarding replica, which verified the
client's certificate, sends its subject in ``x-tubemq-replica-cert``, signed with the replicas' shared
``consumers.id_secret`` (HMAC-SHA256). The value is good for one request only:

* it is **bound** to what it was signed for: the owner's URL (the audience: another replica cannot use it),
  the request (``GET /v1/consumers/g/instances/i/messages``: method and path, which name the instance; a gRPC
  call's full method name), and the SHA-256 of the certificate the forwarding replica presents on its TLS
  connection to the owner. The owner checks the tag against its own URL, the request it serves and the
  certificate of the connection it came on, so a value is believed only on a connection presenting that
  certificate: from a replica, never from a client that saw the value;
* it carries the time it was signed (believed for :data:`MAX_AGE` seconds either way: the replicas' clocks
  agree within that) and a random **nonce**, which the owner accepts once (:class:`SeenNonces`, bounded).

A replica that has no shared secret, or presents no certificate to the others (``tls.client_auth`` none),
sends nothing. A client's own such header is never passed on; one that reaches the owner is refused with
the reason (:class:`RelayRefused`), never silently replaced by the connection's own certificate.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable

from gateway.security.seen_nonces import SeenNonces
from gateway.service.errors import Unauthenticated

__all__ = ["MAX_AGE", "REPLICA_CERT_KEY", "RelayRefused", "ReplicaSubjects", "certificate_digest"]

#: the header (REST) and metadata key (gRPC)
REPLICA_CERT_KEY = "x-tubemq-replica-cert"
#: seconds a signed subject is believed after (or before) it was signed: the replicas' clocks agree within it
MAX_AGE = 60.0
_CONTEXT = b"tubemq-gateway replica client certificate v2\n"
_TAG_BYTES = 16
_NONCE_BYTES = 12
_MAX_LENGTH = 4096


log = logging.getLogger("gateway.security")


class RelayRefused(Exception):
    """A relayed subject that is not believed; the message says why (never the value)."""


def certificate_digest(certificate: bytes | str) -> bytes:
    """SHA-256 of a certificate, given as DER bytes or PEM text: of PEM text, its first certificate (a
    certificate file may hold the chain after it, or text before it); ValueError without one."""
    if isinstance(certificate, str):
        block = _PEM_CERTIFICATE.search(certificate)
        if block is None:
            raise ValueError("no PEM certificate")
        try:
            certificate = base64.b64decode("".join(block.group(1).split()), validate=True)
        except binascii.Error:
            raise ValueError("a PEM certificate that is not base64") from None
    return hashlib.sha256(certificate).digest()


_PEM_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.DOTALL)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


class ReplicaSubjects:
    """Signs subjects for other replicas and verifies those signed for this one (see the module docstring).

    ``secret``: the replicas' shared secret (empty: nothing signed, nothing believed); ``own_url``: this
    replica's advertised base URL (normalized, as instance ids name it); ``own_certificate``: the digest
    (:func:`certificate_digest`) of the certificate this replica presents to the others, None when it
    presents none (then it signs nothing). One per process: its nonces are this process's.
    """

    def __init__(
        self,
        secret: bytes,
        own_url: str,
        own_certificate: bytes | None,
        *,
        nonces: SeenNonces | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = secret
        self.own_url = own_url
        self._own_certificate = own_certificate
        self._nonces = nonces if nonces is not None else SeenNonces()
        self._clock = clock

    def __repr__(self) -> str:
        signs = self._own_certificate is not None and bool(self._secret)
        return f"<ReplicaSubjects {self.own_url} signs={signs} nonces={self._nonces!r}>"

    def _tag(self, signed: str, audience: str, request: str, certificate: bytes) -> str:
        text = f"{signed}\n{audience}\n{request}\n".encode("utf-8", "surrogateescape") + certificate
        return _b64(hmac.new(self._secret, _CONTEXT + text, hashlib.sha256).digest()[:_TAG_BYTES])

    def sign(self, subject: str, *, audience: str, request: str) -> str | None:
        """The header value carrying ``subject`` to the replica at ``audience`` for ``request`` (``"GET
        /path"``, or a gRPC full method name); None when this replica signs nothing."""
        if not self._secret or self._own_certificate is None:
            return None
        encoded = base64.urlsafe_b64encode(subject.encode("utf-8")).decode("ascii")
        signed = f"{int(self._clock())}.{_b64(secrets.token_bytes(_NONCE_BYTES))}.{encoded}"
        return f"{signed}.{self._tag(signed, audience, request, self._own_certificate)}"

    def verify(self, value: object, *, request: str, peer_certificate: bytes | None) -> str:
        """The subject a replica signed in ``value`` for this replica, ``request`` and the connection's
        certificate (``peer_certificate``: its digest, None without one); RelayRefused saying why."""
        if not self._secret:
            raise RelayRefused("this replica has no shared secret (consumers.id_secret) to check it with")
        if not isinstance(value, str) or len(value) > _MAX_LENGTH or not value.isascii():
            raise RelayRefused("it is not a value a replica signs")
        if value.count(".") != 3:
            raise RelayRefused("it is not a value a replica signs")
        if peer_certificate is None:
            raise RelayRefused(
                "the connection presented no certificate: only a replica, presenting its own, relays one"
            )
        signed, _, tag = value.rpartition(".")
        expected = self._tag(signed, self.own_url, request, peer_certificate)
        if not hmac.compare_digest(tag.encode("ascii"), expected.encode("ascii")):
            raise RelayRefused(
                "it was not signed for this replica, this request and the certificate of this connection"
            )
        stamp, nonce, encoded = signed.split(".")
        now = self._clock()
        try:
            signed_at = int(stamp)
            subject = base64.urlsafe_b64decode(encoded.encode("ascii")).decode("utf-8")
        except (ValueError, binascii.Error, UnicodeError):
            raise RelayRefused("it is not a value a replica signs") from None
        if not subject:
            raise RelayRefused("it is not a value a replica signs")
        if not -MAX_AGE <= now - signed_at <= MAX_AGE:
            raise RelayRefused(
                f"it was signed {now - signed_at:+.0f} s from this replica's clock, beyond {MAX_AGE:g} s "
                "(a value is good for one request; one sent just now: check that the replicas' clocks agree)"
            )
        if not self._nonces.first_use(nonce, signed_at + MAX_AGE, now):
            raise RelayRefused("it was used before (a value is good for one request)")
        return subject

    def believe(self, value: str, *, request: str, peer_certificate: str | None, client: str | None) -> str:
        """:meth:`verify` for an adapter: ``peer_certificate`` is the connection's certificate as PEM text
        (None without one), ``client`` the connection's address (logged). A value not believed is logged
        (the reason, never the value) and refused: Unauthenticated, saying why."""
        try:
            peer = certificate_digest(peer_certificate) if peer_certificate else None
            return self.verify(value, request=request, peer_certificate=peer)
        except (RelayRefused, ValueError) as exc:
            log.warning(
                "relayed client certificate refused",
                extra={"reason": str(exc), "client": client, "request": request[:300]},
            )
            raise Unauthenticated(
                f"the client certificate subject in {REPLICA_CERT_KEY} is not accepted: {exc}; only a "
                "gateway replica forwarding a request sets it (send the request without it)"
            ) from None
