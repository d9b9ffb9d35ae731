"""Producer and consumer ids in the Java layout, and local address detection."""

from __future__ import annotations

import ipaddress
import os
import re

import pytest

from gateway import __version__
from gateway.tubemq.wire import client_id
from gateway.tubemq.wire.client_id import consumer_id, local_ipv4, producer_id


def test_producer_id_layout() -> None:
    pid = producer_id("192.0.2.2")
    match = re.fullmatch(r"192\.0\.2\.2-(\d+)-(\d+)-(\d+)-py-(.+)", pid)
    assert match is not None, pid
    assert int(match[1]) == os.getpid()
    assert 0 <= int(match[3]) < 2**31
    assert match[4] == __version__


def test_ids_are_unique() -> None:
    assert len({producer_id("10.0.0.1") for _ in range(100)}) == 100


def test_consumer_id_layout() -> None:
    assert re.fullmatch(r"g1_10\.0\.0\.9-\d+-\d+-\d+-Pull-py-.+", consumer_id("g1", "10.0.0.9"))
    assert "-Push-py-" in consumer_id("g1", "10.0.0.9", push=True)


@pytest.mark.parametrize("group", ["", "  ", "a@b", "a#b", "a:b", "a,b", "g" * 1100])
def test_consumer_id_rejects_bad_groups(group: str) -> None:
    with pytest.raises(ValueError):
        consumer_id(group, "10.0.0.9")


def test_local_ipv4_is_an_ipv4_address() -> None:
    address = ipaddress.IPv4Address(local_ipv4())
    assert str(address) == local_ipv4()
    assert producer_id().startswith(f"{address}-")


def test_local_ipv4_falls_back_to_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> str:
        raise OSError("no network")

    monkeypatch.setattr(client_id, "_routed_ipv4", broken)
    monkeypatch.setattr(client_id, "_hostname_ipv4", lambda: "127.0.1.1")
    local_ipv4.cache_clear()
    try:
        assert local_ipv4() == "127.0.0.1"
    finally:
        local_ipv4.cache_clear()
