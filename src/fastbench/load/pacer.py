"""Arrival schedules as pure functions: when each request is due, as offsets from the start.

The open-loop schedule is drawn up front, so the driver only compares the clock against
``offsets[i]`` and latency can be counted from the scheduled time (coordinated-omission-correct).

As in ``vllm bench serve``, the first request is due at offset 0 and each later one follows the
previous one by an independent inter-arrival gap: exponential with mean ``1/rate`` (a Poisson
process) when ``burstiness == 1``, otherwise gamma with ``shape=burstiness`` and
``scale=1/(rate*burstiness)``. The mean gap is ``1/rate`` either way; the coefficient of variation
of the gaps is ``1/sqrt(burstiness)`` (below 1: more regular than Poisson; above 1: burstier).
Unlike recent vLLM versions, the gaps are not rescaled to make the run last exactly ``n/rate``:
rescaling would bend the process away from the one stated.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ("arrival_offsets_ns",)

_NS_PER_S = 1_000_000_000
_MAX_OFFSET_NS = float(np.iinfo(np.int64).max)


def arrival_offsets_ns(n: int, rate: float | None, burstiness: float, seed: int) -> npt.NDArray[np.int64]:
    """Scheduled send times of ``n`` requests, in nanoseconds from the start of the run.

    :param n: number of requests (0 gives an empty array).
    :param rate: mean arrival rate in requests/s; ``None`` or ``inf`` means closed loop: every offset is 0
        and the concurrency limit alone paces the sends.
    :param burstiness: gamma shape of the inter-arrival gaps; 1.0 is Poisson.
    :param seed: seed of the numpy ``Generator``; the same arguments always give the same schedule.
    :returns: int64 array of length ``n``, non-decreasing, starting at 0.
    :raises ValueError: when ``n < 0``, ``rate <= 0`` (or NaN), or ``burstiness <= 0`` (or not finite).
    """
    if n < 0:
        raise ValueError(f"number of requests must be >= 0, got {n}")
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise ValueError(f"burstiness must be a finite number > 0 (1.0 is Poisson), got {burstiness}")
    if rate is not None and not rate > 0:  # also catches NaN
        raise ValueError(f"request rate must be > 0 requests/s (or None/inf for closed loop), got {rate}")
    if rate is None or math.isinf(rate) or n == 0:
        return np.zeros(n, dtype=np.int64)

    rng = np.random.default_rng(seed)
    if burstiness == 1.0:
        gaps_s = rng.exponential(scale=1.0 / rate, size=n - 1)
    else:
        gaps_s = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    offsets_s = np.concatenate(([0.0], np.cumsum(gaps_s)))
    offsets_ns: npt.NDArray[np.float64] = np.rint(offsets_s * _NS_PER_S)
    if offsets_ns[-1] >= _MAX_OFFSET_NS:
        raise ValueError(f"schedule of {n} requests at {rate} requests/s is too long to express in int64 ns")
    return offsets_ns.astype(np.int64)
