"""Merging the workers of one run into the RunData one process would have measured.

Exact by construction: counters are summed; HDR histograms (one layout for all) are added count by
count; per-request rows are put back at their workload index, so every per-request figure (TTFT,
TPOT, E2EL and their percentiles) is computed from the same rows one process would hold. Nothing
that is already a percentile is ever merged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastbench.load.driver import mean_in_flight
from fastbench.results.records import COL, NCOLS, RunData, TimestampSource, new_histogram

__all__ = ("Part", "histogram_from_counts", "merge_parts", "values_at_percentiles")

# Counters of RunData that add up across workers.
SUMMED_FIELDS = ("reads", "multi_event_reads", "output_events", "kernel_stamped_reads", "connections_opened",
                 "client_cpu_ns", "warmups", "stale_retries")
# Counters of RunData.extra that add up across workers.
SUMMED_EXTRA = ("skew_negative", "wakeups", "ends_watched", "core_sends", "pool_misses", "outputs_unreadable",
                "lead_wait_ns")
# RunData.extra's maps keyed by request row: their keys become workload indexes.
ROW_KEYED_EXTRA = ("outputs", "chunk_stamps")


@dataclasses.dataclass
class Part:
    """One worker's share: which workload requests it held, its request table, and what it reported
    (``data`` None: it was lost before it could; its table, written as it went, stands)."""

    rows_index: np.ndarray  # int64: workload index of each of its rows
    table: np.ndarray  # int64 (len(rows_index), NCOLS): its request table
    data: RunData | None
    error_messages: dict[int, str] = dataclasses.field(default_factory=dict)  # by its row in ``table``
    # The maps the worker's core keyed by row (error messages, outputs, chunk stamps) are keyed by workload
    # index already: it claimed rows from the whole run's table. False: by its own row, rows_index's order.
    keyed_by_index: bool = False

    def workload_keys(self, by_row: dict[int, Any]) -> dict[int, Any]:
        """One of the worker's maps keyed by its core's row, keyed by workload index."""
        if self.keyed_by_index:
            return {int(row): value for row, value in by_row.items()}
        return {int(self.rows_index[row]): value for row, value in by_row.items()}


def histogram_from_counts(counts: np.ndarray) -> Any:
    """An HDR histogram (records.new_histogram's layout) holding exactly these counts."""
    hist = new_histogram()
    dest = np.ctypeslib.as_array(hist.counts)
    dest[: len(counts)] = counts
    filled = np.flatnonzero(counts)
    hist.set_internal_tacking_values(int(filled[0]) if filled.size else -1, int(filled[-1]) if filled.size else -1,
                                     int(counts.sum()))
    return hist


def values_at_percentiles(hist: Any, percentiles: Sequence[float]) -> list[int]:
    """``hist.get_value_at_percentile(p)`` for each ``p``, exactly, from one cumulative sum of its counts:
    the library walks its ~34,000 buckets in Python for every percentile, which was most of a merge's
    cost (a worker's skew p50/p99 for the result's per-worker section)."""
    counts = np.ctypeslib.as_array(hist.counts)[: int(hist.counts_len)]
    cumulative = np.cumsum(counts, dtype=np.int64)
    values = []
    for p in percentiles:
        # the library's rule: the first bucket where the running count reaches the target count
        index = int(np.searchsorted(cumulative, hist.get_target_count_at_percentile(p), side="left"))
        if index >= len(cumulative):
            values.append(0)
            continue
        value = hist.get_value_from_index(index)
        values.append(int(hist.get_highest_equivalent_value(value) if p else hist.get_lowest_equivalent_value(value)))
    return values


def merge_parts(parts: Sequence[Part], n_rows: int, *, start_ns: int, end_ns: int, stopped_reason: str,
                cap_hit: bool, open_loop: bool, extra: dict[str, Any]) -> RunData:
    """One RunData for the whole run, from every worker's part (``extra`` is added to its extra)."""
    rows = np.zeros((n_rows, NCOLS), dtype=np.int64)
    messages: dict[int, str] = {}
    reported = [p.data for p in parts if p.data is not None]
    for part in parts:
        rows[part.rows_index] = part.table
        # The core numbers rows within its worker; the workload index is what the result keys on.
        started = part.rows_index[part.table.any(axis=1)]
        rows[started, COL["index"]] = started
        if part.data is not None:
            messages.update(part.workload_keys(part.data.error_messages))
        messages.update({int(part.rows_index[row]): text for row, text in part.error_messages.items()})
    histograms: dict[str, Any] = {}
    for name in (reported[0].histograms if reported else ("itl_chunk", "itl_token", "skew")):
        counts = [np.asarray(d.histograms[name], dtype=np.int64) for d in reported]
        histograms[name] = histogram_from_counts(np.sum(counts, axis=0)) if counts else new_histogram()
    sums = {name: sum(int(getattr(d, name)) for d in reported) for name in SUMMED_FIELDS}
    merged_extra: dict[str, Any] = {name: sum(int(d.extra.get(name, 0)) for d in reported) for name in SUMMED_EXTRA}
    clamped: dict[str, int] = {}
    for d in reported:
        for name, count in d.extra.get("histogram_clamped", {}).items():
            clamped[name] = clamped.get(name, 0) + int(count)
    merged_extra["histogram_clamped"] = clamped
    # Each worker's core learns its own arrival lead; the largest is the one that cost the most.
    leads = [int(d.extra["arrival_lead_ns"]) for d in reported if d.extra.get("arrival_lead_ns") is not None]
    merged_extra["arrival_lead_ns"] = max(leads) if leads else None
    # Each worker's core chooses its own reading tick: the result names each one's choice.
    choices = [d.extra.get("coalescing") for d in reported]
    if any(choice is not None for choice in choices):
        merged_extra["coalescing"] = {"per_worker": choices}
    for key in ROW_KEYED_EXTRA:
        found = [(part, part.data.extra[key]) for part in parts if part.data is not None and key in part.data.extra]
        if found:
            merged_extra[key] = {index: value for part, by_row in found
                                 for index, value in part.workload_keys(by_row).items()}
    merged_extra.update(extra)
    return RunData(
        rows=rows,
        error_messages=dict(sorted(messages.items())),
        histograms=histograms,
        start_ns=start_ns,
        end_ns=end_ns,
        cap_hit=cap_hit,
        stopped_reason=stopped_reason,
        timestamp_source=TimestampSource.KERNEL if sums["kernel_stamped_reads"] else TimestampSource.USER,
        # Each worker's samples stay in its own section; the merged in-flight figure is from the rows.
        concurrency_samples=np.zeros((0, 2), dtype=np.float64),
        mean_in_flight=mean_in_flight(rows, start_ns, end_ns),
        open_loop=open_loop,
        extra=merged_extra,
        **sums,
    )
