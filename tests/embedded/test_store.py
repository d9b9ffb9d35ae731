"""Topic store: 28-byte index offsets shared by a store's partitions, filters, file persistence."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.embedded.msgid import id_for
from gateway.embedded.store import DATA_HEADER_BYTES, INDEX_ENTRY_BYTES, TopicStore, store_path


def crc(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


def fill(store: TopicStore, partitions: list[int], size: int = 10) -> None:
    for i, pid in enumerate(partitions):
        store.append(pid, bytes([i % 256]) * size, 0)


def test_offsets_are_28_times_the_store_sequence_across_partitions() -> None:
    store = TopicStore("demo", 0)
    offsets = [store.append(pid, b"x", 0).append_offset for pid in (2, 0, 1, 0)]
    assert offsets == [0, 28, 56, 84]
    assert store.max_offset == 4 * INDEX_ENTRY_BYTES
    assert store.min_offset == 0
    assert len(store) == 4


def test_append_assigns_checksum_ids_and_time() -> None:
    nanos = iter([123_456_789_000, 123_456_790_000])
    store = TopicStore("demo", 0, clock=lambda: 1_700_000_000.5, id_clock=lambda: next(nanos))
    first = store.append(0, b"hello", 1, 96354, -1062731510)
    second = store.append(0, b"hello", 1)
    assert first.append_time_ms == 1_700_000_000_500
    assert (first.message_id, second.message_id) == (id_for(123_456_789_000), id_for(123_456_790_000))
    (msg, _) = store.read(0, 0).messages
    assert msg.checksum == 907060870 == crc(b"hello")
    assert (msg.flag, msg.msg_type_hash, msg.sent_addr, msg.offset) == (1, 96354, -1062731510, 0)
    assert msg.message_id == first.message_id


def test_read_skips_sibling_entries_and_advances_past_them() -> None:
    # The capture: three messages to partitions 2, 0, 1 of one store; reading partition 0 from the first
    # returns one message and the advance covers all three entries.
    store = TopicStore("demo", 0)
    for pid in (2, 0, 1):
        store.append(pid, b"p" * 55, 1)
    result = store.read(0, 0)
    assert [m.partition_id for m in result.messages] == [0]
    assert (result.start_offset, result.next_offset, result.max_offset) == (0, 84, 84)
    assert result.advance == 84
    assert result.lag_bytes == DATA_HEADER_BYTES + 55  # one 107-byte record behind, as captured
    assert store.read(2, 0).lag_bytes == 214
    assert store.read(1, 0).lag_bytes == 0


def test_read_with_no_entry_of_the_partition_ahead_takes_the_whole_rest() -> None:
    store = TopicStore("demo", 0)
    fill(store, [1, 1, 2])
    result = store.read(0, 28)
    assert result.messages == ()
    assert (result.start_offset, result.next_offset, result.lag_bytes) == (28, 84, 0)


def test_read_at_or_past_the_end_examines_nothing() -> None:
    store = TopicStore("demo", 0)
    fill(store, [0, 0])
    result = store.read(0, 56)
    assert (result.messages, result.next_offset, result.advance) == ((), 56, 0)
    assert store.read(0, 500).advance == 0


def test_requested_offsets_are_rounded_down_to_an_entry() -> None:
    store = TopicStore("demo", 0)
    fill(store, [0, 0, 0])
    result = store.read(0, 30)
    assert result.start_offset == 28
    assert [m.offset for m in result.messages] == [28, 56]


def test_max_entries_bounds_the_examined_entries_including_siblings() -> None:
    store = TopicStore("demo", 0)
    fill(store, [1, 1, 0, 1, 0])
    result = store.read(0, 0, max_entries=3)
    assert [m.offset for m in result.messages] == [56]
    assert result.next_offset == 84
    # Partition 0 has an entry ahead (at 112), but a one-entry window at 84 only sees a sibling.
    result = store.read(0, 84, max_entries=1)
    assert (result.messages, result.next_offset) == ((), 112)


def test_max_bytes_stops_after_the_message_that_reaches_it() -> None:
    store = TopicStore("demo", 0)
    fill(store, [0, 1, 0, 0], size=48)  # 100-byte records
    result = store.read(0, 0, max_bytes=150)
    assert [m.offset for m in result.messages] == [0, 56]
    assert result.next_offset == 84
    assert result.lag_bytes == 100


def test_filter_keeps_only_listed_hashes_and_steps_over_the_rest() -> None:
    store = TopicStore("demo", 0)
    for pid, type_hash in [(0, 7), (0, 8), (1, 7), (0, -1), (0, 9)]:
        store.append(pid, b"m", 0, type_hash)
    result = store.read(0, 0, filter_hashes={7, 9})
    assert [(m.offset, m.msg_type_hash) for m in result.messages] == [(0, 7), (112, 9)]
    assert result.next_offset == 140
    nothing = store.read(0, 28, filter_hashes={8000})
    assert (nothing.messages, nothing.next_offset) == ((), 140)
    assert [m.offset for m in store.read(0, 0, filter_hashes=()).messages] == [0, 28, 84, 112]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), max_size=40),
    st.integers(0, 2),
    st.integers(1, 7),
    st.sets(st.integers(0, 3), max_size=2),
)
def test_repeated_reads_visit_every_matching_message_once_in_order(
    appends: list[tuple[int, int]], pid: int, window: int, filters: set[int]
) -> None:
    store = TopicStore("demo", 0)
    for p, h in appends:
        store.append(p, f"{p}-{h}".encode(), 0, h)
    expected = [i * 28 for i, (p, h) in enumerate(appends) if p == pid and (not filters or h in filters)]
    seen: list[int] = []
    offset = 0
    while offset < store.max_offset:
        result = store.read(pid, offset, max_entries=window, filter_hashes=filters)
        assert result.advance > 0 and result.next_offset % 28 == 0
        seen += [m.offset for m in result.messages]
        offset = result.next_offset
    assert seen == expected


def test_file_store_survives_reopen(tmp_path: Path) -> None:
    path = store_path(tmp_path, "demo", 1)
    assert path == tmp_path / "demo" / "store-1.log"
    store = TopicStore("demo", 1, path=path)
    acks = [store.append(10000 + i % 2, f"m{i}".encode(), i % 2, 5, 9) for i in range(5)]
    store.close()
    reopened = TopicStore("demo", 1, path=path)
    assert reopened.max_offset == 140
    assert reopened.data_max_offset == 5 * (DATA_HEADER_BYTES + 2)
    got = reopened.read(10001, 0).messages
    assert [(m.message_id, m.data, m.flag, m.offset) for m in got] == [
        (acks[i].message_id, f"m{i}".encode(), 1, acks[i].append_offset) for i in (1, 3)
    ]
    assert got[0].append_time_ms == acks[1].append_time_ms
    later = reopened.append(10000, b"after", 0)
    assert later.append_offset == 140
    reopened.close()


def test_torn_tail_is_cut_and_appending_continues(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = store_path(tmp_path, "demo", 0)
    store = TopicStore("demo", 0, path=path)
    for i in range(3):
        store.append(0, b"payload-%d" % i, 0)
    store.close()
    whole = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(whole - 3)  # the last record lost its tail in a crash
    with caplog.at_level("WARNING", logger="gateway.embedded.store"):
        reopened = TopicStore("demo", 0, path=path)
    (record,) = caplog.records
    # The cut is reported as fields, so a JSON log line carries them as values.
    fields = record.__dict__
    assert (fields["path"], fields["offset"]) == (str(path), path.stat().st_size)
    assert fields["offset"] + fields["torn_bytes"] == whole - 3
    assert [m.data for m in reopened.read(0, 0).messages] == [b"payload-0", b"payload-1"]
    assert reopened.append(0, b"again", 0).append_offset == 56
    reopened.close()
    again = TopicStore("demo", 0, path=path, fsync=True)
    assert [m.data for m in again.read(0, 0).messages] == [b"payload-0", b"payload-1", b"again"]
    again.close()


def test_corrupt_record_and_everything_after_it_is_dropped(tmp_path: Path) -> None:
    path = store_path(tmp_path, "demo", 0)
    store = TopicStore("demo", 0, path=path)
    store.append(0, b"good", 0)
    size_after_first = path.stat().st_size
    store.append(0, b"flipped", 0)
    store.append(0, b"after", 0)
    store.close()
    with path.open("r+b") as f:
        f.seek(size_after_first + 20)
        byte = f.read(1)
        f.seek(size_after_first + 20)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened = TopicStore("demo", 0, path=path)
    assert [m.data for m in reopened.read(0, 0).messages] == [b"good"]
    assert path.stat().st_size == size_after_first
    reopened.close()


def test_half_written_header_starts_afresh_but_a_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    path.write_bytes(b"TUBE")
    store = TopicStore("demo", 0, path=path)
    assert store.max_offset == 0
    store.append(0, b"x", 0)
    store.close()
    assert TopicStore("demo", 0, path=path).max_offset == 28
    other = tmp_path / "other.log"
    other.write_bytes(b"something else entirely")
    with pytest.raises(ValueError, match="not a message store file"):
        TopicStore("demo", 0, path=other)
    assert other.read_bytes() == b"something else entirely"


def test_closed_store_refuses_appends(tmp_path: Path) -> None:
    store = TopicStore("demo", 0, path=tmp_path / "s.log")
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.append(0, b"x", 0)
    assert "closed" in repr(store)


def test_failed_write_leaves_the_store_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    store = TopicStore("demo", 0, path=path)
    store.append(0, b"ok", 0)
    size = path.stat().st_size
    assert store._fd is not None
    os.close(store._fd)  # every later write on this descriptor fails with EBADF
    with pytest.raises(OSError):
        store.append(0, b"lost", 0)
    assert store.max_offset == 28
    store._fd = None
    assert path.stat().st_size == size


def test_repr_shows_state() -> None:
    store = TopicStore("demo", 2)
    store.append(20000, b"x", 0)
    assert repr(store) == "TopicStore('demo', store=2, messages=1, max_offset=28, memory)"
