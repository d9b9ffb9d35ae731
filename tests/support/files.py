"""Paths the tests read: the repository's root, the test fixtures, the support scripts run as processes."""

from __future__ import annotations

from pathlib import Path

SUPPORT_DIR = Path(__file__).resolve().parent
ROOT = SUPPORT_DIR.parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
#: frames captured from a real TubeMQ 2.x cluster, replayed by the wire and embedded-server tests
CAPTURE_FILE = FIXTURES / "tubemq-real-capture.json"
