"""The bounds of what one consume step takes: a REST long poll, an SSE step, a gRPC Poll or Subscribe step.

One rule for every adapter: a request's ``max_messages`` and ``max_bytes`` (when given) must lie within
1 to :data:`MAX_MESSAGES_LIMIT` / :data:`MAX_BYTES_LIMIT`, else :class:`InvalidInput` naming the service's
field (``max_messages``, ``max_bytes``, ``timeout``; each adapter renames it to its own spelling with
:func:`~gateway.service.errors.renamed_fields`); an absent one takes the instance's own ``maxBytes`` or the
gateway's default. The defaults are the configuration's (``consumers.poll_*`` and ``prefetch_*`` in
``gateway/config/messaging.py``, which takes its default values from the ``DEFAULT_*`` constants here: the
service layer may not import the configuration), handed to :class:`PollLimits` by the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.service.errors import InvalidInput

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_MAX_TIMEOUT",
    "DEFAULT_PREFETCH_BYTES",
    "DEFAULT_TIMEOUT",
    "DEFAULT_WORKER_PREFETCH_BYTES",
    "MAX_BYTES_LIMIT",
    "MAX_MESSAGES_LIMIT",
    "PollLimits",
    "Step",
]

#: the defaults of consumers.poll_max_messages, poll_max_bytes, poll_timeout and poll_max_timeout
DEFAULT_MAX_MESSAGES = 500
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_TIMEOUT = 1.0
DEFAULT_MAX_TIMEOUT = 30.0
#: the defaults of consumers.prefetch_bytes (per instance) and prefetch_worker_bytes (per worker process):
#: what is fetched ahead of the next step (gateway.service.prefetch)
DEFAULT_PREFETCH_BYTES = 8 * 1024 * 1024
DEFAULT_WORKER_PREFETCH_BYTES = 256 * 1024 * 1024

#: the most messages one step may ask for
MAX_MESSAGES_LIMIT = 10_000
#: the most value bytes (before any encoding) one step may ask for
MAX_BYTES_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Step:
    """What one step may deliver: ``max_messages`` messages whose values sum to at most ``max_bytes``."""

    max_messages: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class PollLimits:
    """Defaults and bounds of a consume step: messages, bytes (message values, before any encoding) and,
    for a long poll, seconds (the runtime's come from ``consumers.poll_max_messages``, ``poll_max_bytes``,
    ``poll_timeout`` and ``poll_max_timeout``)."""

    max_messages: int = DEFAULT_MAX_MESSAGES
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout: float = DEFAULT_TIMEOUT
    max_timeout: float = DEFAULT_MAX_TIMEOUT
    max_messages_limit: int = MAX_MESSAGES_LIMIT
    max_bytes_limit: int = MAX_BYTES_LIMIT

    def step(self, max_messages: int | None, max_bytes: int | None, instance_max_bytes: int | None) -> Step:
        """The bounds of one step (poll, SSE or Subscribe) from a request's values (None: not given);
        raises InvalidInput naming ``max_messages`` or ``max_bytes``."""
        return Step(
            _within(max_messages, self.max_messages, self.max_messages_limit, "max_messages"),
            self.value_bytes(max_bytes, instance_max_bytes),
        )

    def value_bytes(self, value: int | None, default: int | None = None, field: str = "max_bytes") -> int:
        """``value`` (None: ``default``, or the gateway's default) within 1 to :attr:`max_bytes_limit`;
        raises InvalidInput naming ``field``."""
        return _within(value, default or self.max_bytes, self.max_bytes_limit, field)

    def wait(self, timeout: float | None) -> float:
        """A long poll's seconds (None: the default) within 0 to :attr:`max_timeout`."""
        wait = self.timeout if timeout is None else timeout
        if not 0 <= wait <= self.max_timeout:
            raise InvalidInput(f"timeout must be 0 to {self.max_timeout * 1000:.0f} ms", field="timeout")
        return wait


def _within(value: int | None, default: int, high: int, field: str) -> int:
    chosen = default if value is None else value
    if not 1 <= chosen <= high:
        raise InvalidInput(f"{field} must be 1 to {high}, got {chosen}", field=field)
    return chosen
