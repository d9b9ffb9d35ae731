"""The client's own random generators.

The gateway draws random numbers (backoff jitter, client id suffixes, access-line sampling) from generators
of its own, never from the process-wide :mod:`random` state: that state belongs to the host application, which
may seed it for reproducible runs, and test frameworks (hypothesis) check that nothing else draws from it
while they generate data. Each generator is seeded anew in a forked child, as :mod:`random`'s own is, so the
workers of one supervisor do not draw the same numbers.
"""

from __future__ import annotations

import os
import random

__all__ = ["private_random"]


def private_random() -> random.Random:
    """A generator seeded from the OS, and seeded again in every child process forked after this call."""
    generator = random.Random()
    os.register_at_fork(after_in_child=generator.seed)
    return generator
