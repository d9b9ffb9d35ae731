"""A retried message is never due before its delay (gateway.service.redelivery.due_ms): the nack's moment
and the reader's are Unix ms rounded down, the delay a float of seconds. It once came back after 0.5998 s
for a 0.6 s delay (both ends rounded down, the delay truncated)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.service.redelivery import due_ms

#: the longest nack delay (consumers.max_nack_delay) in microseconds
MAX_DELAY_US = 600_000_000


@given(
    st.integers(1_600_000_000_000_000_000, 4_000_000_000_000_000_000),
    st.integers(0, MAX_DELAY_US),
    st.integers(0, 10**12),
)
def test_a_message_is_never_due_before_its_delay_and_at_most_2_ms_after(
    nacked_ns: int, delay_us: int, read_after_ns: int
) -> None:
    delay = delay_us / 1_000_000  # what a client's delayMs / 1000 gives, float fuzz included
    due = due_ms(nacked_ns // 1_000_000, delay)
    wanted_ns = nacked_ns + delay_us * 1000
    assert due * 1_000_000 >= wanted_ns
    assert due * 1_000_000 - wanted_ns <= 2_000_000
    # a reader at a later moment waits the time left from its own rounded-down clock: never less
    read_ns = nacked_ns + read_after_ns
    waits_ns = max(0, due - read_ns // 1_000_000) * 1_000_000
    assert read_ns + waits_ns >= wanted_ns


def test_decimal_delays_are_not_truncated() -> None:
    for delay_ms in (1001, 1003, 570, 600, 1, 0):  # int(1.001 * 1000) is 1000
        assert due_ms(1_000, delay_ms / 1000) == 1_000 + 1 + delay_ms
