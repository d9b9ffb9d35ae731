"""Instance ids: they name their owner replica, bind to their group and secret, and reject tampering."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.service.instance_id import (
    MalformedInstanceId,
    decode_instance_id,
    new_instance_id,
    normalize_base_url,
)

groups = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
hosts = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z0-9-]{1,10}){0,3}", fullmatch=True)
urls = st.builds(
    lambda scheme, host, port: f"{scheme}://{host}:{port}",
    st.sampled_from(["http", "https"]),
    hosts | st.ip_addresses(v=4).map(str),
    st.integers(1, 65535),
)


@settings(max_examples=40)
@given(groups, urls, st.binary(max_size=32))
def test_round_trip(group: str, url: str, secret: bytes) -> None:
    instance_id = new_instance_id(group, url, secret)
    ref = decode_instance_id(group, instance_id, secret)
    assert ref.owner_url == url and ref.instance_id == instance_id
    assert all(ch.isalnum() or ch in "-_." for ch in instance_id)


@settings(max_examples=40)
@given(groups, groups, urls)
def test_another_group_or_secret_is_rejected(group: str, other: str, url: str) -> None:
    instance_id = new_instance_id(group, url, b"s1")
    with pytest.raises(MalformedInstanceId):
        decode_instance_id(group, instance_id, b"s2")
    if other != group:
        with pytest.raises(MalformedInstanceId):
            decode_instance_id(other, instance_id, b"s1")


@settings(max_examples=40)
@given(urls, st.data())
def test_any_single_character_change_is_rejected(url: str, data: st.DataObject) -> None:
    instance_id = new_instance_id("g", url)
    position = data.draw(st.integers(0, len(instance_id) - 1))
    replacement = data.draw(st.sampled_from("AbZ9-_.x"))
    changed = instance_id[:position] + replacement + instance_id[position + 1 :]
    if changed != instance_id:
        with pytest.raises(MalformedInstanceId):
            decode_instance_id("g", changed)


@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes(text: str) -> None:
    with contextlib.suppress(MalformedInstanceId):
        decode_instance_id("g", text)


def test_forged_owner_needs_the_secret() -> None:
    honest = new_instance_id("g", "http://10.0.0.1:8080", b"shared")
    _, nonce, tag = honest.split(".")
    forged_owner = new_instance_id("g", "http://169.254.169.254:80").split(".")[0]
    with pytest.raises(MalformedInstanceId):
        decode_instance_id("g", f"{forged_owner}.{nonce}.{tag}", b"shared")


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("http://h:1/", "http://h:1"),
        (" https://10.0.0.2:8443 ", "https://10.0.0.2:8443"),
        ("http://h", "http://h"),
    ],
)
def test_normalize_base_url(url: str, normalized: str) -> None:
    assert normalize_base_url(url) == normalized


@pytest.mark.parametrize(
    "url",
    ["ftp://h:1", "http://:80", "http://h:1/path", "http://u:p@h:1", "http://h:0", "h:80", "http://h:x"],
)
def test_bad_base_urls(url: str) -> None:
    with pytest.raises(ValueError):
        normalize_base_url(url)


@settings(max_examples=40)
@given(groups, urls, st.integers(0, 9999))
def test_worker_round_trip(group: str, url: str, worker: int) -> None:
    instance_id = new_instance_id(group, url, b"k", worker)
    ref = decode_instance_id(group, instance_id, b"k")
    assert (ref.owner_url, ref.worker) == (url, worker)
    assert decode_instance_id(group, new_instance_id(group, url, b"k"), b"k").worker is None


@settings(max_examples=40)
@given(groups, urls, st.none() | st.integers(0, 9999), st.integers(1, 65535))
def test_grpc_port_round_trip(group: str, url: str, worker: int | None, port: int) -> None:
    """The owner's gRPC port travels in the id (where other replicas relay its gRPC calls)."""
    ref = decode_instance_id(group, new_instance_id(group, url, b"k", worker, port), b"k")
    assert (ref.owner_url, ref.worker, ref.grpc_port) == (url, worker, port)
    assert decode_instance_id(group, new_instance_id(group, url, b"k", worker), b"k").grpc_port is None


@pytest.mark.parametrize(
    "suffix",
    [
        *("#", "#01", "#-1", "#1.0", "#10000", "#\u0661", "#1#2", "#x"),
        *("#;", "#;0", "#;65536", "#;090", "#1;x", "#1;9090;1", "#;123456", "#01;9090"),
    ],
)
def test_malformed_worker_parts_are_rejected(suffix: str) -> None:
    """A signed owner text whose worker part is not a canonical index (what a buggy or hostile signer
    could produce) is refused, never guessed."""
    import base64

    from gateway.service import instance_id as ids

    owner = base64.urlsafe_b64encode(f"http://h:1{suffix}".encode()).rstrip(b"=").decode()
    nonce = ids._b64(b"n" * ids.NONCE_BYTES)
    forged = f"{owner}.{nonce}.{ids._tag(b'k', 'g', owner, nonce)}"
    with pytest.raises(MalformedInstanceId):
        decode_instance_id("g", forged, b"k")


def test_worker_index_is_bounded() -> None:
    with pytest.raises(ValueError, match="worker index"):
        new_instance_id("g", "http://h:1", b"k", 10000)
