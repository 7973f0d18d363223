"""The run seen while it runs: ``LiveSampler`` looks at it from the generator's progress callback (a few
times a second, in the event loop, between wake-ups: never per token or per request), builds a
``results.live.LiveSnapshot`` for whoever listens (the CLI's live view, the ``--metrics-port``
exporter, another harness's ``on_live``), and keeps one sample a second for the result's ``timeline``.

A look reads what the run keeps anyway: the driver's counters (the progress dict), the request table's
rows finished since the last look, the core's chunk histograms (``Recorder.copy_counts``: one memcpy of
33,792 counts), the window monitor's latest /metrics read and the memory sampler's latest sample.
A look costs ~0.4 ms of numpy on this 2-core machine (five quantile pairs over 33,792 HDR counts), four
times a second: ~0.1 us per chunk at 256 streams (bench/live_overhead.py).

With ``--workers`` (and ``--ray``) the parent reads the request tables it shares with the workers (or
the rows the actors handed it) and the chunk histograms each worker reports four times a second: the
merged running figures, as one process's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fastbench.load.drive import Generator
from fastbench.redact import Secrets
from fastbench.results.live import LATENCIES, Buckets, HdrLayout, LiveSnapshot, Quantiles, RunningFigures
from fastbench.results.records import RunData
from fastbench.results.result import Result
from fastbench.server.livegauges import LiveGauges
from fastbench.server.memoryrun import MemoryRun
from fastbench.server.monitor import WindowMonitor

__all__ = ("LIVE_INTERVAL_S", "LiveListener", "LiveSampler")

LIVE_INTERVAL_S = 0.25  # a look every quarter second when someone listens (the progress line's is 0.5 s)
SERIES_COLUMNS = ("t_s", "in_flight", "completed", "failed", "requests_per_s", "tokens_per_s",
                  *(f"{name}_{q}_ms" for name in LATENCIES for q in ("p50", "p99")),
                  "running", "waiting", "kv_cache_usage")

LiveListener = Callable[[LiveSnapshot], None]
_log = logging.getLogger(__name__)


class LiveSampler:
    """Looks at one run; ``on_progress`` is the generator's progress callback (chained to the caller's)."""

    def __init__(self, generator: Generator, *, open_loop: bool, monitor: WindowMonitor | None = None,
                 memory: MemoryRun | None = None, listeners: Sequence[LiveListener] = (),
                 then: Callable[[dict[str, Any]], None] | None = None, labels: dict[str, str] | None = None) -> None:
        self.generator = generator
        self.monitor = monitor
        self.memory = memory
        self.listeners = list(listeners)
        self.then = then
        self.labels = dict(labels or {})
        self.layout = HdrLayout()
        self.figures = RunningFigures(self.layout, open_loop=open_loop)
        self.gauges = LiveGauges()
        self.chunk_counts = {"itl": np.zeros(self.layout.counts_len, dtype=np.int64),
                             "skew": np.zeros(self.layout.counts_len, dtype=np.int64)}
        self.has_chunk_histograms = False
        self.has_rows = False  # the per-request figures are read while the run goes on
        self.start_ns: int | None = None
        self.latest: LiveSnapshot | None = None
        self._last: tuple[float, int, int] = (0.0, 0, 0)  # (elapsed, finished, tokens) at the last look
        self._rates = (0.0, 0.0)
        self._series: dict[str, list[float | None]] = {name: [] for name in SERIES_COLUMNS}
        self._second_counts: dict[str, np.ndarray] | None = None
        self._second: tuple[float, int, int] = (0.0, 0, 0)
        self._buckets: tuple[float, dict[str, Buckets]] = (0.0, {})

    # -- looking --------------------------------------------------------------------------------

    def on_progress(self, progress: dict[str, Any]) -> None:
        try:
            self.look(progress)
        except Exception:  # a look that fails must never stop the run it looks at
            _log.exception("live sampler: a look failed")
        if self.then is not None:
            self.then(progress)

    def look(self, progress: dict[str, Any], *, final: bool = False) -> LiveSnapshot:
        elapsed = float(progress["elapsed_s"])
        if self.start_ns is None:
            self.start_ns = time.monotonic_ns() - int(elapsed * 1e9)
        completed, failed = int(progress["completed"]), int(progress["failed"])
        in_flight, tokens = int(progress["in_flight"]), int(progress["output_tokens"])
        if not final:
            self.has_rows = self._read_running(completed + failed + in_flight)
        then_s, then_finished, then_tokens = self._last
        span = elapsed - then_s
        if span >= 0.5 or final:  # "now" over about a second: a quarter-second window is all noise
            self._rates = ((completed - then_finished) / span if span > 0 else 0.0,
                           (tokens - then_tokens) / span if span > 0 else 0.0)
            if span >= 1.0 or final:
                self._last = (elapsed, completed, tokens)
        latency = {name: Quantiles.of(self.layout, self.figures.counts[name]) for name in ("ttft", "tpot", "e2e")}
        has_rows = self.has_rows or final
        if self.has_chunk_histograms:
            latency["itl"] = Quantiles.of(self.layout, self.chunk_counts["itl"])
        skew = Quantiles.of(self.layout, self.chunk_counts["skew"]) if self.has_chunk_histograms else None
        lateness = (Quantiles.of(self.layout, self.figures.counts["lateness"])
                    if self.figures.open_loop and has_rows else None)
        total = int(progress["total"])
        max_seconds = progress.get("max_seconds")
        snapshot = LiveSnapshot(
            elapsed_s=elapsed, total=total, completed=completed, failed=failed,
            failed_by_class=dict(self.figures.failed_by_class), in_flight=in_flight, output_tokens=tokens,
            requests_per_s_now=self._rates[0], requests_per_s_run=completed / elapsed if elapsed > 0 else 0.0,
            tokens_per_s_now=self._rates[1], tokens_per_s_run=tokens / elapsed if elapsed > 0 else 0.0,
            latency={k: v for k, v in latency.items() if has_rows or k == "itl"},
            skew=skew if skew is not None and skew.count else None, lateness=lateness,
            server=self._server(), memory=self._memory(),
            time_left_s=_time_left(elapsed, max_seconds, total, completed + failed),
            max_seconds=max_seconds, labels=self.labels, final=final,
            histograms=self._histograms(has_rows, elapsed, final) if final or any(
                getattr(listener, "wants_histograms", False) for listener in self.listeners) else {},
        )
        self.latest = snapshot
        self._keep_second(snapshot)
        for listener in list(self.listeners):
            try:
                listener(snapshot)
            except Exception:  # a view or an exporter that breaks is dropped, the run goes on
                _log.exception("live listener %r failed; it is dropped", listener)
                self.listeners.remove(listener)
        return snapshot

    def finish(self, data: RunData, result: Result) -> LiveSnapshot:
        """The last look, from the finished run's own data (every row, the synced histograms) and its
        Result's counts, so that a view ends on the figures the result holds."""
        self.figures = RunningFigures(self.layout, open_loop=self.figures.open_loop)
        self.figures.update(data.rows, len(data.rows))
        counts = result.counts
        self.figures.failed_by_class = {name.lower(): n for name, n in counts.failed_by_class.items() if n}
        if counts.cancelled:
            self.figures.failed_by_class["cancelled"] = counts.cancelled
        for name, key in (("itl", "itl_chunk"), ("skew", "skew")):
            histogram = data.histograms.get(key)
            if histogram is not None:
                self.chunk_counts[name] = np.frombuffer(
                    memoryview(histogram.counts).cast("B"), dtype=np.int64)[: self.layout.counts_len].copy()
                self.has_chunk_histograms = True
        progress = {"elapsed_s": result.duration_s, "completed": counts.completed, "failed": counts.failed,
                    "in_flight": 0, "output_tokens": result.total_output_tokens, "total": counts.total,
                    "max_seconds": result.config.max_seconds}
        return self.look(progress, final=True)

    def _histograms(self, has_rows: bool, elapsed: float, final: bool) -> dict[str, Buckets]:
        """The latencies as Prometheus buckets, once a second (a scraper reads every few seconds; a look
        with them costs ~0.6 ms, without ~0.4) and at the end."""
        if not final and self._buckets[1] and elapsed - self._buckets[0] < 1.0:
            return self._buckets[1]
        out = {name: Buckets.of(self.layout, self.figures.counts[name], self.figures.sums[name])
               for name in ("ttft", "tpot", "e2e")} if has_rows else {}
        if self.has_chunk_histograms:
            out["itl"] = Buckets.of(self.layout, self.chunk_counts["itl"])
        self._buckets = (elapsed, out)
        return out

    def _read_running(self, started: int) -> bool:
        """Count what finished since the last look into the running histograms; returns whether the
        per-request figures are known. One process: its request table and its core's chunk histograms
        (copied, no sync). --workers and --ray: the tables the parent can read (shared memory, or the
        rows the actors handed over) and the chunk histograms the workers last reported, merged."""
        tables = self.generator.running_tables(started)
        for table, (rows, claimed) in enumerate(tables):
            self.figures.update(rows, claimed, table)
        if self.generator.copy_chunk_counts(self.chunk_counts):
            self.has_chunk_histograms = True
        return bool(tables) or self.has_rows

    def _server(self) -> dict[str, float]:
        if self.monitor is None:
            return {}
        return dict(self.gauges.read(self.monitor.scraper.scrapes))

    def _memory(self) -> dict[str, float]:
        if self.memory is None or self.memory.stopped:
            return {}
        sample = self.memory.sampler.latest()
        if sample is None:
            return {}
        out: dict[str, float] = {"mem_available_drop": float(sample.mem_available_drop)}
        if sample.server_rss is not None:
            out["server_rss"] = float(sample.server_rss)
        used = [g.used_bytes for g in sample.gpus if g.used_bytes is not None]
        if used:
            out["gpu_used"] = float(sum(used))
        return out

    # -- the timeline -----------------------------------------------------------------------------

    def _keep_second(self, snap: LiveSnapshot) -> None:
        """One sample at each whole second of the window (and the last look), its latencies over that
        second only: the counts since the last sample."""
        kept = self._series["t_s"]
        if not snap.final and kept and int(snap.elapsed_s) <= int(kept[-1] or 0):
            return
        if not snap.final and not kept and snap.elapsed_s < 1.0:
            return
        counts = {name: (self.figures.counts[name] if name != "itl" else self.chunk_counts["itl"]).copy()
                  for name in LATENCIES}
        before = self._second_counts
        then_s, then_finished, then_tokens = self._second
        span = snap.elapsed_s - then_s
        row: dict[str, float | None] = {
            "t_s": round(snap.elapsed_s, 3), "in_flight": snap.in_flight, "completed": snap.completed,
            "failed": snap.failed,
            "requests_per_s": (snap.completed - then_finished) / span if span > 0 else None,
            "tokens_per_s": (snap.output_tokens - then_tokens) / span if span > 0 else None,
            "running": snap.server.get("running"), "waiting": snap.server.get("waiting"),
            "kv_cache_usage": snap.server.get("kv_cache_usage"),
        }
        for name in LATENCIES:
            window = counts[name] - before[name] if before is not None else counts[name]
            known = name != "itl" or self.has_chunk_histograms
            values = self.layout.quantiles_ns(window, (0.5, 0.99)) if known else [None, None]
            for q, value in zip(("p50", "p99"), values):
                row[f"{name}_{q}_ms"] = round(value / 1e6, 4) if value is not None else None
        for name in SERIES_COLUMNS:
            self._series[name].append(row[name])
        self._second_counts = counts
        self._second = (snap.elapsed_s, snap.completed, snap.output_tokens)

    def timeline(self) -> dict[str, Any] | None:
        """The result's ``timeline`` section (None before the first second)."""
        if not self._series["t_s"] or self.start_ns is None:
            return None
        return {"t0_monotonic_ns": self.start_ns, "interval_s": 1.0,
                "latency_over": "each sample's latencies are over the requests (ttft, tpot, e2e) or chunks "
                                "(itl) that finished since the sample before",
                "columns": {name: list(values) for name, values in self._series.items()}}


def _time_left(elapsed: float, max_seconds: float | None, total: int, finished: int) -> float | None:
    """Against --max-seconds when given; else the requests left at the run's rate so far."""
    by_prompts = None
    if finished > 0 and elapsed > 0 and total > finished:
        by_prompts = (total - finished) / (finished / elapsed)
    elif total and finished >= total:
        by_prompts = 0.0
    if max_seconds is not None:
        cap = max(0.0, max_seconds - elapsed)
        return cap if by_prompts is None else min(cap, by_prompts)
    return by_prompts


def live_labels(config: Any) -> dict[str, str]:
    """The labels a run's figures carry (an exporter's label, variant and cell): where given, with the
    run's secrets hidden (they are served to whoever scrapes, and pushed)."""
    out = {"label": config.label, "variant": config.variant, "cell": config.metadata.get("sweep_cell")}
    return Secrets.of_config(config).obj({name: str(value) for name, value in out.items() if value})
