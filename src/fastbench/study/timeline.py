"""One run over time, from what a stored run keeps: its per-request records (``requests.jsonl.gz``)
and the time series in its result file (the server's /metrics gauges, the memory sampler's samples),
all put on one clock, seconds from the start of the measured window.

The records, the gauges and the memory samples are all stamped on CLOCK_MONOTONIC; each says where
its zero is (a record's ``sent_ns`` beside its ``sent_ms``, the gauges' ``t0_monotonic_s``, the memory
series' ``t0_monotonic_ns``), so they are aligned exactly, without guessing.

What is not kept is said (``Timeline.missing``), never made up. The one approximation: the client
keeps no per-chunk stamps per request (only the first token and the end), so tokens/s over time
counts each request's first token at its first-token stamp and spreads the rest evenly up to its end.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ("Timeline", "in_flight_steps", "sampled_series", "timeline", "token_rate")

Series = tuple[np.ndarray, np.ndarray]  # (times in s from the window's start, values)
MAX_BINS = 120  # tokens/s is drawn as at most this many bins over the window


@dataclasses.dataclass(frozen=True)
class Timeline:
    window_s: float  # the last request's end (or the window's duration), s
    in_flight: Series  # client: requests sent and not yet ended, a step after each change
    tokens_per_s: Series  # client: output tokens/s per bin (bin centres), see the module docstring
    bin_s: float  # the bins' width
    ttft: Series  # send time (s) -> TTFT (ms), each request that had a first token
    failed_sends: np.ndarray  # send times (s) of requests that failed
    server: dict[str, Series]  # "running", "waiting" (requests), "kv_cache_usage" (%), where the server gave them
    memory: dict[str, Series]  # "server RSS", "MemAvailable drop", "GPU0 used" ... in GiB, with memory sampling
    missing: tuple[str, ...]  # what the figure would show but the run did not keep, each with why
    # the run second by second as its live sampler kept it (the result's fastbench.timeline): "in_flight",
    # "tokens_per_s", "ttft_p50_ms", "itl_p99_ms", ... each (t_s, values), where the run kept it
    sampled: dict[str, Series] = dataclasses.field(default_factory=dict)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def window_start_ns(records: Sequence[Mapping[str, Any]]) -> int | None:
    """The measured window's start on CLOCK_MONOTONIC: a record's stamp less its offset from the start."""
    for rec in records:
        for name in ("sent", "scheduled"):
            ns, ms = _int(rec.get(f"{name}_ns")), _float(rec.get(f"{name}_ms"))
            if ns is not None and ms is not None:
                return ns - round(ms * 1e6)
    return None


def in_flight_steps(sends: np.ndarray, ends: np.ndarray) -> Series:
    """Requests in flight after each send or end (times in s): a step function, 0 before the first.
    At one instant, ends are counted before sends (a slot freed and taken again is not two in flight)."""
    times = np.concatenate([sends, ends])
    deltas = np.concatenate([np.ones(len(sends)), -np.ones(len(ends))])
    order = np.lexsort((deltas, times))  # by time, then -1 before +1
    return times[order], np.cumsum(deltas[order])


def token_rate(first_s: np.ndarray, end_s: np.ndarray, tokens: np.ndarray, window_s: float,
               bins: int = MAX_BINS) -> tuple[Series, float]:
    """Output tokens/s in ``bins`` equal bins over [0, window_s]: each request's first token at its first
    token, its other tokens - 1 spread evenly over (first token, end]. ((centres, rates), bin width)."""
    width = max(window_s, 1e-3) / bins
    edges = np.linspace(0.0, bins * width, bins + 1)
    if len(first_s) == 0:
        return (edges[:-1] + width / 2, np.zeros(bins)), width
    span = np.maximum(end_s - first_s, 1e-9)[:, None]
    spread = np.clip((edges[None, :] - first_s[:, None]) / span, 0.0, 1.0) * (tokens - 1)[:, None]
    # tokens out before each edge (a first token on an edge is the next bin's; the last edge takes all)
    out = (edges[None, :] > first_s[:, None]) | (edges[None, :] == edges[-1])
    cumulative = (out + spread).sum(axis=0)
    return (edges[:-1] + width / 2, np.diff(cumulative) / width), width


def timeline(doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]] | None) -> Timeline:
    """One run over time from its result document and its per-request records (None: not kept)."""
    fb = doc.get("fastbench") or {}
    server_doc = fb.get("server") or {}
    missing: list[str] = []
    start_ns = window_start_ns(records) if records else None
    empty: Series = (np.zeros(0), np.zeros(0))
    in_flight, tokens, ttft, failed = empty, empty, empty, np.zeros(0)
    bin_s = 0.0
    duration = _float(doc.get("duration")) or 0.0
    window_s = duration
    if start_ns is None:
        missing.append("requests in flight, tokens/s and TTFT: no per-request records kept "
                       "(run with --store, or --requests-jsonl)")
    else:
        assert records is not None

        def s(rec: Mapping[str, Any], name: str) -> float | None:
            ns = _int(rec.get(f"{name}_ns"))
            return (ns - start_ns) / 1e9 if ns is not None else None

        sends, ends, first, last, counts, t_send, t_ttft, failed_at = [], [], [], [], [], [], [], []
        for rec in records:
            sent, end, first_token = s(rec, "sent"), s(rec, "end"), s(rec, "first_token")
            if sent is None:
                continue  # never sent
            sends.append(sent)
            if end is not None:
                ends.append(end)
            ttft_ms = _float(rec.get("ttft_ms"))
            if ttft_ms is not None:
                t_send.append(sent)
                t_ttft.append(ttft_ms)
            if rec.get("status") == "failed":
                failed_at.append(sent)
            out = _int(rec.get("output_tokens"))
            if first_token is not None and end is not None and out:
                first.append(first_token)
                last.append(end)
                counts.append(out)
        window_s = max([duration, *ends, *sends]) if sends else duration
        in_flight = in_flight_steps(np.asarray(sends, dtype=np.float64), np.asarray(ends, dtype=np.float64))
        tokens, bin_s = token_rate(np.asarray(first, dtype=np.float64), np.asarray(last, dtype=np.float64),
                                   np.asarray(counts, dtype=np.float64), window_s)
        ttft = (np.asarray(t_send, dtype=np.float64), np.asarray(t_ttft, dtype=np.float64))
        failed = np.asarray(failed_at, dtype=np.float64)
    server = _server_gauges(server_doc.get("server_metrics"), start_ns, missing)
    memory = _memory(server_doc.get("memory_series"), start_ns, missing)
    sampled = sampled_series(fb.get("timeline"))
    if not sampled:
        missing.append("latency quantiles second by second: no timeline kept (a run of an earlier fastbench)")
    return Timeline(window_s, in_flight, tokens, bin_s, ttft, failed, server, memory, tuple(missing), sampled)


def sampled_series(doc: Any) -> dict[str, Series]:
    """The result's ``timeline`` section as series: its ``t_s`` are seconds from the window's start already
    (the sampler's zero is the window's), each column's None samples left out."""
    if not isinstance(doc, dict) or not isinstance(doc.get("columns"), dict):
        return {}
    columns = doc["columns"]
    times = [_float(t) for t in columns.get("t_s") or []]
    out: dict[str, Series] = {}
    for name, values in columns.items():
        if name == "t_s" or not isinstance(values, list):
            continue
        points = [(t, v) for t, raw in zip(times, values) if t is not None and (v := _float(raw)) is not None]
        if points:
            out[name] = (np.array([t for t, _ in points]), np.array([v for _, v in points]))
    return out


