"""Steady-state figures: a run's throughput and latencies over the part of its window where the load held.

A cell's whole-window throughput counts its ramp-up and its drain: with varied output lengths the last
round runs with fewer streams than the concurrency, so the aggregate throughput of a high-concurrency
cell reads below what the server sustains there. This module finds the steady interval (definition
``steady_interval`` in ``definitions``) from the per-request records the run already holds (send, first
token and end stamps; each completed request's chunk stamps where ``--save-detailed`` kept them), and
derives over it the output and request throughput and the per-request distributions of the requests
inside it. An agentic replay's closed loop holds agent trees, not requests, in its slots: there the
interval is the trees' (each from its first call's send to its last call's end), from the workload's map of
rows to trees. Off the hot path, once per run; the same over the merged records of ``--workers`` and Ray.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastbench.config import BenchConfig
from fastbench.results.agentic import AGENTIC_DATASETS
from fastbench.results.distribution import Distribution
from fastbench.results.records import COL, ErrorClass, RunData

__all__ = ("STEADY_METRICS", "TREES_IN_FLIGHT", "TREE_ARRIVALS", "SteadyState", "card_text", "console_text",
           "flat_keys", "section", "steady_state")

# The distributions over the requests inside the interval, and the figures of each the flat keys carry.
STEADY_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2el")
_FLAT_STATS: tuple[str, ...] = ("mean", "median", "p90", "p99")

EVEN_PACE = "even_pace"  # the first token at its stamp, the rest evenly up to the end stamp
CHUNK_STAMPS = "chunk_stamps"  # at each chunk's receive stamp, an equal share of the tokens each

# The bases of an agentic replay's interval (the others: "closed loop", "open loop").
TREES_IN_FLIGHT = "agent trees in flight"  # closed loop: the trees in flight held at the concurrency
TREE_ARRIVALS = "agent tree arrivals"  # open loop: from the first arrival + the longest tree to the last


@dataclasses.dataclass(frozen=True)
class SteadyState:
    """The steady interval of one run and the figures over it; ``reason`` says why there is none."""

    # "closed loop" (in flight held at the target), "open loop" (stationary arrivals), TREES_IN_FLIGHT or
    # TREE_ARRIVALS (agent trees)
    basis: str
    target: int | None  # closed loop: the concurrency held (requests, or agent trees); None in open loop
    start_ns: int | None  # the interval's edges, CLOCK_MONOTONIC (the driver's, with Ray); None: no interval
    end_ns: int | None
    start_s: float | None  # the same edges in s from the measured window's start
    end_s: float | None
    reason: str | None  # None when there is an interval
    output_tokens: float | None  # output tokens placed inside the interval (fractional: see token_source)
    token_source: str | None  # CHUNK_STAMPS where --save-detailed kept completed requests' stamps, else EVEN_PACE
    output_throughput: float | None  # tok/s
    request_throughput: float | None  # req/s
    requests: int  # completed requests inside the interval
    distributions: dict[str, Distribution]  # STEADY_METRICS over the requests inside ("itl": with chunk stamps)

    @property
    def window_s(self) -> float | None:
        if self.start_ns is None or self.end_ns is None:
            return None
        return (self.end_ns - self.start_ns) / 1e9


def _none(basis: str, target: int | None, reason: str) -> SteadyState:
    return SteadyState(basis=basis, target=target, start_ns=None, end_ns=None, start_s=None, end_s=None,
                       reason=reason, output_tokens=None, token_source=None, output_throughput=None,
                       request_throughput=None, requests=0, distributions={})


def steady_state(data: RunData, config: BenchConfig, tree_of_row: Sequence[int] | np.ndarray | None = None
                 ) -> SteadyState:
    """The run's steady interval (definition ``steady_interval``) and its figures, from the request table.

    :param tree_of_row: an agentic replay's tree of each row (the workload's map): there the trees in flight,
        not the requests, are what the closed loop holds.
    """
    rows = np.asarray(data.rows, dtype=np.int64).reshape(-1, len(COL))
    col = {name: rows[:, i] for name, i in COL.items()}
    started = rows.any(axis=1) & (col["sent_ns"] > 0)
    basis, target = ("open loop", None) if config.open_loop else ("closed loop", config.effective_concurrency)
    if config.multi_turn:
        return _none(basis, target, "multi-turn sessions: think times, not the client, set the requests in flight")
    if config.dataset_name in AGENTIC_DATASETS:
        basis = TREE_ARRIVALS if config.open_loop else TREES_IN_FLIGHT
        if tree_of_row is None:
            return _none(basis, target, "the rows' agent trees were not given")
        trees = np.asarray(tree_of_row, dtype=np.int64).reshape(-1)
        spans = _tree_spans(col, started, trees, max(data.end_ns, 1))
        if isinstance(spans, str):
            return _none(basis, target, spans)
        edges = _tree_arrivals_interval(*spans) if config.open_loop else _held_interval(
            spans[0], spans[2], target or 1, "trees ")
    elif config.open_loop:
        if config.ramp_up_strategy is not None:
            return _none(basis, target, "the arrival rate ramped (--ramp-up-strategy): it never held")
        if config.trace_timed:
            return _none(basis, target, "arrivals followed a trace's times, not a stationary process")
        edges = _arrival_interval(col["scheduled_ns"])
    else:
        ends = np.where(col["end_ns"] > 0, col["end_ns"], max(data.end_ns, 1))
        edges = _held_interval(col["sent_ns"][started], ends[started], target or 1)
    if isinstance(edges, str):
        return _none(basis, target, edges)
    a, b = edges
    stamps: Mapping[int, bytes] = data.extra.get("chunk_stamps") or {}
    tokens = _tokens_inside(col, a, b, stamps)
    completed = started & (col["error"] == ErrorClass.OK) & (col["end_ns"] > 0)
    served = _share_inside(col["sent_ns"][completed], col["end_ns"][completed], a, b).sum()
    origin = col["scheduled_ns"] if config.open_loop else col["sent_ns"]
    inside = completed & (origin >= a) & (col["end_ns"] <= b)
    window_s = (b - a) / 1e9
    return SteadyState(
        basis=basis, target=target, start_ns=a, end_ns=b,
        start_s=(a - data.start_ns) / 1e9, end_s=(b - data.start_ns) / 1e9, reason=None,
        output_tokens=tokens, token_source=CHUNK_STAMPS if stamps else EVEN_PACE,
        output_throughput=tokens / window_s, request_throughput=float(served) / window_s,
        requests=int(inside.sum()),
        distributions=_distributions(col, origin, inside, stamps),
    )


# -- the interval ---------------------------------------------------------------------------------------


def _held_interval(sent: np.ndarray, end: np.ndarray, target: int, what: str = "") -> tuple[int, int] | str:
    """Closed loop: from the instant the requests in flight (each from its send to its end stamp) first
    reach ``target`` to the instant they fall below it for the last time; a reason when they never do.
    ``what``: the word the reason puts before "in flight" (spans other than requests')."""
    if sent.size == 0:
        return "no request was sent"
    times = np.concatenate([sent, end])
    steps = np.concatenate([np.ones(sent.size, np.int64), -np.ones(end.size, np.int64)])
    # By time, and at one instant ends first: a request ending as another starts does not overlap it.
    order = np.lexsort((steps, times))
    times, in_flight = times[order], np.cumsum(steps[order])
    held = np.flatnonzero(in_flight >= target)
    if held.size == 0:
        return f"{what}in flight never reached the target of {target} (at most {int(in_flight.max())} at once)"
    start, end_at = int(times[held[0]]), int(times[held[-1] + 1])  # the count ends at 0: an event follows
    if end_at <= start:
        return f"{target} {what}in flight were held for no time"
    return start, end_at


def _tree_spans(col: Mapping[str, np.ndarray], started: np.ndarray, tree_of_row: np.ndarray,
                run_end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """Per agent tree that began: (its first call's send, its first call's scheduled arrival, its last call's
    end; a call still open at the run's end: that end). In closed loop ``_held_interval`` runs over these
    spans: a slot holds its tree through the tree's own gaps and joins, when few or none of its calls are in
    flight, so the trees, not the calls, are the load the slots keep up. A tree the run's stop cut short
    (calls left unsent, none failed) held its slot up to the run's end, in a gap as much as in a call."""
    if tree_of_row.size != started.size:
        return f"the tree map has {tree_of_row.size} rows, the request table {started.size}"
    if not started.any():
        return "no request was sent"
    n = int(tree_of_row.max()) + 1
    error = col["error"]
    failed = started & (error != ErrorClass.OK) & (error != ErrorClass.CANCELLED)
    began = np.bincount(tree_of_row[started], minlength=n) > 0
    cut = began & (np.bincount(tree_of_row[~started], minlength=n) > 0) & ~(np.bincount(tree_of_row[failed],
                                                                                         minlength=n) > 0)
    first = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first, tree_of_row[started], col["sent_ns"][started])
    arrival = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(arrival, tree_of_row[started], col["scheduled_ns"][started])
    last = np.where(cut, run_end, 0)
    np.maximum.at(last, tree_of_row[started], np.where(col["end_ns"] > 0, col["end_ns"], run_end)[started])
    return first[began], arrival[began], last[began]


def _tree_arrivals_interval(first: np.ndarray, arrival: np.ndarray, last: np.ndarray) -> tuple[int, int] | str:
    """Agent trees at a rate: from the first arrival plus the longest tree's time (arrival to last end) to the
    last arrival. Every tree in flight then arrived inside the arrivals' span, and the trees that arrived
    before it ended: the count in flight is the stationary arrivals' and the trees' lengths' alone, where
    over the span's start the calls are still ramping up, and past its end draining."""
    if arrival.size < 2 or int(arrival.max()) <= int(arrival.min()):
        return "fewer than 2 tree arrivals apart in time"
    longest = int((last - arrival).max())
    start, end = int(arrival.min()) + longest, int(arrival.max())
    if start >= end:
        return (f"the tree arrivals span {(end - int(arrival.min())) / 1e9:.3g} s, no longer than the longest tree "
                f"({longest / 1e9:.3g} s): the load never stopped ramping up (more trees, or a higher rate)")
    return start, end


def _arrival_interval(scheduled: np.ndarray) -> tuple[int, int] | str:
    """Open loop: from the first scheduled arrival to the last (the drain after it left out)."""
    arrivals = scheduled[scheduled > 0]
    if arrivals.size < 2 or int(arrivals.max()) <= int(arrivals.min()):
        return "fewer than 2 arrivals apart in time"
    return int(arrivals.min()), int(arrivals.max())


# -- what lies inside it ----------------------------------------------------------------------------------


def _share_inside(start: np.ndarray, end: np.ndarray, a: int, b: int) -> np.ndarray:
    """Per span [start, end]: the share of its length inside [a, b] (an empty span: 1 if inside, else 0)."""
    length = (end - start).astype(np.float64)
    overlap = np.clip(np.minimum(end, b) - np.maximum(start, a), 0, None).astype(np.float64)
    point_inside = ((start >= a) & (start <= b)).astype(np.float64)
    return np.where(length > 0, overlap / np.where(length > 0, length, 1.0), point_inside)


def _tokens_inside(col: Mapping[str, np.ndarray], a: int, b: int, stamps: Mapping[int, bytes]) -> float:
    """Output tokens of completed requests, and of those a run's stop cut short, placed inside [a, b]."""
    error = col["error"]
    counted = ((col["first_token_ns"] > 0) & (col["end_ns"] > 0) & (col["output_tokens"] > 0)
               & ((error == ErrorClass.OK) | (error == ErrorClass.CANCELLED)))
    by_stamps = np.zeros(len(error), dtype=bool)
    total = 0.0
    if stamps:
        kept = [(i, s) for i in np.flatnonzero(counted & (error == ErrorClass.OK))
                if (s := stamps.get(int(col["index"][i])))]
        if kept:
            rows = np.asarray([i for i, _ in kept])
            arrays = [np.frombuffer(s, dtype=np.int64) for _, s in kept]
            counts = np.asarray([len(x) for x in arrays])
            # The first chunk is the first token: its stamp puts the chunks on the row's clock (the same
            # one on one node; a Ray node's rows were moved onto the driver's, its stamps were not).
            shift = np.repeat(col["first_token_ns"][rows] - np.asarray([x[0] for x in arrays]), counts)
            at = np.concatenate(arrays) + shift
            share = np.repeat(col["output_tokens"][rows] / counts, counts)
            total += float(share[(at >= a) & (at <= b)].sum())
            by_stamps[rows] = True
    pace = counted & ~by_stamps
    first, end, n = col["first_token_ns"][pace], col["end_ns"][pace], col["output_tokens"][pace]
    first_inside = ((first >= a) & (first <= b)).astype(np.float64)
    return total + float((first_inside + (n - 1) * _share_inside(first, end, a, b)).sum())


def _distributions(col: Mapping[str, np.ndarray], origin: np.ndarray, inside: np.ndarray,
                   stamps: Mapping[int, bytes]) -> dict[str, Distribution]:
    """TTFT, TPOT, E2E latency (and ITL from chunk stamps, where kept) of the requests inside, exactly as
    the whole window's are computed (figures._Completed)."""
    first, end, n = col["first_token_ns"][inside], col["end_ns"][inside], col["output_tokens"][inside]
    has_first = first > 0
    has_tpot = has_first & (n >= 2)
    out = {
        "ttft": Distribution.from_values((first - origin[inside])[has_first], "ms"),
        "tpot": Distribution.from_values(((end - first) / np.maximum(n - 1, 1))[has_tpot], "ms"),
        "e2el": Distribution.from_values(end - origin[inside], "ms"),
    }
    if stamps:
        gaps = [np.diff(np.frombuffer(s, dtype=np.int64)) for s in
                (stamps.get(int(i)) for i in col["index"][inside]) if s]
        out["itl"] = Distribution.from_values(np.concatenate(gaps) if gaps else np.zeros(0), "ms")
    return {name: out[name] for name in STEADY_METRICS if name in out}


# -- how the result shows it ----------------------------------------------------------------------------


def flat_keys(steady: SteadyState | None) -> dict[str, Any]:
    """The result file's top-level steady_* keys; every one null when the run has no steady interval
    (and the ITL ones without chunk stamps)."""
    s = steady or _none("closed loop", None, "not computed")
    keys: dict[str, Any] = {
        "steady_start_s": s.start_s, "steady_end_s": s.end_s, "steady_window_s": s.window_s,
        "steady_output_throughput": s.output_throughput, "steady_request_throughput": s.request_throughput,
        "steady_requests": s.requests if s.reason is None else None,
    }
    for metric in STEADY_METRICS:
        dist = s.distributions.get(metric)
        for stat in _FLAT_STATS:
            keys[f"steady_{stat}_{metric}_ms"] = getattr(dist, stat) if dist is not None else None
    return keys


def section(steady: SteadyState) -> dict[str, Any]:
    """``fastbench.steady`` without its distributions (the writer renders those as it renders the others)."""
    return {
        "basis": steady.basis, "target_concurrency": steady.target, "reason": steady.reason,
        "start_s": steady.start_s, "end_s": steady.end_s, "window_s": steady.window_s,
        "output_tokens": steady.output_tokens, "token_source": steady.token_source,
        "output_throughput_tok_s": steady.output_throughput, "request_throughput_per_s": steady.request_throughput,
        "requests": steady.requests,
    }


def console_text(steady: SteadyState | None) -> str:
    """The console's steady-state line's value: the throughput, or why there is none."""
    if steady is None or steady.output_throughput is None:
        return f"none: {steady.reason if steady else 'not computed'}"
    return f"{steady.output_throughput:.2f} over {steady.window_s:.2f} s"


def card_text(steady: SteadyState | None) -> str:
    """The run card's steady-state row, beside the whole window's decode throughput."""
    if steady is None or steady.output_throughput is None or steady.window_s is None:
        return f"n/a: no steady interval ({steady.reason if steady else 'not computed'})"
    held = (f"the slots held {steady.target} agent trees" if steady.basis == TREES_IN_FLIGHT
            else f"the load held {steady.target} in flight" if steady.target is not None
            else "requests arrived at the set rate")
    return (f"{steady.output_throughput:,.2f} (output tokens in the {steady.window_s:,.2f} s {held} ÷ that time; "
            f"{steady.requests} requests inside)")
