"""PendingRuns (what a consumer instance delivered and has not settled, kept per run) against a model with
one entry per message: any sequence of hand-outs, settles, extensions and drops of a batch leaves the same
messages pending, with the same deadlines, and an SSE resume after any token gives them in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.service.delivered import DeliveredRun
from gateway.service.instance_pending import PendingRuns
from gateway.service.instance_records import Batch
from gateway.tubemq.consumer import ConsumedMessage

BATCHES = [Batch(f"c{i}", "t", f"1:t:{i}", 1, i, 0.0, 0) for i in range(3)]
MESSAGES = [ConsumedMessage(i, b"v%d" % i, {}, None, None, 0, i) for i in range(12)]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.integers(0, 11), st.integers(1, 6)),
        st.tuples(st.just("pop"), st.integers(0, 60)),
        st.tuples(st.just("extend"), st.integers(0, 60), st.integers(1, 3)),
        st.tuples(st.just("drop"), st.integers(0, 2)),
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(operations, st.integers(0, 60))
def test_runs_keep_what_one_entry_per_message_keeps(ops: list[tuple[int | str, ...]], after: int) -> None:
    pending = PendingRuns()
    model: dict[int, tuple[Batch, ConsumedMessage, int]] = {}  # token -> batch, message, deadline_ms
    next_token = 1
    for op in ops:
        if op[0] == "add":
            _, b, start, count = op
            assert isinstance(b, int) and isinstance(start, int) and isinstance(count, int)
            count = min(count, len(MESSAGES) - start)
            if count <= 0:
                continue
            run = DeliveredRun(next_token, "t", "1:t:0", 1, 0, MESSAGES, start, count, 1, 5.0, 5000)
            pending.add(run, BATCHES[b])
            for i in range(count):
                model[next_token + i] = (BATCHES[b], MESSAGES[start + i], 5000)
            next_token += count
        elif op[0] == "pop":
            seq = op[1]
            assert isinstance(seq, int)
            found = pending.pop(seq)
            expected = model.pop(seq, None)
            assert (found is None) == (expected is None)
            if found is not None and expected is not None:
                run, i = found
                assert run.batch is expected[0]
                assert run.run.messages[run.run.start + i] is expected[1]
        elif op[0] == "extend":
            _, seq, ms = op
            assert isinstance(seq, int) and isinstance(ms, int)
            found = pending.find(seq)
            assert (found is None) == (seq not in model)
            if found is not None:
                run, i = found
                if run.deadlines is None:
                    run.deadlines = {}
                run.deadlines[i] = (float(ms), ms)
                model[seq] = (*model[seq][:2], ms)
        else:
            batch = BATCHES[int(op[1])]
            dropped = pending.drop_batch(batch)
            gone = sorted(t for t, entry in model.items() if entry[0] is batch)
            assert sorted(p.run.first + i for p, i in dropped) == gone
            for token in gone:
                del model[token]
        assert len(pending) == len(model)
        assert [p.run.first + i for p, i in pending.items()] == sorted(model)
    resumed = [
        (r.first + i, r.messages[r.start + i], r.deadline_ms)
        for r in pending.after(after)
        for i in range(r.count)
    ]
    assert resumed == [(t, m, d) for t, (_, m, d) in sorted(model.items()) if t > after]
    for token, (_, message, deadline) in model.items():
        found = pending.find(token)
        assert found is not None
        delivered = pending.message(*found)
        assert (delivered.seq, delivered.message, delivered.deadline_ms) == (token, message, deadline)
