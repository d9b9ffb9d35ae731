"""The search of a seek by time (gateway.tubemq.ranges.by_time) against a model store, and the seek's time
parsing (gateway.service.seek_time), with hypothesis.

The model is a TubeMQ store: one index of 28-byte entries shared by several partitions, read in broker
batches of a few entries from a position up to an end, like RangeReader (a message's exact offset known
only when its batch holds nothing but the partition's own entries), with expired entries below the
minimum."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.service.errors import InvalidInput
from gateway.service.seek_time import MAX_TIME_MS, minute_text, parse_time
from gateway.tubemq.address import NodeAddress
from gateway.tubemq.consumer import ConsumedMessage
from gateway.tubemq.ranges.by_time import find_time_offset
from gateway.tubemq.ranges.records import OffsetBounds, RangeBatch
from gateway.tubemq.wire.meta import BrokerInfo, Partition

E = 28
P = Partition(BrokerInfo(1, NodeAddress("127.0.0.1", 1)), "t", 0)


@dataclass
class Entry:
    partition: int
    minute: str | None
    stream: str | None = None


@dataclass
class ModelStore:
    entries: list[Entry]
    expired: int = 0  # entries below the store's minimum
    chunk: int = 3  # index entries one broker batch reads
    reads: int = 0

    async def bounds(self, partition: Partition) -> OffsetBounds:
        return OffsetBounds(self.expired * E, len(self.entries) * E)

    def mine(self, i: int, stream_ids: Collection[str]) -> bool:
        entry = self.entries[i]
        return entry.partition == 0 and (not stream_ids or entry.stream in stream_ids)

    async def read(
        self, partition: Partition, start: int, end: int, stream_ids: Collection[str] = ()
    ) -> AsyncGenerator[RangeBatch, None]:
        self.reads += 1
        position = max(start // E, self.expired)
        stop = min(end // E, len(self.entries))
        while position < stop:
            span = range(position, min(position + self.chunk, stop))
            own = [i for i in span if self.mine(i, stream_ids)]
            dense = len(own) == len(span)
            messages = [
                ConsumedMessage(i, b"", {}, None, self.entries[i].minute, 0, k, i * E if dense else None)
                for k, i in enumerate(own)
            ]
            yield RangeBatch(span.start * E, span.stop * E, messages)
            await asyncio.sleep(0)
            position = span.stop

    def landing(self, offset: int, stream_ids: Collection[str] = ()) -> int | None:
        """The entry a registration at ``offset`` delivers first (None: the end)."""
        for i in range(max(offset // E, self.expired), len(self.entries)):
            if self.mine(i, stream_ids):
                return i
        return None

    def own(self, stream_ids: Collection[str] = ()) -> list[int]:
        return [i for i in range(self.expired, len(self.entries)) if self.mine(i, stream_ids)]


def verdicts(store: ModelStore, minute: str, stream_ids: Collection[str] = ()) -> dict[int, bool]:
    """Per own entry: late (True) or early, an untimed one taking the next timed one's (late at the end)."""
    out: dict[int, bool] = {}
    ahead = True
    for i in reversed(store.own(stream_ids)):
        when = store.entries[i].minute
        if when is not None and when.isdigit() and len(when) == 12:  # else no time ("2026-11", ...)
            ahead = when >= minute
        out[i] = ahead
    return out


MINUTES = [f"2026112701{m:02d}" for m in range(0, 60, 7)]
minutes = st.sampled_from(MINUTES)
entries = st.lists(
    st.builds(
        Entry,
        st.sampled_from([0, 0, 1, 2]),
        st.one_of(st.none(), minutes, st.just("2026-11")),
        st.sampled_from([None, "a", "b"]),
    ),
    max_size=60,
)


def _search(store: ModelStore, minute: str, stream_ids: Collection[str] = (), batches: int = 1000) -> int:
    found = asyncio.run(find_time_offset(store, P, minute, stream_ids=stream_ids, max_batches=batches))
    assert found.bounds == OffsetBounds(store.expired * E, len(store.entries) * E)
    assert found.offset % E == 0 and store.expired * E <= found.offset <= len(store.entries) * E
    return found.offset


