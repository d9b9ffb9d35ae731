"""The C allocator's thresholds (gateway/tubemq/net/allocator.py): freed answers stay for the next ones."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway.tubemq.net.allocator import operator_tuned

# A consumer's life in miniature: an answer-sized block and a batch of body-sized ones, made and freed
# again and again; prints the page faults the loop took.
_CHURN = """
import resource, sys
from gateway.tubemq.net.allocator import retain_freed_memory
if sys.argv[1] == "tuned":
    assert retain_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):
    answer = bytes(bytearray(530_000))
    bodies = [bytes(bytearray(1100)) for _ in range(480)]
    del answer, bodies
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

_glibc = pytest.mark.skipif(
    not hasattr(os, "confstr") or os.confstr("CS_GNU_LIBC_VERSION") is None, reason="tunes glibc only"
)


def _faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not operator_tuned({k: v})}
    out = subprocess.run(
        [sys.executable, "-c", _CHURN, mode], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return int(out.stdout)


@_glibc
def test_freed_answers_are_reused_instead_of_faulted_in_again() -> None:
    untuned, tuned = _faults("default"), _faults("tuned")
    # Untuned, every round gives the pages back and faults them in again (some 260 a round).
    assert untuned > 200 * 100
    assert tuned < untuned / 10


def test_an_operators_own_malloc_setting_wins() -> None:
    assert operator_tuned({"MALLOC_TRIM_THRESHOLD_": "1"})
    assert operator_tuned({"MALLOC_MMAP_THRESHOLD_": "1"})
    assert operator_tuned({"GLIBC_TUNABLES": "glibc.rtld.nns=2:glibc.malloc.trim_threshold=1"})
    assert not operator_tuned({"GLIBC_TUNABLES": "glibc.rtld.nns=2", "PATH": "/bin"})


@_glibc
def test_nothing_is_set_where_the_environment_tunes_malloc(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.tubemq.net.allocator import retain_freed_memory

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert not retain_freed_memory()
