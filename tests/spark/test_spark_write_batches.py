"""The write batches of the tubemq Spark sink (no Spark needed): the bound in rows and bytes, what a row
counts, the options that set the bound."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.spark.batches import batches, row_bytes, to_outgoing
from gateway.spark.options import DEFAULT_WRITE_BATCH_BYTES, DEFAULT_WRITE_BATCH_ROWS, SourceOptions


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=300), max_size=200),
    max_rows=st.integers(min_value=1, max_value=40),
    max_bytes=st.integers(min_value=1, max_value=1000),
)
def test_batches_keep_every_row_in_order_within_the_bound_and_as_full_as_it_allows(
    sizes: list[int], max_rows: int, max_bytes: int
) -> None:
    cut = list(batches(((i, size) for i, size in enumerate(sizes)), max_rows, max_bytes))
    assert [i for batch in cut for i in batch] == list(range(len(sizes)))  # every row once, in order
    for n, batch in enumerate(cut):
        held = sum(sizes[i] for i in batch)
        assert 1 <= len(batch) <= max_rows
        assert held <= max_bytes or len(batch) == 1  # only a row larger than the bound goes over, alone
        if n + 1 < len(cut):  # a batch ends only when the next row does not fit
            following = sizes[cut[n + 1][0]]
            assert len(batch) == max_rows or held + following > max_bytes


@pytest.mark.parametrize(
    ("sizes", "max_rows", "max_bytes", "expected"),
    [
        ([], 3, 10, []),
        ([1, 1, 1, 1, 1, 1, 1], 3, 100, [[0, 1, 2], [3, 4, 5], [6]]),  # rows bound
        ([4, 4, 4, 4], 10, 8, [[0, 1], [2, 3]]),  # bytes bound, exactly full
        ([4, 5, 4], 10, 8, [[0], [1], [2]]),  # the next row would pass it
        ([2, 50, 2, 2], 10, 8, [[0], [1], [2, 3]]),  # a row larger than the bound goes alone
        ([0, 0, 0, 9], 2, 8, [[0, 1], [2], [3]]),  # empty rows still count against the rows bound
    ],
)
def test_batch_bound_table(
    sizes: list[int], max_rows: int, max_bytes: int, expected: list[list[int]]
) -> None:
    assert list(batches(((i, s) for i, s in enumerate(sizes)), max_rows, max_bytes)) == expected


def test_a_bound_with_no_room_is_refused() -> None:
    for max_rows, max_bytes in ((0, 10), (10, 0)):
        with pytest.raises(ValueError, match="room for a row"):
            list(batches([("a", 1)], max_rows, max_bytes))


def test_a_row_counts_its_value_and_the_text_of_its_other_fields() -> None:
    index = {"value": 0, "key": 1, "attributes": 2, "stream_id": 3, "msg_time": 4, "other": 5}
    row = ("héllo", "k1", {"a": "bc", "d": 1}, "s", datetime(2024, 1, 2, 3, 4), "ignored")
    outgoing = to_outgoing(index, row)
    assert outgoing == (b"h\xc3\xa9llo", "k1", {"a": "bc", "d": "1"}, "s", datetime(2024, 1, 2, 3, 4))
    assert row_bytes(outgoing) == 6 + 2 + (1 + 2 + 1 + 1) + 1 + 12
    assert row_bytes((b"x" * 10, None, None, None, "202401020304")) == 22
    assert row_bytes(to_outgoing({"value": 0}, (b"abc",))) == 3


def test_the_bound_is_set_by_options_with_defaults() -> None:
    base = {"masters": "h", "topic": "t"}
    options = SourceOptions.parse(base)
    assert (options.write_batch_rows, options.write_batch_bytes) == (1000, 4 * 1024 * 1024)
    assert (DEFAULT_WRITE_BATCH_ROWS, DEFAULT_WRITE_BATCH_BYTES) == (1000, 4 * 1024 * 1024)
    given_ = SourceOptions.parse({**base, "writeBatchRows": "50", "WRITEBATCHBYTES": "65536"})
    assert (given_.write_batch_rows, given_.write_batch_bytes) == (50, 65536)
    for name, value, match in (
        ("writeBatchRows", "0", "writeBatchRows must be >= 1"),
        ("writeBatchBytes", "-5", "writeBatchBytes must be >= 1"),
        ("writeBatchBytes", "4MiB", "writeBatchBytes must be a whole number"),
    ):
        with pytest.raises(ValueError, match=match):
            SourceOptions.parse({**base, name: value})
