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

A ramp-up (``--ramp-up-strategy``, as in ``vllm bench serve``) draws request ``i``'s gap at the rate
for its place in the run, ``i / (n - 1)`` of the way from the start rate to the end rate, linearly or
geometrically; the first request is still due at 0, so a linear ramp may start at 0 requests/s.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ("arrival_offsets_ns", "ramp_up_offsets_ns", "ramp_up_rate")

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


def ramp_up_rate(strategy: str, start_rps: float, end_rps: float, index: int, n: int) -> float:
    """The rate in force for request ``index`` of ``n``, as vllm bench serve computes it."""
    progress = index / max(n - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    if strategy == "exponential":
        return float(start_rps * (end_rps / start_rps) ** progress)
    raise ValueError(f"ramp-up strategy must be linear or exponential, got {strategy!r}")


def ramp_up_offsets_ns(n: int, strategy: str, start_rps: float, end_rps: float, burstiness: float,
                       seed: int) -> npt.NDArray[np.int64]:
    """Scheduled send times of ``n`` requests whose rate ramps from ``start_rps`` to ``end_rps``: gap
    ``i`` (before request ``i``, ``i >= 1``) is gamma with shape ``burstiness`` and mean 1 / rate(i)."""
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise ValueError(f"burstiness must be a finite number > 0 (1.0 is Poisson), got {burstiness}")
    if n <= 1:
        return np.zeros(max(n, 0), dtype=np.int64)
    rates = np.array([ramp_up_rate(strategy, start_rps, end_rps, i, n) for i in range(1, n)])
    if not (rates > 0).all():
        raise ValueError(f"a ramp-up from {start_rps} to {end_rps} requests/s reaches a rate <= 0")
    rng = np.random.default_rng(seed)
    gaps_s = rng.gamma(shape=burstiness, scale=1.0 / (rates * burstiness))
    offsets_ns: npt.NDArray[np.float64] = np.rint(np.concatenate(([0.0], np.cumsum(gaps_s))) * _NS_PER_S)
    if offsets_ns[-1] >= _MAX_OFFSET_NS:
        raise ValueError(f"a ramp-up of {n} requests is too long to express in int64 ns")
    return offsets_ns.astype(np.int64)
