import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.tubemq.net.backoff import Backoff, ConstantBackoff, ExponentialBackoff


def test_constant() -> None:
    backoff: Backoff = ConstantBackoff(0.5)
    assert [backoff.compute(n) for n in (0, 1, 2, 100)] == [0.0, 0.5, 0.5, 0.5]
    assert repr(backoff) == "ConstantBackoff(delay=0.5)"
    with pytest.raises(ValueError, match=">= 0"):
        ConstantBackoff(-1)


def test_exponential_doubles_up_to_cap() -> None:
    backoff = ExponentialBackoff(base=0.1, cap=1.0)
    delays = [backoff.compute(n) for n in range(7)]
    assert delays == pytest.approx([0.0, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert backoff.compute(10**9) == 1.0  # no overflow for absurd counts
    assert backoff.compute(-3) == 0.0
    assert "base=0.1" in repr(backoff) and "cap=1.0" in repr(backoff)


def test_exponential_factor() -> None:
    assert ExponentialBackoff(1.0, 100.0, factor=3.0).compute(3) == 9.0
    flat = ExponentialBackoff(0.2, 5.0, factor=1.0)
    assert flat.compute(1) == flat.compute(50) == 0.2
    assert ExponentialBackoff(2.0, 2.0).compute(5) == 2.0


def test_jitter_uses_injected_source() -> None:
    values = iter([0.0, 0.5, 0.999])
    backoff = ExponentialBackoff(base=1.0, cap=8.0, jitter=0.5, rand=lambda: next(values))
    assert backoff.compute(4) == 8.0  # r = 0: no reduction
    assert backoff.compute(4) == 6.0  # r = 0.5: 8 * (1 - 0.25)
    assert backoff.compute(1) == pytest.approx(1.0 * (1 - 0.5 * 0.999))
    full = ExponentialBackoff(base=1.0, cap=8.0, jitter=1.0, rand=lambda: 0.75)
    assert full.compute(2) == 0.5
    # no jitter: the random source is never consulted
    ExponentialBackoff(jitter=0.0, rand=lambda: pytest.fail("rand called")).compute(3)


@pytest.mark.parametrize(
    "kwargs",
    [{"base": 0}, {"base": 2, "cap": 1}, {"factor": 0.5}, {"jitter": -0.1}, {"jitter": 1.5}],
)
def test_exponential_rejects_bad_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(**kwargs)  # type: ignore[arg-type]


@given(
    base=st.floats(0.001, 5.0),
    extra=st.floats(0.0, 100.0),
    factor=st.floats(1.0, 4.0),
    jitter=st.floats(0.0, 1.0),
    r=st.floats(0.0, 0.999),
    failures=st.integers(0, 10_000),
)
def test_exponential_bounds(
    base: float, extra: float, factor: float, jitter: float, r: float, failures: int
) -> None:
    cap = base + extra
    backoff = ExponentialBackoff(base, cap, factor=factor, jitter=jitter, rand=lambda: r)
    delay = backoff.compute(failures)
    if failures == 0:
        assert delay == 0.0
    else:
        plain = ExponentialBackoff(base, cap, factor=factor).compute(failures)
        assert base <= plain <= cap
        assert plain <= ExponentialBackoff(base, cap, factor=factor).compute(failures + 1)
        assert delay == pytest.approx(plain * (1 - jitter * r))
