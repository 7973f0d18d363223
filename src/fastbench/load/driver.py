"""Drives the native connections through one run: the window, the time cap, warm-ups, timeouts, the
stop and the result's figures. The schedule (schedules.py: closed loop, open loop, sessions) sends the
requests over the run's Connections (connections.py). Per request a handful of Python steps; per
token, nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import resource
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from fastbench._core import Recorder, RunState, now_ns
from fastbench.checks import check_value
from fastbench.exceptions import ConfigError
from fastbench.load import gone, pacer, protocols
from fastbench.load.connections import Connections, RunStop
from fastbench.load.outputs import decode_outputs
from fastbench.load.plan import LoadPlan, Target, check_api_key
from fastbench.load.schedules import ClosedLoop, OpenLoop, Sessions, SharedOpenLoop
from fastbench.load.trees import AgentTrees
from fastbench.results.records import COL, NCOLS, ErrorClass, RunData, TimestampSource, new_histogram

# Automatic coalescing's longest tick: past ~100 wake-ups/s the ticks cost under ~0.4 % of a core
# (a wake-up ~35 us here), and a longer one only delays what no tick foresees (an unwatched end).
AUTO_MAX_TICK_NS = 10_000_000


@dataclasses.dataclass(frozen=True)
class SharedClaims:
    """--workers on one machine: the claims every worker shares (worker.claim_views). Closed loop: the
    next row of the whole table at ``header[0]``; open loop under a shared cap (``workers`` > 0): the
    run's next unsent arrival at ``header[0]`` and its requests in flight at ``header[1]``. ``claimers``
    (int32, one per row) gets ``claimer`` (this worker's index + 1) at every row it claims."""

    header: np.ndarray
    claimers: np.ndarray
    claimer: int
    workers: int = 0


@contextlib.contextmanager
def _fd_limit_raised() -> Iterator[None]:
    """The soft limit on open files up to the hard one for the run, then back (processes started
    later must not inherit it): every request in flight holds a socket, and an uncapped open loop
    against a slow server holds thousands (the soft limit is often 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20  # Linux's fs.nr_open default
    raised = False
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            raised = True
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        if raised:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            except (ValueError, OSError):
                pass


class LoadGenerator:
    """Runs one LoadPlan against one Target and returns RunData."""

    def __init__(self, target: Target, plan: LoadPlan, api_key: str | None = None, *,
                 rows: np.ndarray | None = None, published: np.ndarray | None = None,
                 shared: SharedClaims | None = None) -> None:
        """``rows``: the request table to fill (zeros, one row per body), e.g. in memory a parent
        shares with this worker process; by default one of its own. ``published``: --workers: an int64
        array (shared with the parent) whose ``[0]`` the core keeps at the count of rows claimed.
        ``shared``: --workers on one machine: the claims every worker shares."""
        # A run's options were checked where they entered (fastbench.checks); a plan built directly
        # meets the same rule for its slots, and the core's own for its drain tick.
        check_value("concurrency", plan.concurrency)
        if plan.coalesce_s != "auto" and not plan.coalesce_s >= 0:
            raise ConfigError(f"--coalesce-ms must be >= 0, got {plan.coalesce_s * 1e3:g}")
        check_api_key(api_key)
        self.target = target
        self.plan = plan
        self.shared = shared
        self._stamp_guard: socket.socket | None = None
        self._samples: list[tuple[float, int]] = []
        self._open_loop: OpenLoop | None = None  # the open loop's schedule, once it ran (its figures)
        n = len(plan.bodies)
        self.rows = np.zeros((n, NCOLS), dtype=np.int64) if rows is None else rows
        self.histograms = {"itl_chunk": new_histogram(), "itl_token": new_histogram(), "skew": new_histogram()}
        self._recorders = {name: Recorder(h) for name, h in self.histograms.items()}
        self.state = RunState(
            self.rows, self._recorders["itl_chunk"], self._recorders["itl_token"], self._recorders["skew"],
            expected_tokens=(None if plan.expected_output_tokens is None
                             else np.asarray(plan.expected_output_tokens, dtype=np.int64)),
            published=published,
        )
        self._bodies = list(plan.bodies)  # RunState holds it: a session's turn built during the run goes in it
        self.state.api = protocols.stream_api(plan.endpoint)  # before any connection: each takes the tables
        head = protocols.request_head(target, api_key, plan.headers, plan.endpoint, plan.accept)
        self.state.set_requests(head, self._bodies, _row_heads(head, plan.row_header))
        self.sessions_at_once = 0  # open-loop sessions: the most that ran at once
        self.gone_after_s: float | None = None  # the server went away: how long every connect had failed
        if plan.max_error_rate is not None:
            self.state.max_error_rate = plan.max_error_rate
        self.state.on_stop = self._stop_soon
        self.state.kernel_timestamps = plan.kernel_timestamps
        self.state.save_outputs = plan.save_outputs
        # only a history of the server's replies needs their text (the core keeps it; decoded once per turn)
        self.state.keep_answers = plan.sessions is not None and plan.sessions.server_history
        self.state.keep_chunk_stamps = plan.keep_chunk_stamps
        self.state.whole_answers = plan.whole_answers
        self.halt = RunStop(self.state)
        self.conns = Connections(target, plan, self.state, self.rows, self.halt)

    @property
    def recorders(self) -> Mapping[str, Recorder]:
        """The core's running chunk histograms ("itl_chunk", "itl_token", "skew"), read-only: a live
        look copies their counts while the run goes on (``Recorder.copy_counts``)."""
        return MappingProxyType(self._recorders)

    # -- what a live look reads while the run goes on (load.generators.Generator) ----------------------

    def running_tables(self, started: int) -> list[tuple[np.ndarray, int]]:
        """This process's request table, ``started`` of its rows sent so far."""
        return [(self.rows, started)]

    def copy_chunk_counts(self, into: Mapping[str, np.ndarray]) -> bool:
        """The core's running ITL and skew histograms, copied without a sync (Recorder.copy_counts)."""
        for name, key in (("itl", "itl_chunk"), ("skew", "skew")):
            self._recorders[key].copy_counts(into[name])
        return True

    def _arm_kernel_timestamps(self) -> None:
        """Linux turns receive timestamping on for the whole stack lazily (a deferred static key)
        when the first socket asks; packets that arrive before then carry no stamp. One socket
        holding the option for the run arms it before any request is sent."""
        if self.plan.kernel_timestamps and self._stamp_guard is None:
            guard = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                guard.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 1)
            except OSError:
                guard.close()
                return
            self._stamp_guard = guard

    async def _run_warmups(self) -> None:
        """Warm-ups go out through the same connections, within the concurrency limit, unrecorded."""
        pending = list(reversed(self.plan.warmup_bodies))

        async def slot() -> None:
            while pending and not self.halt.stopping:
                await self.conns.send_one(pending.pop(), -1, now_ns())

        await asyncio.gather(*(slot() for _ in range(min(self.plan.concurrency, len(pending)))))

    async def _run_schedule(self, start_ns: int, offsets: np.ndarray | None) -> None:
        """The window's requests, by the plan's schedule."""
        plan, shared = self.plan, self.shared
        if plan.trees is not None:
            trees = AgentTrees(self.conns, self._bodies, offsets)
            try:
                await trees.run(start_ns)
            finally:
                self.sessions_at_once = trees.at_once
        elif plan.sessions is not None:
            sessions = Sessions(self.conns, self._bodies, offsets)
            try:
                await sessions.run(start_ns)
            finally:
                self.sessions_at_once = sessions.at_once
        elif offsets is None:
            claims = (self.state.claim_rows() if shared is None
                      else self.state.claim_rows(shared.header, shared.claimers, shared.claimer))
            await ClosedLoop(self.conns, claims).run(start_ns)
        else:
            self._open_loop = (OpenLoop(self.conns, offsets) if shared is None or not shared.workers
                               else SharedOpenLoop(self.conns, offsets, shared.header, shared.claimers,
                                                   shared.claimer, shared.workers))
            await self._open_loop.run(start_ns)

    async def _watchdog(self) -> None:
        """Every 20 ms, fail requests past --request-timeout: one sweep for all connections instead
        of a timer per request, so that the core can chain requests without Python."""
        plan = self.plan
        timeout_ns = int(plan.request_timeout_s * 1e9) if plan.request_timeout_s else None
        if timeout_ns is None:
            return
        why = f"no complete response within --request-timeout {plan.request_timeout_s:g} s"
        while True:
            await asyncio.sleep(0.02)
            now = now_ns()
            for conn in [c for c in self.state.busy_connections() if now - c.sent_ns > timeout_ns]:
                conn.abort(int(ErrorClass.TIMEOUT), why)

    async def _watch_server_gone(self) -> None:
        """Stop the run once the server went away (load.gone's rule, on the table's own stamps)."""
        watch = gone.ServerGoneWatch(self.rows, self.plan.server_gone_s, now_ns())
        while not self.halt.stopping:
            await asyncio.sleep(gone.LOOK_INTERVAL_S)
            if watch.probe_due(now_ns()):  # silent: try a connection of its own (an open loop's arrivals wait)
                started = now_ns()
                watch.probed(started, await self._connects())
            if watch.look(self.state.counters["reads"], now_ns()):
                self.gone_after_s = watch.refused_for_s
                self.stop(gone.STOP_REASON)
                return

    async def _connects(self) -> bool:
        """Whether the server accepts a TCP connection now (closed at once; refused or no answer within
        PROBE_AFTER_S: False)."""
        loop = asyncio.get_running_loop()
        family, addr = self.conns._family, self.conns._addr
        if addr is None:  # not resolved: no run is going on
            return False
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, addr), gone.PROBE_AFTER_S)
            except (OSError, asyncio.TimeoutError):
                return False
        return True

    def _stop_soon(self, reason: str) -> None:
        asyncio.get_running_loop().call_soon(self.stop, reason)

    def stop(self, reason: str, at_ns: int | None = None) -> None:
        """Stop sending; cancel what is in flight (it is counted as cancelled, not failed). ``at_ns``: the
        instant the run stopped, when it is not now (the time cap's, which the loop's timer passes by up to
        a millisecond): an arrival due after it never arrived."""
        self.halt.stop(reason, at_ns)

    async def _watch_stop(self) -> None:
        assert self.plan.stop_event is not None
        await self.plan.stop_event.wait()
        self.stop("interrupted")

    async def _sample_progress(self, start_ns: int) -> None:
        plan = self.plan
        while True:
            await asyncio.sleep(plan.progress_interval_s)
            elapsed = (now_ns() - start_ns) / 1e9
            self._samples.append((elapsed, self.state.in_flight))
            if plan.on_progress is not None:
                c = self.state.counters
                plan.on_progress({
                    "elapsed_s": elapsed,
                    "max_seconds": plan.max_seconds,
                    "completed": c["completed"],
                    "failed": c["failed"],
                    "total": len(plan.bodies),
                    "in_flight": self.state.in_flight,
                    # finished requests' tokens, and what usage has counted so far of those in flight:
                    # long requests would otherwise show no output until they end
                    "output_tokens": c["output_tokens"] + sum(conn.tokens_in_flight
                                                              for conn in self.state.busy_connections()),
                })

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> RunData:
        with _fd_limit_raised():
            return await self._run()

    async def _run(self) -> RunData:
        loop = asyncio.get_running_loop()
        self._arm_kernel_timestamps()
        await self.conns.resolve()
        plan = self.plan
        gc_was_enabled = gc.isenabled()
        # A full collection over a run's objects pauses the loop for tens of ms, longer than a
        # chunk gap; kernel stamps cannot repair that (DESIGN.md), so no collections in the run.
        gc.collect()
        gc.freeze()
        gc.disable()
        wake_fd = self.state.fileno()
        watchdog = loop.create_task(self._watchdog())
        # Watched from before the warm-ups: a stop during them must also keep the window from opening.
        watcher = loop.create_task(self._watch_stop()) if plan.stop_event is not None else None
        try:
            # The loop calls the core directly: no Python frame per wake-up.
            watch_ends = plan.expected_output_tokens is not None
            if plan.coalesce_s == "auto":
                # Reads on every arrival until the chunk gaps are known, then on a tick the core
                # chooses from them and changes as they change (coalesce.pyx says how and why).
                wake_fd = self.state.coalesce_auto(AUTO_MAX_TICK_NS, watch_ends)
            elif plan.coalesce_s:
                # Coalescing: the sockets are drained at least every coalesce_s, and at once when a
                # stream that may be ending gets a chunk; one wake-up serves every ready socket.
                wake_fd = self.state.coalesce(max(1, round(plan.coalesce_s * 1e9)), watch_ends)
            loop.add_reader(wake_fd, self.state.drain)
            if plan.warmup_bodies and not self.halt.stopping:
                await self._run_warmups()
            # Drawn before the window opens: numpy's generator takes ~6 ms to start and 10M arrivals
            # take ~1 s, which would make the first arrivals late by as much.
            arrivals = (len(plan.sessions.first_rows) if plan.sessions is not None
                        else len(plan.trees.trees) if plan.trees is not None else len(plan.bodies))
            if plan.arrival_offsets_ns is not None:
                offsets = np.asarray(plan.arrival_offsets_ns, dtype=np.int64)
            elif plan.ramp_up is not None:
                strategy, start_rps, end_rps = plan.ramp_up
                offsets = pacer.ramp_up_offsets_ns(arrivals, strategy, start_rps, end_rps, plan.burstiness,
                                                   plan.seed)
            elif plan.request_rate is not None:
                offsets = pacer.arrival_offsets_ns(arrivals, plan.request_rate, plan.burstiness, plan.seed)
            else:
                offsets = None
            if offsets is not None and plan.sessions is None and plan.trees is None and not self.halt.stopping:
                await self.conns.fill_pool()
            # The window's counters start after the warm-ups.
            warm = self.state.counters
            if plan.on_window_start is not None:
                plan.on_window_start()
            start_ns = await plan.start_at() if plan.start_at is not None else now_ns()
            cpu0 = time.process_time_ns()
            cap_timer = None
            if plan.max_seconds is not None:  # from the start instant: every worker ends at the same one
                cap_ns = start_ns + int(plan.max_seconds * 1e9)
                # The loop's timer fires up to a millisecond late (libuv's resolution); the core's arrivals
                # are timed to the ns, so it is told the instant itself: nothing due from it is sent.
                self.state.send_until_ns = cap_ns
                cap_timer = loop.call_later((cap_ns - now_ns()) / 1e9, self.stop, "time cap", cap_ns)
            sampler = loop.create_task(self._sample_progress(start_ns))
            gone_watch = loop.create_task(self._watch_server_gone()) if plan.server_gone_s else None
            try:
                await self._run_schedule(start_ns, offsets)
            except (asyncio.CancelledError, KeyboardInterrupt):
                self.stop("interrupted")
                raise
            finally:
                sampler.cancel()
                if gone_watch is not None:
                    gone_watch.cancel()
                if cap_timer is not None:
                    cap_timer.cancel()
            end_ns = now_ns()
            if self.shared is not None and self.shared.workers and not self.halt.stopping:
                # the table is the run's: its last end, not when this worker's loop looked (SHARED_POLL_S)
                end_ns = min(end_ns, max(start_ns, int(self.rows[:, COL["end_ns"]].max())))
            cpu_ns = time.process_time_ns() - cpu0
        finally:
            watchdog.cancel()
            if watcher is not None:
                watcher.cancel()
            loop.remove_reader(wake_fd)
            self.conns.close_idle()
            self.state.close_all("in flight when the run was cancelled")  # none left unless cancelled
            if self._stamp_guard is not None:
                self._stamp_guard.close()
                self._stamp_guard = None
            if gc_was_enabled:
                gc.enable()
            gc.unfreeze()
        return self._run_data(start_ns, end_ns, cpu_ns, warm)

    def _run_data(self, start_ns: int, end_ns: int, cpu_ns: int, warm: dict[str, int]) -> RunData:
        cap_hit = self.halt.reason == "time cap"
        if cap_hit and self.plan.max_seconds is not None:
            end_ns = min(end_ns, start_ns + int(self.plan.max_seconds * 1e9))
        counters = {k: v - warm[k] for k, v in self.state.counters.items()}
        for recorder in self._recorders.values():
            recorder.sync()
        reads = counters["reads"]
        kernel = counters["kernel_stamped_reads"]
        open_loop = self._open_loop
        core_sends, lead_ns, lead_wait_ns = (open_loop.sent_by_core if open_loop is not None and open_loop.sent_by_core
                                             else (0, None, 0))
        return RunData(
            rows=self.rows,
            error_messages=dict(self.state.error_messages),
            histograms=self.histograms,
            start_ns=start_ns,
            end_ns=end_ns,
            cap_hit=cap_hit,
            stopped_reason=self.halt.reason,
            # Kernel stamps whenever the socket gives them; the result states the share of reads
            # that fell back to the user-space clock.
            timestamp_source=TimestampSource.KERNEL if kernel else TimestampSource.USER,
            reads=reads,
            multi_event_reads=counters["multi_event_reads"],
            output_events=counters["output_events"],
            kernel_stamped_reads=kernel,
            connections_opened=counters["connections_opened"],
            concurrency_samples=np.array(self._samples, dtype=np.float64).reshape(-1, 2),
            mean_in_flight=mean_in_flight(self.rows, start_ns, end_ns),
            client_cpu_ns=cpu_ns,
            warmups=len(self.plan.warmup_bodies),
            stale_retries=self.conns.stale_retries,
            open_loop=(self.plan.request_rate is not None or self.plan.ramp_up is not None
                       or self.plan.arrival_offsets_ns is not None),
            extra={
                "skew_negative": self._recorders["skew"].negative_count,
                "histogram_clamped": {k: r.clamped_count for k, r in self._recorders.items()},
                "wakeups": counters["wakeups"],
                **({"server_gone_after_s": self.gone_after_s} if self.gone_after_s is not None else {}),
                "ends_watched": counters["ends_watched"],
                # open loop: arrivals the core sent on a warm connection, and those that found none
                # ready and waited for a connect (late by it)
                "core_sends": core_sends,
                "pool_misses": open_loop.pool_misses if open_loop is not None else 0,
                # the arrival timer's lead as learnt at the end, and the time spent waiting leads out
                "arrival_lead_ns": lead_ns,
                "lead_wait_ns": lead_wait_ns,
                **({"coalescing": coalescing_summary(self.state.coalescing, start_ns)}
                   if self.state.coalescing is not None else {}),
                **self._decoded_outputs(),
                **({"chunk_stamps": self.state.chunk_stamps} if self.plan.keep_chunk_stamps else {}),
            },
        )

    def _decoded_outputs(self) -> dict[str, Any]:
        if not self.plan.save_outputs:
            return {}
        outputs, unreadable = decode_outputs(self.state.outputs)
        return {"outputs": outputs, "outputs_unreadable": unreadable}



