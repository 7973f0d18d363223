"""One figure's distribution over a run's requests: :class:`Distribution`, from exact per-request values or
from the native core's HDR histogram.

Below ``result`` (whose ``Result`` holds one per figure) and the summaries that hold their own (``steady``,
``cache``), so that each of them imports it and none imports ``result``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fastbench.results.definitions import RATE_SCALE

__all__ = ("Distribution",)


@dataclasses.dataclass(frozen=True)
class Distribution:
    """Summary of one histogram, in ``unit`` ("ms" or "tok/s"); the figures are None when count is 0."""

    unit: str
    count: int
    mean: float | None
    std: float | None
    min: float | None
    median: float | None
    p90: float | None
    p99: float | None
    p99_9: float | None
    max: float | None
    # percentile -> value, for the percentiles a run selected (--metric-percentiles); computed as the
    # others are (exact per-request values, or the histogram)
    selected: dict[float, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def empty(cls, unit: str) -> Distribution:
        return cls(unit, 0, None, None, None, None, None, None, None, None)

    @classmethod
    def from_values(cls, values: np.ndarray, unit: str, scale: float = 1e6,
                    selected: tuple[float, ...] = ()) -> Distribution:
        """Exact figures of per-request values (ns, or tok/s with ``scale`` 1), as vllm bench serve
        computes them: numpy's linear-interpolated percentiles, population standard deviation."""
        if values.size == 0:
            return cls.empty(unit)
        v = np.asarray(values, dtype=np.float64) / scale
        median, p90, p99, p99_9 = (float(x) for x in np.percentile(v, [50.0, 90.0, 99.0, 99.9]))
        at = {p: float(x) for p, x in zip(selected, np.percentile(v, list(selected)))} if selected else {}
        return cls(unit=unit, count=int(v.size), mean=float(v.mean()), std=float(v.std()), min=float(v.min()),
                   median=median, p90=p90, p99=p99, p99_9=p99_9, max=float(v.max()), selected=at)

    @classmethod
    def from_histogram(cls, hist: Any, unit: str, selected: tuple[float, ...] = ()) -> Distribution:
        count = int(hist.get_total_count())
        if count == 0:
            return cls.empty(unit)
        scale = 1e6 if unit == "ms" else float(RATE_SCALE)

        def at(p: float) -> float:
            return float(hist.get_value_at_percentile(p)) / scale

        mean, std = _mean_std(hist)
        return cls(
            unit=unit,
            count=count,
            mean=mean / scale,
            std=std / scale,
            min=float(hist.get_min_value()) / scale,
            median=at(50.0),
            p90=at(90.0),
            p99=at(99.0),
            p99_9=at(99.9),
            max=float(hist.get_max_value()) / scale,
            selected={p: at(p) for p in selected},
        )

    def percentiles(self) -> dict[str, float | None]:
        """Percentiles keyed as vllm names them: "p90", "p99", "p99.9"."""
        return {"p90": self.p90, "p99": self.p99, "p99.9": self.p99_9}



def _mean_std(hist: Any) -> tuple[float, float]:
    """Mean and standard deviation of an HDR histogram, as hdrh computes them (each bucket at its
    median-equivalent value), but vectorised: hdrh's own loop takes ~0.1 s per call."""
    raw = np.ctypeslib.as_array(hist.counts)
    counts = raw[: min(len(raw), int(hist.counts_len))].astype(np.float64)
    index = np.flatnonzero(counts)
    if len(index) == 0:
        return 0.0, 0.0
    half_magnitude = int(hist.sub_bucket_half_count_magnitude)
    half = int(hist.sub_bucket_half_count)
    bucket = (index >> half_magnitude) - 1
    sub_bucket = (index & (half - 1)) + half
    first = bucket < 0
    sub_bucket[first] -= half
    bucket[first] = 0
    shift = bucket + int(hist.unit_magnitude)
    median_equivalent = ((sub_bucket << shift) + ((1 << shift) >> 1)).astype(np.float64)
    weights = counts[index]
    total = weights.sum()
    mean = float((weights * median_equivalent).sum() / total)
    std = float(np.sqrt((weights * (median_equivalent - mean) ** 2).sum() / total))
    return mean, std
