"""The harness's opt-in TLS and authentication mode (``TLS_AUTH=1``, the recipe's README section "TLS and
authentication mode"): which mode the harness at ``TUBEMQ_REAL_HOME`` is in, and the files and credentials
its ``env.sh`` exports for it.

In that mode the real master and broker serve two-way TLS on 8716 and 8124 (the plain ports stay open) and
demand producer and consumer authentication on every port, so the real Java client can neither produce nor
consume: the plain-mode cases (which need it) are skipped there, and the ``tls_auth`` cases run instead,
reading back through the gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from interop_support import HOME, RealGateway, harness_env, wait_until

#: the marker file build.sh / start.sh leave in a harness started with TLS_AUTH set; holds the mode
MODE_FILE = HOME / "TLS_AUTH"
MODE_NAMES = {
    "plain": "default (plain TCP, no authentication)",
    "1": "TLS_AUTH=1 (two-way TLS + authentication)",
}


def harness_mode() -> str:
    """``plain`` (no marker: the default mode), ``1`` (TLS + authentication) or ``tls`` (TLS only)."""
    try:
        mode = MODE_FILE.read_text().strip()
    except OSError:
        return "plain"
    return mode or "1"


def describe_mode(mode: str) -> str:
    return MODE_NAMES.get(mode, f"TLS_AUTH={mode}")


NEEDS_TLS_AUTH = (
    "needs the real-TubeMQ harness in TLS_AUTH=1 mode (two-way TLS + authentication): point "
    "TUBEMQ_REAL_HOME at one, e.g. HARNESS=/tmp/tubemq-tls TLS_AUTH=1 build.sh (README of the harness, "
    "'TLS and authentication mode')"
)
JAVA_CANNOT = (
    "plain-mode case, harness in TLS_AUTH=1 mode: its gateway and Java client talk to 8715 without "
    "credentials, refused there (the Java client cannot work in that mode at all); run it against a "
    "default-mode harness"
)


@dataclass(frozen=True)
class TlsHarness:
    """What env.sh exports in TLS_AUTH=1 mode."""

    master: str  # host:port of the master's TLS port
    broker_port: int  # the broker's TLS port (the master lists it to TLS clients)
    ca: Path
    cert: Path
    key: Path
    untrusted_cert: Path
    untrusted_key: Path
    user: str
    password: str

    def tubemq(self, **changes: dict[str, Any]) -> dict[str, Any]:
        """The gateway's ``tubemq`` settings for this harness; ``changes`` replace keys of ``tls``/``auth``
        (a value None drops the key)."""
        tls: dict[str, Any] = {
            "enabled": True,
            "ca_file": str(self.ca),
            "cert_file": str(self.cert),
            "key_file": str(self.key),
        }
        auth: dict[str, Any] = {"username": self.user, "password": self.password}
        for name, group in (("tls", tls), ("auth", auth)):
            for key, value in changes.get(name, {}).items():
                if value is None:
                    group.pop(key, None)
                else:
                    group[key] = value
        return {"tls": tls, "auth": auth}


def tls_harness() -> TlsHarness:
    """The TLS_AUTH=1 harness's files and credentials; skips the test when the harness is in another mode."""
    mode = harness_mode()
    if mode != "1":
        pytest.skip(f"{NEEDS_TLS_AUTH}; {HOME} is in {describe_mode(mode)} mode")
    env = harness_env()
    missing = [
        name
        for name in ("MASTER_TLS_ADDR", "BROKER_TLS_ADDR", "TUBEMQ_TLS_CA", "TUBEMQ_AUTH_USER")
        if not env.get(name)
    ]
    if missing:
        pytest.skip(
            f"{HOME}/env.sh does not export {', '.join(missing)}: rebuild the harness with TLS_AUTH=1"
        )
    return TlsHarness(
        master=env["MASTER_TLS_ADDR"],
        broker_port=int(env["BROKER_TLS_ADDR"].rpartition(":")[2]),
        ca=Path(env["TUBEMQ_TLS_CA"]),
        cert=Path(env["TUBEMQ_TLS_CERT"]),
        key=Path(env["TUBEMQ_TLS_KEY"]),
        untrusted_cert=Path(env["TUBEMQ_TLS_UNTRUSTED_CERT"]),
        untrusted_key=Path(env["TUBEMQ_TLS_UNTRUSTED_KEY"]),
        user=env["TUBEMQ_AUTH_USER"],
        password=env["TUBEMQ_AUTH_PASSWORD"],
    )


async def flushed_ends(gw: RealGateway, topic: str, results: list[dict[str, Any]]) -> dict[str, int]:
    """Each partition's end (``maxOffset``) once it lies past every message of ``results`` (publish
    answers): the real broker serves a range, and reports its end, only once its memory cache reached the
    files, so a read planned to the end waits for that."""
    last = {r["partitionKey"]: r["offset"] for r in sorted(results, key=lambda r: r["offset"])}
    ends: dict[str, int] = {}

    async def flushed() -> bool:
        parts = await gw.http.get(f"/v1/topics/{topic}/partitions")
        assert parts.status_code == 200, parts.text
        ends.update({p["partitionKey"]: p["maxOffset"] for p in parts.json()["partitions"]})
        return all(ends.get(key, -1) > offset for key, offset in last.items())

    await wait_until(flushed, 90.0, "the broker to flush the published messages (maxOffset)", step=1.0)
    return ends


def check_links(gw: RealGateway, harness: TlsHarness) -> None:
    """Every link of the gateway's pool is TLS, to the master's TLS port and the broker's (8124)."""
    pool = gw.runtime.pool
    assert pool is not None and pool.tls, "the gateway's TubeMQ links are not TLS"
    ports = {address.port for address in pool.stats().nodes}
    assert ports == {int(harness.master.rpartition(":")[2]), harness.broker_port}, f"links to ports {ports}"
