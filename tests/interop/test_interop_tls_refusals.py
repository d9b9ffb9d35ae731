"""What a gateway configured wrongly for the real TubeMQ in TLS_AUTH=1 mode is told: the real master's or its
TLS layer's refusal, exactly as sent, in the error the gateway stops with. Each case changes one setting of a
working configuration (see test_interop_tls.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from interop_support import real_gateway
from interop_tls import TlsHarness, tls_harness

import gateway.tubemq.wire.auth as wire_auth
from gateway.tubemq.errors import CertificateFailure, TransportError, TubeMQError

pytestmark = pytest.mark.tls_auth
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def harness() -> TlsHarness:
    return tls_harness()


async def refusal(harness: TlsHarness, **changes: dict[str, Any]) -> TubeMQError:
    """The error a gateway on the harness's TLS master stops with, its settings changed by ``changes``."""
    with pytest.raises(TubeMQError) as refused:
        async with real_gateway(masters=harness.master, tubemq=harness.tubemq(**changes)):
            pass
    return refused.value


def notes(error: BaseException) -> str:
    """What the gateway added to the error: the settings that fix it."""
    return "\n".join(getattr(error, "__notes__", []))


async def test_no_client_certificate_is_refused_by_the_tls_handshake(harness: TlsHarness) -> None:
    error = await refusal(harness, tls={"cert_file": None, "key_file": None})
    # TLS 1.3: the server's alert arrives on the first read after the client's side of the handshake
    assert isinstance(error, TransportError), repr(error)
    assert "SSLV3_ALERT_BAD_CERTIFICATE" in str(error), str(error)
    assert "refused this client's TLS certificate" in str(error), str(error)
    assert "tubemq.tls.cert_file and tubemq.tls.key_file" in notes(error)


async def test_an_untrusted_client_certificate_is_refused(harness: TlsHarness) -> None:
    error = await refusal(
        harness, tls={"cert_file": str(harness.untrusted_cert), "key_file": str(harness.untrusted_key)}
    )
    assert isinstance(error, TransportError), repr(error)
    assert "SSLV3_ALERT_CERTIFICATE_UNKNOWN" in str(error), str(error)
    assert "refused this client's TLS certificate" in str(error), str(error)
    assert "tubemq.tls.cert_file and tubemq.tls.key_file" in notes(error)


async def test_a_ca_that_did_not_sign_the_servers_fails_verification(harness: TlsHarness) -> None:
    # the self-signed untrusted client certificate is a CA file that did not sign the harness's servers
    error = await refusal(harness, tls={"ca_file": str(harness.untrusted_cert)})
    assert isinstance(error, TransportError), repr(error)
    assert "CERTIFICATE_VERIFY_FAILED" in str(error), str(error)
    assert "does not trust the node's certificate" in str(error), str(error)
    assert "tubemq.tls.ca_file" in notes(error)


async def test_missing_credentials_are_refused_with_415(harness: TlsHarness) -> None:
    error = await refusal(harness, auth={"username": None, "password": None})
    assert isinstance(error, CertificateFailure) and error.errno == 415, repr(error)
    assert error.message == "Illegal value: authInfo.userName is Blank!"
    assert "requires authentication" in str(error), str(error)
    assert "tubemq.auth.username and tubemq.auth.password" in notes(error)


async def test_a_stale_timestamp_is_refused_with_415(
    harness: TlsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the gateway host's clock 60 s behind the master's (its window: authValidTimeStampPeriodMs, 20 s)
    monkeypatch.setattr(wire_auth, "_wall_ms", lambda: time.time_ns() // 1_000_000 - 60_000)
    error = await refusal(harness)
    assert isinstance(error, CertificateFailure) and error.errno == 415, repr(error)
    assert error.message == "Illegal value: timestamp out of effective period in authenticateToken!"
    assert "synchronise them (NTP)" in str(error), str(error)
    assert notes(error) == ""  # nothing to set: the clock is wrong


def test_serve_stops_with_the_refusal_in_its_log(harness: TlsHarness) -> None:
    # the operator's view: `serve` with TLS settings but no credentials logs the master's refusal, exits 1
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TUBEMQ_GATEWAY_MASTERS": harness.master,
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__ENABLED": "true",
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__CA_FILE": str(harness.ca),
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__CERT_FILE": str(harness.cert),
        "TUBEMQ_GATEWAY_TUBEMQ__TLS__KEY_FILE": str(harness.key),
    }
    with socket.socket() as probe:  # a free port: the advertised URL may not say port 0
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    command = [sys.executable, "-m", "gateway", "serve", "--http-host", "127.0.0.1", "--http-port", port]
    done = subprocess.run(
        [*command, "--grpc-port", "0"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "the gateway could not start" in done.stderr, done.stderr[-2000:]
    assert "Illegal value: authInfo.userName is Blank!" in done.stderr, done.stderr[-2000:]
    assert "set the TubeMQ user name and password" in done.stderr, done.stderr[-2000:]
    assert "TUBEMQ_GATEWAY_TUBEMQ__AUTH__USERNAME" in done.stderr, done.stderr[-2000:]