@settings(max_examples=300, deadline=None)
@given(entries, st.integers(0, 5), st.integers(1, 5), minutes, st.sampled_from([(), ("a",)]))
def test_the_search_lands_on_a_late_message_right_after_an_early_one(
    items: list[Entry], expired: int, chunk: int, minute: str, stream_ids: tuple[str, ...]
) -> None:
    store = ModelStore(items, min(expired, len(items)), chunk)
    offset = _search(store, minute, stream_ids)
    late = verdicts(store, minute, stream_ids)
    landed = store.landing(offset, stream_ids)
    own = store.own(stream_ids)
    before = [i for i in own if i < (landed if landed is not None else len(items))]
    if landed is not None:
        assert late[landed], (offset, landed)
    if before:
        assert not late[before[-1]], (offset, before[-1])


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(1, 5), minutes)
def test_with_rising_times_the_search_lands_on_the_first_message_at_or_after_the_minute(
    data: st.DataObject, chunk: int, minute: str
) -> None:
    stamps = sorted(data.draw(st.lists(st.one_of(st.none(), minutes), max_size=60), label="stamps"), key=str)
    timed = sorted(s for s in stamps if s is not None)
    order = iter(timed)
    # keep untimed messages where they were drawn, timed ones in rising order
    minutes_in_order = [None if s is None else next(order) for s in stamps]
    owners = data.draw(st.lists(st.sampled_from([0, 0, 1]), min_size=len(stamps), max_size=len(stamps)))
    store = ModelStore([Entry(p, m) for p, m in zip(owners, minutes_in_order, strict=True)], 0, chunk)
    offset = _search(store, minute)
    own = store.own()
    first_late_timed = next((i for i in own if (store.entries[i].minute or "") >= minute), None)
    # the untimed messages right before it go with it
    expected = first_late_timed
    for i in reversed([i for i in own if first_late_timed is None or i < first_late_timed]):
        if store.entries[i].minute is not None:
            break
        expected = i
    assert store.landing(offset) == expected


def test_a_long_run_without_times_counts_as_late_and_reads_stay_logarithmic() -> None:
    untimed = [Entry(0, None) for _ in range(50)]
    store = ModelStore([Entry(0, "202611270100"), *untimed, Entry(0, "202611270159")], 0, 2)
    # reading one batch per step: the run is taken as late, so the seek lands on its first message
    assert store.landing(_search(store, "202611270130", batches=1)) == 1
    # reading them all: they go with the late message after them, the same landing
    assert store.landing(_search(store, "202611270130")) == 1
    big = ModelStore([Entry(0, f"20261127{h:02d}{m:02d}") for h in range(24) for m in range(60)], 0, 4)
    big.reads = 0
    assert big.landing(_search(big, "202611271200")) == 12 * 60
    assert big.reads <= 12  # log2(1440) + 1


def test_before_every_message_the_oldest_and_after_every_message_the_end() -> None:
    store = ModelStore([Entry(0, "202611270110"), Entry(1, None), Entry(0, "202611270120")], 1, 2)
    assert _search(store, "202601010000") == E  # the oldest kept (the first entry expired)
    assert _search(store, "202612010000") == 3 * E  # the end
    assert _search(ModelStore([]), "202611270100") == 0


# --- the time a client names --------------------------------------------------------------------------

aware = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))


@given(aware, offsets)
def test_rfc3339_text_and_milliseconds_name_the_same_instant(when: datetime, zone: timezone) -> None:
    ms = int((when - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))
    assert parse_time(ms) == ms
    shown = when.astimezone(zone)
    assert parse_time(shown.isoformat()) == ms
    assert parse_time(shown.isoformat().replace("+00:00", "Z")) == ms


@given(aware, st.sampled_from(["UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin"]))
def test_the_minute_is_the_wall_clock_of_the_zone_truncated(when: datetime, zone: str) -> None:
    from zoneinfo import ZoneInfo

    ms = int((when - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))
    local = when.astimezone(ZoneInfo(zone))
    if local.year > 9999 or local.year < 1970:
        return
    assert minute_text(ms, zone) == local.strftime("%Y%m%d%H%M")
    assert minute_text(ms + 59_999 - ms % 60_000, zone) == minute_text(ms, zone)


@given(st.one_of(st.text(max_size=80), st.floats(), st.none(), st.booleans(), st.integers()))
def test_anything_else_is_refused_naming_the_field(value: object) -> None:
    try:
        ms = parse_time(value, "time")
    except InvalidInput as exc:
        assert exc.field == "time"
    else:
        assert isinstance(value, int | str) and 0 <= ms <= MAX_TIME_MS


@pytest.mark.parametrize(
    ("value", "zone"),
    [("2026-11-27T01:30:00", None), ("2026-11-27", None), (-1, None), (MAX_TIME_MS + 1, None)],
)
def test_a_time_without_offset_or_out_of_range_is_refused(value: object, zone: str | None) -> None:
    with pytest.raises(InvalidInput) as bad:
        parse_time(value)
    assert bad.value.field == "time"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc", "/etc/passwd", "", "Asia"])
def test_an_unknown_zone_is_refused_naming_the_field(zone: str) -> None:
    with pytest.raises(InvalidInput) as bad:
        minute_text(0, zone)
    assert bad.value.field == "time_zone"
