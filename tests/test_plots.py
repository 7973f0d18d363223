"""The study's figures: what they show computed exactly on inputs whose answer is known (series,
crossings with their intervals, the Pareto set, the percentile spectrum), and `fastbench plot` end to
end on a small store of real runs against the synthetic server."""

from __future__ import annotations

import math

import pytest
from hdrh.histogram import HdrHistogram

from fastbench.study.figures_data import (
    NO_VARIANT,
    Cell,
    RunPoint,
    all_crossings,
    crossings,
    group_series,
    log_axis,
    mean_interval,
    pareto_front,
    spectrum,
)


def cells(loads: list[float], means: list[float], half: float = 0.0) -> list[Cell]:
    return [Cell(x, (m,), m, m - half, m + half) for x, m in zip(loads, means)]


def point(variant: str, conc: int, **flat: float) -> RunPoint:
    return RunPoint(f"{variant}-{conc}-{len(flat)}", variant, conc, None, flat, None)


# -- series ------------------------------------------------------------------------------------------

def test_mean_interval_is_the_t_interval_of_the_mean() -> None:
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0)
    mean, low, high = mean_interval([1.0, 3.0])  # s = sqrt(2), n = 2, t = 12.706
    assert mean == 2.0
    assert high - mean == pytest.approx(12.706 * math.sqrt(2) / math.sqrt(2))
    assert mean - low == pytest.approx(high - mean)
    mean, low, high = mean_interval([10.0, 12.0, 14.0])  # s = 2, n = 3, t = 4.303
    assert (mean, high) == (12.0, pytest.approx(12.0 + 4.303 * 2 / math.sqrt(3)))


def test_group_series_averages_the_repeats_of_each_cell_per_variant() -> None:
    points = [point("spec", 4, rate=10.0), point("base", 1, rate=50.0), point("base", 4, rate=30.0),
              point("spec", 4, rate=14.0), point("spec", 1, rate=80.0), point("base", 2)]  # no rate: left out
    series = group_series(points, "rate")
    assert list(series) == ["base", "spec"]
    assert [(c.load, c.values) for c in series["base"]] == [(1.0, (50.0,)), (4.0, (30.0,))]
    four = series["spec"][1]
    assert (four.load, four.values, four.mean) == (4.0, (10.0, 14.0), 12.0)
    assert four.low < 12.0 < four.high
    assert group_series([RunPoint("r", NO_VARIANT, None, 2.0, {"rate": 1.0}, None)], "rate") == {}
    by_rate = group_series([RunPoint("r", NO_VARIANT, None, 2.0, {"rate": 1.0}, None)], "rate", axis="rate")
    assert [c.load for c in by_rate[NO_VARIANT]] == [2.0]


# -- crossings ---------------------------------------------------------------------------------------

def test_two_lines_cross_where_they_are_equal_interpolated_between_cells() -> None:
    loads = [1.0, 2.0, 3.0, 5.0, 8.0]
    falling = cells(loads, [10 - x for x in loads])  # 10 - x and 2 + x meet at x = 4
    rising = cells(loads, [2 + x for x in loads])
    (found,) = crossings(falling, rising, names=("spec", "base"))
    assert found.load == pytest.approx(4.0)
    assert (found.first, found.second, found.first_above_before) == ("spec", "base", True)
    assert found.low is None and found.high is None  # no repeats: no interval
    (back,) = crossings(rising, falling)
    assert back.load == pytest.approx(4.0) and not back.first_above_before


def test_on_a_log_axis_the_crossing_is_interpolated_in_log_load() -> None:
    # 10 -> 2 and 2 -> 10 between loads 1 and 4: equal half way in log2, at load 2
    (found,) = crossings(cells([1.0, 4.0], [10.0, 2.0]), cells([1.0, 4.0], [2.0, 10.0]), log_x=True)
    assert found.load == pytest.approx(2.0)
    (linear,) = crossings(cells([1.0, 4.0], [10.0, 2.0]), cells([1.0, 4.0], [2.0, 10.0]))
    assert linear.load == pytest.approx(2.5)
    assert log_axis([1, 2, 4, 8]) and not log_axis([1, 2, 3]) and not log_axis([0, 8])


