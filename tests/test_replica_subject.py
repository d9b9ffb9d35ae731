"""The client certificate subject one replica signs for another (gateway/security/replica_subject.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.security.replica_subject import MAX_AGE, sign_subject, verified_subject

SECRET = b"replica-shared-secret-0123456789"


@given(st.text(min_size=1, max_size=300))
def test_a_signed_subject_verifies_with_the_same_secret_only(subject: str) -> None:
    signed = sign_subject(SECRET, subject, now=1000.0)
    assert signed is not None
    assert verified_subject(SECRET, signed, now=1000.0) == subject
    assert verified_subject(SECRET + b"x", signed, now=1000.0) is None


def test_an_old_tampered_or_unsigned_value_is_not_believed() -> None:
    signed = sign_subject(SECRET, "CN=alice", now=1000.0)
    assert signed is not None
    assert verified_subject(SECRET, signed, now=1000.0 + MAX_AGE + 1) is None
    stamp, subject, tag = signed.split(".")
    other = sign_subject(SECRET, "CN=mallory", now=1000.0)
    assert other is not None
    assert verified_subject(SECRET, f"{stamp}.{other.split('.')[1]}.{tag}", now=1000.0) is None
    assert verified_subject(SECRET, f"{int(stamp) + 5}.{subject}.{tag}", now=1000.0) is None
    assert sign_subject(b"", "CN=alice") is None  # no shared secret: nothing is sent
    assert verified_subject(b"", signed, now=1000.0) is None
    for junk in ("", "a.b", "a.b.c.d", "é.b.c", None, 5, "x" * 5000):
        assert verified_subject(SECRET, junk, now=1000.0) is None


@given(st.text(max_size=200))
def test_any_header_value_is_refused_without_an_exception(value: str) -> None:
    assert verified_subject(SECRET, value, now=1000.0) is None
