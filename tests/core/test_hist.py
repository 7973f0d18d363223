"""Recorder (C counting in hdrh's layout) against hdrh's own record_value."""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram

from fastbench._core import Recorder
from fastbench.results.records import new_histogram


def test_recorder_matches_hdrh_record_value() -> None:
    rng = np.random.default_rng(1)
    values = np.concatenate([
        rng.integers(0, 3000, 5000),  # the linear first bucket
        rng.lognormal(17, 2, 20000).astype(np.int64),  # ~24 ms median, wide tails
        [1, 2047, 2048, 2049, 4095, 4096, 10**9, 3_600_000_000_000],
    ])
    ours = new_histogram()
    recorder = Recorder(ours)
    reference = new_histogram()
    for v in values.tolist():
        recorder.record_value(v)
        reference.record_value(v)
    recorder.sync()
    assert list(ours.counts) == list(reference.counts)
    assert ours.get_total_count() == reference.get_total_count() == len(values)
    for q in (0, 50, 90, 99, 99.9, 100):
        assert ours.get_value_at_percentile(q) == reference.get_value_at_percentile(q)
    assert ours.get_min_value() == reference.get_min_value()
    assert ours.get_max_value() == reference.get_max_value()


def test_recorder_counts_and_encoding_roundtrip() -> None:
    h = new_histogram()
    recorder = Recorder(h)
    recorder.record_value(20_000_000, 4)  # one chunk of 4 tokens, per-token view
    recorder.record_value(-5)  # negative skew: counted apart, recorded as 0
    recorder.record_value(10**15)  # above the range: clamped and counted
    recorder.sync()
    assert recorder.total_count == 6
    assert recorder.negative_count == 1 and recorder.clamped_count == 1
    decoded = HdrHistogram.decode(h.encode())
    assert decoded.get_total_count() == 6
    assert decoded.get_count_at_value(20_000_000) == 4


def test_values_at_percentiles_are_hdrhs_own() -> None:
    """The merge's percentiles of a worker's histogram (one cumulative sum, fastbench.load.merge) are
    exactly the library's get_value_at_percentile, at every percentile asked and on an empty one."""
    from fastbench.load.merge import values_at_percentiles

    rng = np.random.default_rng(7)
    qs = (0.0, 0.1, 50.0, 90.0, 99.0, 99.5, 99.9, 100.0)
    for size in (1, 2, 17, 5000):
        hist = new_histogram()
        for v in np.concatenate([rng.lognormal(10, 1.5, size), rng.integers(0, 3000, size)]).astype(np.int64):
            hist.record_value(int(v))
        assert values_at_percentiles(hist, qs) == [hist.get_value_at_percentile(q) for q in qs]
    empty = new_histogram()
    assert values_at_percentiles(empty, qs) == [empty.get_value_at_percentile(q) for q in qs]