def _row_heads(head: bytes, row_header: tuple[str, Sequence[str]] | None) -> list[bytes] | None:
    """Each row's head: the run's with one header more before its Content-Length (one bytes object per
    distinct value, shared by its rows)."""
    if row_header is None:
        return None
    name, values = row_header
    cut = len(b"Content-Length: ")
    heads: dict[str, bytes] = {}
    for value in values:
        if value not in heads:
            heads[value] = head[:-cut] + f"{name}: {value}\r\n".encode("latin-1") + head[-cut:]
    return [heads[value] for value in values]


def coalescing_summary(core: dict[str, Any], start_ns: int) -> dict[str, Any]:
    """What automatic coalescing chose and when (RunState.coalescing), in the result's units: ms, and
    seconds from the window's start (negative: before it, in the warm-ups)."""
    return {
        "tick_ms": core["tick_ns"] / 1e6,
        "short_gap_ms": core["short_gap_ns"] / 1e6 or None,
        "changes": [{"at_s": round((at_ns - start_ns) / 1e9, 6), "tick_ms": tick_ns / 1e6,
                     "short_gap_ms": gap_ns / 1e6 or None, "why": why}
                    for at_ns, tick_ns, gap_ns, why in core["changes"]],
        "changes_total": core["changes_total"],
        "reads_on_tick": core["ticked_reads"],
        "multi_event_reads_on_tick": core["ticked_multi_event_reads"],
        "reads_on_arrival": core["arrival_reads"],
        "multi_event_reads_on_arrival": core["arrival_multi_event_reads"],
        "ends_unwatched": core["ends_unwatched"],
    }


def mean_in_flight(rows: np.ndarray, start_ns: int, end_ns: int) -> float:
    """Time-weighted mean number of requests in flight (sent to end) over [start, end]."""
    if end_ns <= start_ns:
        return 0.0
    sent = rows[:, COL["sent_ns"]]
    end = rows[:, COL["end_ns"]]
    started = sent > 0
    lo = np.maximum(sent[started], start_ns)
    hi = np.minimum(end[started], end_ns)
    busy = np.clip(hi - lo, 0, None).sum()
    return float(busy) / (end_ns - start_ns)
