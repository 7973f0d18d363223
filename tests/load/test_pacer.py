"""Arrival schedules: closed loop, Poisson and gamma statistics, determinism, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fastbench.load.pacer import arrival_offsets_ns

N = 200_000


@pytest.mark.parametrize("rate", [None, math.inf])
def test_closed_loop_is_all_zeros(rate: float | None) -> None:
    offsets = arrival_offsets_ns(50, rate, 1.0, 0)
    assert offsets.dtype == np.int64
    assert offsets.shape == (50,)
    assert not offsets.any()


@pytest.mark.parametrize("rate", [None, 10.0])
def test_zero_requests(rate: float | None) -> None:
    offsets = arrival_offsets_ns(0, rate, 1.0, 0)
    assert offsets.dtype == np.int64
    assert offsets.shape == (0,)


def test_one_request_is_due_at_start() -> None:
    assert arrival_offsets_ns(1, 5.0, 1.0, 0).tolist() == [0]


def _gaps_s(offsets: np.ndarray) -> np.ndarray:
    return np.diff(offsets).astype(np.float64) / 1e9


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
@pytest.mark.parametrize("rate", [2.0, 250.0])
def test_mean_rate(rate: float, burstiness: float) -> None:
    offsets = arrival_offsets_ns(N, rate, burstiness, seed=1)
    assert offsets[0] == 0
    assert np.all(np.diff(offsets) >= 0)
    achieved = (N - 1) / (offsets[-1] / 1e9)
    # The mean of N gaps has relative s.d. cv/sqrt(N) <= 2/447 ~ 0.45%; 2% is > 4 sigma.
    assert achieved == pytest.approx(rate, rel=0.02)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 8.0])
def test_coefficient_of_variation(burstiness: float) -> None:
    gaps = _gaps_s(arrival_offsets_ns(N, 10.0, burstiness, seed=2))
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1.0 / math.sqrt(burstiness), rel=0.03)


def test_poisson_gaps_are_exponential() -> None:
    gaps = _gaps_s(arrival_offsets_ns(N, 4.0, 1.0, seed=3))
    # P(gap > mean) = e^-1 for an exponential distribution.
    assert np.mean(gaps > 0.25) == pytest.approx(math.exp(-1), abs=0.01)


def test_deterministic_by_seed() -> None:
    a = arrival_offsets_ns(1000, 20.0, 0.7, seed=42)
    b = arrival_offsets_ns(1000, 20.0, 0.7, seed=42)
    c = arrival_offsets_ns(1000, 20.0, 0.7, seed=43)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    # The first k arrivals do not depend on how many follow.
    assert np.array_equal(arrival_offsets_ns(10, 20.0, 0.7, seed=42), a[:10])


@pytest.mark.parametrize(
    ("n", "rate", "burstiness", "word"),
    [
        (-1, 1.0, 1.0, "requests"),
        (10, 0.0, 1.0, "rate"),
        (10, -3.0, 1.0, "rate"),
        (10, math.nan, 1.0, "rate"),
        (10, 1.0, 0.0, "burstiness"),
        (10, 1.0, -1.0, "burstiness"),
        (10, 1.0, math.nan, "burstiness"),
        (10, None, 0.0, "burstiness"),
    ],
)
def test_validation(n: int, rate: float | None, burstiness: float, word: str) -> None:
    with pytest.raises(ValueError, match=word) as info:
        arrival_offsets_ns(n, rate, burstiness, 0)
    assert "\n" not in str(info.value)


def test_schedule_too_long_for_int64() -> None:
    with pytest.raises(ValueError, match="too long"):
        arrival_offsets_ns(10, 1e-12, 1.0, 0)
