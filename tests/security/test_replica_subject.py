"""The client certificate subject one replica signs for another (gateway/security/replica_subject.py): bound
to the owner, the request and the relaying connection's certificate, believed once, within MAX_AGE."""

from __future__ import annotations

import hashlib
import ssl
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.security.replica_subject import MAX_AGE, RelayRefused, ReplicaSubjects, certificate_digest
from gateway.security.seen_nonces import SeenNonces
from gateway.service.errors import Unauthenticated
from tests.support.tls_support import make_pki

SECRET = b"replica-shared-secret-0123456789"
OWNER = "https://10.0.0.7:8443"
RELAY_CERT = certificate_digest(b"the relaying replica's certificate")
POLL = "GET /v1/consumers/g/instances/i/messages"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pair(clock: Clock, secret: bytes = SECRET) -> tuple[ReplicaSubjects, ReplicaSubjects]:
    """(the forwarding replica, the owner)"""
    relay = ReplicaSubjects(secret, "https://10.0.0.8:8443", RELAY_CERT, clock=clock)
    owner = ReplicaSubjects(SECRET, OWNER, certificate_digest(b"the owner's certificate"), clock=clock)
    return relay, owner


@given(st.text(min_size=1, max_size=300))
def test_a_signed_subject_is_believed_once_for_what_it_was_signed_for(subject: str) -> None:
    clock = Clock()
    relay, owner = _pair(clock)
    signed = relay.sign(subject, audience=OWNER, request=POLL)
    assert signed is not None
    assert owner.verify(signed, request=POLL, peer_certificate=RELAY_CERT) == subject
    with pytest.raises(RelayRefused, match="used before"):
        owner.verify(signed, request=POLL, peer_certificate=RELAY_CERT)


def test_a_value_is_refused_for_anything_it_was_not_signed_for() -> None:
    clock = Clock()
    relay, owner = _pair(clock)

    def signed(audience: str = OWNER, request: str = POLL) -> str:
        value = relay.sign("CN=alice", audience=audience, request=request)
        assert value is not None
        return value

    not_for = "not signed for this replica, this request and the certificate of this connection"
    for value, request, certificate in (
        (signed(), POLL, certificate_digest(b"a client's certificate")),  # another connection's certificate
        (signed(), "DELETE /v1/consumers/g/instances/i", RELAY_CERT),  # another request
        (signed(audience="https://10.0.0.9:8443"), POLL, RELAY_CERT),  # for another replica
        (
            _pair(clock, b"another-secret-0123456789abcdef")[0].sign("CN=a", audience=OWNER, request=POLL),
            POLL,
            RELAY_CERT,
        ),
    ):
        with pytest.raises(RelayRefused, match=not_for):
            owner.verify(value, request=request, peer_certificate=certificate)
    with pytest.raises(RelayRefused, match="no certificate"):
        owner.verify(signed(), request=POLL, peer_certificate=None)
    late = signed()
    clock.now += MAX_AGE + 1
    with pytest.raises(RelayRefused, match="beyond 60 s"):
        owner.verify(late, request=POLL, peer_certificate=RELAY_CERT)
    stamp, nonce, subject, tag = signed().split(".")
    other = signed().split(".")
    for forged in (f"{int(stamp) + 1}.{nonce}.{subject}.{tag}", f"{stamp}.{other[1]}.{subject}.{tag}"):
        with pytest.raises(RelayRefused, match=not_for):
            owner.verify(forged, request=POLL, peer_certificate=RELAY_CERT)


def test_nothing_is_signed_or_believed_without_a_secret_or_a_certificate() -> None:
    clock = Clock()
    assert (
        ReplicaSubjects(b"", OWNER, RELAY_CERT, clock=clock).sign("CN=a", audience=OWNER, request=POLL)
        is None
    )
    assert (
        ReplicaSubjects(SECRET, OWNER, None, clock=clock).sign("CN=a", audience=OWNER, request=POLL) is None
    )
    relay, _ = _pair(clock)
    signed = relay.sign("CN=a", audience=OWNER, request=POLL)
    with pytest.raises(RelayRefused, match="no shared secret"):
        ReplicaSubjects(b"", OWNER, None, clock=clock).verify(
            signed, request=POLL, peer_certificate=RELAY_CERT
        )


def test_believe_refuses_with_401_saying_why() -> None:
    _, owner = _pair(Clock())
    with pytest.raises(Unauthenticated, match=r"x-tubemq-replica-cert is not accepted: .*no certificate"):
        owner.believe("1.a.b.c", request=POLL, peer_certificate=None, client="127.0.0.1")
    with pytest.raises(Unauthenticated, match="not accepted"):
        owner.believe("1.a.b.c", request=POLL, peer_certificate="not PEM", client="127.0.0.1")


@given(st.text(max_size=200))
def test_any_header_value_is_refused_without_another_exception(value: str) -> None:
    _, owner = _pair(Clock())
    with pytest.raises(RelayRefused):
        owner.verify(value, request=POLL, peer_certificate=RELAY_CERT)


def test_the_nonces_kept_are_bounded() -> None:
    nonces = SeenNonces(limit=3)
    assert all(nonces.first_use(f"n{i}", until=100.0 + i, now=0.0) for i in range(3))
    assert not nonces.first_use("n1", until=200.0, now=0.0)
    assert nonces.first_use("n3", until=200.0, now=0.0) and len(nonces) == 3 and nonces.dropped == 1
    assert nonces.first_use("n0", until=300.0, now=0.0)  # dropped while valid: taken again (counted)
    assert nonces.first_use("late", until=400.0, now=150.0)  # expired ones leave first
    assert len(nonces) <= 3 and nonces.dropped == 2


def test_a_certificate_file_is_digested_as_its_first_certificate(tmp_path: Path) -> None:
    """What a replica presents is the first certificate of its tls.cert_file, which may hold the chain
    after it or text before it (openssl's "Bag Attributes"): the digest is that certificate's, as the
    owner computes it from the connection."""
    pki = make_pki(tmp_path)
    leaf = pki.dual.cert.read_text()
    expected = hashlib.sha256(ssl.PEM_cert_to_DER_cert(leaf)).digest()
    chain = "Bag Attributes\n    friendlyName: replica\n" + leaf + pki.ca.read_text()
    assert certificate_digest(chain) == certificate_digest(leaf) == expected
    assert certificate_digest(ssl.PEM_cert_to_DER_cert(leaf)) == expected
    for junk in ("", "not PEM", "-----BEGIN CERTIFICATE-----\n%%%\n-----END CERTIFICATE-----\n"):
        with pytest.raises(ValueError):
            certificate_digest(junk)
