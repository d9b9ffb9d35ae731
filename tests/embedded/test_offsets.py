"""Consumer offsets: readStatus rules, pending advance, lastPackConsumed, persistence (§6.7, §6.8)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from gateway.embedded.offsets import READ_FROM_MAX, READ_FROM_MAX_ALWAYS, READ_NORMAL, OffsetManager

G, T, P = "g", "demo", 0


def test_new_group_starts_at_min_for_read_normal_and_at_max_otherwise() -> None:
    offsets = OffsetManager()
    assert offsets.load(G, T, 0, READ_NORMAL, -1, 0, 280) == 0
    assert offsets.load(G, T, 1, READ_FROM_MAX, -1, 0, 280) == 280
    assert offsets.load(G, T, 2, READ_FROM_MAX_ALWAYS, -1, 0, 280) == 280


def test_known_group_continues_unless_forced() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_FROM_MAX, -1, 0, 56)
    assert offsets.load(G, T, P, READ_FROM_MAX, -1, 0, 280) == 56  # continue from the stored offset
    assert offsets.load(G, T, P, READ_NORMAL, -1, 0, 280) == 56
    assert offsets.load(G, T, P, READ_NORMAL, 115, 0, 280) == 112  # forced, rounded down
    assert offsets.load(G, T, P, READ_NORMAL, 9999, 0, 280) == 280  # clamped to max
    assert offsets.load(G, T, P, READ_NORMAL, 0, 28, 280) == 28  # clamped to min
    # readStatus 2 wins over a requested offset
    assert offsets.load(G, T, P, READ_FROM_MAX_ALWAYS, 56, 0, 308) == 308


def test_registration_drops_the_pending_advance() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    offsets.book(G, T, P, 84, batch_empty=False)
    assert offsets.pending(G, T, P) == 84
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    assert offsets.pending(G, T, P) == 0
    assert offsets.committed(G, T, P) == 0


def test_last_pack_consumed_commits_on_the_next_fetch() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    assert offsets.fetch_offset(G, T, P, True, 0, 280) == 0
    offsets.book(G, T, P, 84, batch_empty=False)
    # not consumed: read again from the committed offset, the pending advance is still there to be replaced
    assert offsets.fetch_offset(G, T, P, False, 0, 280) == 0
    assert offsets.pending(G, T, P) == 84
    offsets.book(G, T, P, 56, batch_empty=False)
    assert offsets.fetch_offset(G, T, P, True, 0, 280) == 56
    assert offsets.pending(G, T, P) == 0


def test_commit_true_advances_and_false_rolls_back() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    offsets.book(G, T, P, 84, batch_empty=False)
    assert offsets.commit(G, T, P, consumed=False) == 0
    assert offsets.pending(G, T, P) == 0
    offsets.book(G, T, P, 84, batch_empty=False)
    assert offsets.commit(G, T, P, consumed=True) == 84
    assert offsets.commit(G, T, P, consumed=True) == 84  # nothing pending: unchanged


def test_an_empty_batch_commits_its_advance_at_once_and_a_zero_advance_keeps_the_pending_one() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    offsets.book(G, T, P, 140, batch_empty=True)
    assert (offsets.committed(G, T, P), offsets.pending(G, T, P)) == (140, 0)
    offsets.book(G, T, P, 28, batch_empty=False)
    offsets.book(G, T, P, 0, batch_empty=True)
    assert offsets.pending(G, T, P) == 28


def test_fetch_resets_offsets_outside_the_store() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_NORMAL, 280, 0, 280)
    assert offsets.fetch_offset(G, T, P, False, 0, 140) == 140  # store shrank: back to its end
    assert offsets.committed(G, T, P) == 140
    offsets.reset(G, T, P, 0, 0, 140)
    assert offsets.fetch_offset(G, T, P, False, 56, 140) == 56
    assert offsets.committed(G, T, P) == 56


def test_committed_offsets_persist_and_pending_ones_do_not(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    offsets = OffsetManager(path, fsync=True)
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    offsets.book(G, T, P, 84, batch_empty=False)
    offsets.commit(G, T, P, consumed=True)
    offsets.load("other", T, 10001, READ_FROM_MAX, -1, 0, 56)
    offsets.book(G, T, P, 28, batch_empty=False)
    offsets.close()  # the writer thread writes what is committed; close waits for it
    again = OffsetManager(path)
    assert again.committed(G, T, P) == 84
    assert again.committed("other", T, 10001) == 56
    assert again.pending(G, T, P) == 0
    assert again.committed("nobody", T, P) is None
    assert not path.with_name("offsets.json.tmp").exists()
    assert "committed=2" in repr(again)


def test_unreadable_offsets_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable offsets file"):
        OffsetManager(path)
    path.write_text(json.dumps({"version": 9, "offsets": []}))
    with pytest.raises(ValueError, match="unknown version"):
        OffsetManager(path)


def test_manual_commit_reads_on_from_the_pending_advance_until_committed() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    assert offsets.fetch_offset(G, T, P, True, 0, 280, manual=True) == 0
    offsets.book(G, T, P, 84, batch_empty=False, manual=True)
    assert offsets.fetch_offset(G, T, P, True, 0, 280, manual=True) == 84
    offsets.book(G, T, P, 56, batch_empty=True, manual=True)  # adds up, nothing committed
    assert (offsets.committed(G, T, P), offsets.pending(G, T, P)) == (0, 140)
    assert offsets.commit(G, T, P, consumed=True) == 140


def test_manual_offset_past_the_end_is_pulled_back_without_a_commit() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    offsets.book(G, T, P, 280, batch_empty=False, manual=True)
    assert offsets.fetch_offset(G, T, P, False, 0, 140, manual=True) == 140
    assert (offsets.committed(G, T, P), offsets.pending(G, T, P)) == (0, 140)


def test_discard_drops_only_the_pending_advance() -> None:
    offsets = OffsetManager()
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 280)
    offsets.book(G, T, P, 84, batch_empty=False)
    offsets.discard(G, T, P)
    offsets.discard("never", T, P)
    assert (offsets.committed(G, T, P), offsets.pending(G, T, P)) == (0, 0)
    assert offsets.committed("never", T, P) is None


def test_the_offsets_file_is_written_off_the_calling_thread_and_coalesced(tmp_path: Path) -> None:
    threads: set[str] = set()

    class Recording(OffsetManager):
        def _write(self, committed: dict[tuple[str, str, int], int]) -> None:
            threads.add(threading.current_thread().name)
            super()._write(committed)

    path = tmp_path / "offsets.json"
    offsets = Recording(path)
    offsets.load(G, T, P, READ_NORMAL, -1, 0, 28 * 1000)
    for _ in range(200):
        offsets.book(G, T, P, 28, batch_empty=False)
        offsets.commit(G, T, P, consumed=True)
    offsets.close()
    assert "offsets-writer" in threads  # the commits did not write the file themselves
    assert offsets.writes <= 200
    assert OffsetManager(path).committed(G, T, P) == 28 * 200
    offsets.commit(G, T, P, consumed=True)  # nothing pending: no change, no write
    offsets.load("late", T, P, READ_NORMAL, -1, 0, 28)  # a commit after close starts the writer again
    offsets.close()
    assert OffsetManager(path).committed("late", T, P) == 0
