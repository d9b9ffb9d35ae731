"""The failure both write paths of the Spark source raise (straight to TubeMQ, or through a gateway)."""

from __future__ import annotations


class WriteFailed(RuntimeError):
    """Some messages of a write task were not stored; the task fails so that Spark retries it."""