def test_only_shared_loads_count_and_parallel_lines_never_cross() -> None:
    assert crossings(cells([1, 2, 4], [5, 6, 7]), cells([1, 2, 4], [1, 2, 3])) == []
    # the second series lacks load 2: the crossing is interpolated between 1 and 4
    (found,) = crossings(cells([1, 2, 4], [10, 0, 4]), cells([1, 4], [4, 10]))
    assert found.load == pytest.approx(1 + 3 * 6 / 12)


def test_a_cell_where_the_lines_meet_exactly_is_the_crossing_and_a_touch_is_none() -> None:
    (found,) = crossings(cells([1, 2, 3], [3, 5, 7]), cells([1, 2, 3], [5, 5, 5]))
    assert found.load == 2.0
    assert crossings(cells([1, 2, 3], [3, 5, 3]), cells([1, 2, 3], [5, 5, 5])) == []


def test_two_crossings_are_both_found() -> None:
    found = crossings(cells([1, 2, 3, 4], [0, 2, 2, 0]), cells([1, 2, 3, 4], [1, 1, 1, 1]))
    assert [c.load for c in found] == pytest.approx([1.5, 3.5])
    assert [c.first_above_before for c in found] == [False, True]


def test_the_interval_is_where_the_two_bands_overlap() -> None:
    loads = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    # 10 - x and 2 + x, each +-1: they overlap where |8 - 2x| <= 2, from 3 to 5
    (found,) = crossings(cells(loads, [10 - x for x in loads], 1.0), cells(loads, [2 + x for x in loads], 1.0))
    assert found.load == pytest.approx(4.0)
    assert (found.low, found.high) == (pytest.approx(3.0), pytest.approx(5.0))
    assert not found.low_open and not found.high_open
    # wider bands (+-3): |8 - 2x| <= 6 from 1 to 7, the whole grid: open at both ends
    (wide,) = crossings(cells(loads, [10 - x for x in loads], 3.0), cells(loads, [2 + x for x in loads], 3.0))
    assert (wide.low, wide.high, wide.low_open, wide.high_open) == (pytest.approx(1.0), pytest.approx(7.0),
                                                                    True, True)
    # one series with an interval, the other without: overlap where |8 - 2x| <= 1, 3.5 to 4.5
    (half,) = crossings(cells(loads, [10 - x for x in loads], 1.0), cells(loads, [2 + x for x in loads]))
    assert (half.low, half.high) == (pytest.approx(3.5), pytest.approx(4.5))


def test_all_crossings_takes_every_pair() -> None:
    series = {"a": cells([1, 2], [0, 2]), "b": cells([1, 2], [1, 1]), "c": cells([1, 2], [5, 6])}
    assert [(c.first, c.second, c.load) for c in all_crossings(series)] == [("a", "b", 1.5)]


# -- Pareto ------------------------------------------------------------------------------------------

def test_the_pareto_front_keeps_the_undominated_points_by_rate_descending() -> None:
    points = [(100.0, 100.0), (90.0, 300.0), (80.0, 250.0), (50.0, 500.0), (50.0, 400.0), (95.0, 90.0),
              (20.0, 500.0)]
    # (80, 250) is beaten by (90, 300); (50, 400) by (50, 500); (95, 90) by (100, 100); (20, 500) by (50, 500)
    assert pareto_front(points) == [0, 1, 3]
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)]) == [0, 1]  # equal points: both kept
    assert pareto_front([]) == []


# -- spectrum ----------------------------------------------------------------------------------------

def test_the_spectrum_runs_from_the_median_side_to_the_last_sample() -> None:
    hist = HdrHistogram(1, 3_600_000_000_000, 3)
    for i in range(1, 1001):
        hist.record_value(i * 1_000_000)  # 1 .. 1000 ms
    xs, values = spectrum(hist)
    assert xs[0] == 1.0 and xs[-1] == pytest.approx(1000.0)  # 1 / (1 - p) up to the 1000th sample
    assert values[0] == pytest.approx(1.0, rel=1e-3)
    assert values[-1] == pytest.approx(1000.0, rel=1e-3)
    at_10 = values[list(xs).index(min(xs, key=lambda x: abs(x - 10)))]  # p90
    assert at_10 == pytest.approx(900.0, rel=1e-2)
    assert list(values) == sorted(values)
    empty_xs, _ = spectrum(HdrHistogram(1, 3_600_000_000_000, 3))
    assert len(empty_xs) == 0