def _offset_s(t0_ns: float | None, start_ns: int | None) -> float | None:
    """Where a series' zero lies from the window's start (s); None: it cannot be placed."""
    return (t0_ns - start_ns) / 1e9 if t0_ns is not None and start_ns is not None else None


def _server_gauges(metrics: Any, start_ns: int | None, missing: list[str]) -> dict[str, Series]:
    if not isinstance(metrics, dict) or not metrics.get("available"):
        missing.append("the server's running / waiting requests and KV-cache use: no /metrics reads kept")
        return {}
    gauges = metrics.get("gauges") or {}
    t0 = _float(gauges.get("t0_monotonic_s"))
    offset = _offset_s(t0 * 1e9 if t0 is not None else None, start_ns)
    if offset is None:
        missing.append("the server's gauges: their reads cannot be placed on the requests' clock")
        return {}
    samples = [x for x in gauges.get("samples") or [] if isinstance(x, dict) and _float(x.get("t_s")) is not None]
    out: dict[str, Series] = {}
    for name, scale in (("running", 1.0), ("waiting", 1.0), ("kv_cache_usage", 100.0)):
        points = [(float(x["t_s"]) + offset, v * scale) for x in samples if (v := _float(x.get(name))) is not None]
        if points:
            out[name] = (np.array([t for t, _ in points]), np.array([v for _, v in points]))
    if "kv_cache_usage" not in out:
        missing.append("KV-cache use: the server's /metrics has no KV-cache gauge")
    if "running" not in out and "waiting" not in out:
        missing.append("the server's running / waiting requests: its /metrics has no such gauges")
    return out


GIB = float(2**30)


def _memory(series_doc: Any, start_ns: int | None, missing: list[str]) -> dict[str, Series]:
    if not isinstance(series_doc, dict) or not isinstance(series_doc.get("series"), dict):
        missing.append("memory: not sampled (--memory-interval; on by default only for a launched server)")
        return {}
    offset = _offset_s(_float(series_doc.get("t0_monotonic_ns")), start_ns)
    if offset is None:
        missing.append("memory: its samples cannot be placed on the requests' clock")
        return {}
    columns = series_doc["series"]
    times = [_float(t) for t in columns.get("t_s") or []]
    out: dict[str, Series] = {}

    def add(label: str, values: Sequence[Any]) -> None:
        points = [(t + offset, v / GIB) for t, raw in zip(times, values)
                  if t is not None and (v := _float(raw)) is not None]
        if points:
            out[label] = (np.array([t for t, _ in points]), np.array([v for _, v in points]))

    add("server RSS", columns.get("server_rss_bytes") or [])
    add("MemAvailable drop", columns.get("mem_available_drop_bytes") or [])
    for gpu in columns.get("gpus") or []:
        if isinstance(gpu, dict):
            add(f"{gpu.get('label') or 'GPU'} used", gpu.get("used_bytes") or [])
    return out
