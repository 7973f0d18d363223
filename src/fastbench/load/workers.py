"""``--workers N``: one run's schedule over N processes of this machine, merged exactly.

Each worker is a process of its own (``python -m fastbench.load.worker``: a fresh interpreter, not
multiprocessing, so that a script calling ``fastbench.run()`` without a ``__main__`` guard is never
re-run in the children, and nothing of the parent's event loop or threads is forked) running an
ordinary LoadGenerator on its own event loop and native core. The parent keeps the rest: the one
server lifecycle, /metrics scraper and memory sampler, the schedule, the stop, the merge.

* One schedule. Closed loop: the slots are dealt round-robin to the workers, and every worker holds the
  whole request table, in memory they share with this process: a worker whose slot frees claims the
  next request with an atomic add on one counter there (RunState.claim_rows), as one process's slots
  claim the next row of its table, so --concurrency is held until the requests run out, whatever
  their lengths. (A transport without shared memory, --ray's, deals request ``i`` to the worker of
  slot ``i mod concurrency`` up front instead, and says so.) Open loop: the arrivals are drawn once,
  here, exactly as one process draws them. Under a --concurrency cap that can bind, the cap is the
  run's, as in one process: every worker holds every arrival, and the run's next unsent arrival and
  its requests in flight are counters in the shared memory; a slot is taken only below the cap, an
  arrival claimed only when due (compare-and-swaps, RunState.share_arrivals), and a slot that frees in
  any worker sends the oldest due arrival; worker ``w``'s timer wakes for arrivals ``i mod N = w``.
  Uncapped (or --ray), arrival ``i`` (request ``i``) goes to worker ``i mod N``, each with its share of
  the cap: the union of the workers' arrivals is the drawn process itself. No request is in two
  workers. Warm-ups are dealt round-robin.
* One start instant on CLOCK_MONOTONIC (one clock for every process of the host), chosen once every
  worker is warm; ``--max-seconds`` ends every worker at the same instant from it.
* ``--max-error-rate``: each worker applies the rule to its own counts plus the others' as the
  parent last sent them (every worker.REPORT_INTERVAL_S), and stops at once; it tells the parent,
  which stops the others.
* Faults. A worker's request table lives in memory shared with the parent (a memfd), so what it
  finished stands if it dies; so does what it had claimed, which its core writes there on every claim
  before the request is sent (claimed from the shared table: its mark at each row it claimed; dealt
  open loop: the count of its rows it had claimed). Its requests claimed but unfinished are then
  counted failed as WORKER_LOST, the run stops ("worker lost": the load asked for is no longer
  applied), and the result names the worker and when. A worker that cannot start fails the run with its own error.
* The parent holds the deadlines: a worker says something every worker.REPORT_INTERVAL_S, and one
  silent for SILENCE_LIMIT_S (stopped, or its loop blocked), or still running STOP_GRACE_S past the
  time cap or a stop, is killed and counted lost, and the merged result is written all the same.

The merge is :mod:`fastbench.load.merge`; each worker's part of it, its lost requests and the result's
per-worker section are :mod:`fastbench.load.workerreport`'s; the shares and the parent's end of each
worker, :mod:`fastbench.load.workerlink`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import mmap
import os
import pathlib
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from fastbench._core import now_ns
from fastbench.exceptions import ConfigError, WorkerError
from fastbench.load.merge import Part, merge_parts
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.worker import (
    REPORT_INTERVAL_S,
    WorkerSpec,
    claim_layout,
    claim_views,
    read_frame,
    shared_size,
    shared_views,
)
from fastbench.load.workerlink import Share, WorkerLink, arrival_offsets_ns, merged_chunk_counts, split_schedule
from fastbench.load.workerreport import claimed_parts, dealt_parts, fewer_workers, mark_lost, section
from fastbench.results.records import RunData

__all__ = ("STREAMS_PER_WORKER", "Share", "WorkerLink", "WorkerPool", "arrival_offsets_ns", "choose_workers",
           "split_schedule")

# From the chosen instant to the window's start: time for the start message to reach every worker
# and for each to wake (a few ms even on a loaded 2-core machine).
START_MARGIN_NS = 50_000_000
# --workers auto: streams one worker is given before another is added. One process holds 256
# streams at 20 ms per chunk within 0.07 ms (bench/RESULTS.md); past that its core is the limit.
STREAMS_PER_WORKER = 256
# How long after the time cap or a stop a worker may still be running its window before it is
# killed and counted lost (it cancels what is in flight at once: this is for a wedged one).
STOP_GRACE_S = 10.0
# A worker that says nothing for this long is stalled (stopped, or its loop blocked) and is killed.
# It speaks every REPORT_INTERVAL_S; a loop held up by a loaded host is late by milliseconds, not this.
SILENCE_LIMIT_S = 5.0
# The same, before its first word (an interpreter starting and importing) and while it builds its
# result (outputs decoded and pickled, which a long run makes large).
STARTUP_LIMIT_S = 60.0
FINISH_LIMIT_S = 60.0
# How long a worker that handed in its result has to exit before it is killed.
EXIT_GRACE_S = 2.0


def choose_workers(concurrency: int | None, num_requests: int, cores: int,
                   server_here: bool) -> tuple[int, dict[str, Any]]:
    """``--workers auto``: one worker per STREAMS_PER_WORKER streams, no more than the cores this
    process may run on (less one when the server runs on this machine too). Returns the count and
    what it was chosen from, for the result (worded by fastbench.results.workersection)."""
    streams = concurrency if concurrency is not None else num_requests
    usable = max(1, cores - (1 if server_here else 0))
    wanted = max(1, math.ceil(streams / STREAMS_PER_WORKER))
    chosen = min(wanted, usable)
    return chosen, {"how": "auto", "streams": streams, "capped": concurrency is not None,
                    "per_worker": STREAMS_PER_WORKER, "wanted": wanted, "cores": cores, "server_here": server_here,
                    "count": chosen}


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class WorkerPool:
    """Runs one LoadPlan over several worker processes and returns one merged RunData; the same
    interface as LoadGenerator (``run()``, ``stop(reason)``)."""

    # The workers are processes of this machine, sharing memory with this one: a closed loop's requests
    # are claimed from one table (False: dealt up front, as --ray's actors on other nodes need).
    SHARED_MEMORY = True

    def __init__(self, target: Target, plan: LoadPlan, api_key: str | None = None, *, workers: int,
                 chosen: dict[str, Any] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if plan.sessions is not None:  # checks.py refuses --multi-turn with --workers; a plan built directly too
            raise ConfigError("--workers cannot run multi-turn sessions (their turns are built during the run, "
                              "in one process): use --workers 1")
        if plan.start_at is not None:
            raise ConfigError("WorkerPool chooses the start instant itself: a plan's start_at cannot be honoured")
        self.target = target
        self.plan = plan
        self.api_key = api_key
        self.requested = workers
        self.chosen = chosen  # why this many (choose_workers' record), when chosen for the pool
        self._workers: list[WorkerLink] = []
        self._stop_reason: str | None = None
        self._stopped_ns = 0
        self._start_ns = 0
        self._all_ready: asyncio.Future[None] | None = None
        # From the chosen instant to the window's start: time for "start" to reach every worker.
        self.start_margin_ns = START_MARGIN_NS
        self.merge_ns = 0  # how long the merge took (bench/workers.py weighs it against the run)
        # Closed loop over shared memory: the run's one request table, its claim counter and claimer
        # marks (worker.claim_layout), and its memfd until every worker has its own copy.
        self._claiming = False
        self._sharing_cap = False  # open loop: the cap and the arrivals are shared (claimed from the table)
        self._claim_fd = -1
        self._claim_map: mmap.mmap | None = None
        self._claim_next: np.ndarray | None = None
        self._claimers: np.ndarray | None = None
        self._claim_table: np.ndarray | None = None
        self.rows_by_worker: list[np.ndarray] = []  # after the run: the workload indexes each worker held

    # -- control -------------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Stop every worker (what is in flight is cancelled, as in one process)."""
        if self._stop_reason is not None:
            return
        self._stop_reason = reason
        self._stopped_ns = now_ns()
        for worker in self._workers:
            worker.send("stop", reason)
        if self._all_ready is not None and not self._all_ready.done():  # stopped before the window
            self._all_ready.set_result(None)

    def _judge_error_rate(self) -> None:
        limit = self.plan.max_error_rate
        if limit is None or self._stop_reason is not None:
            return
        failed = sum(w.progress.get("failed", 0) for w in self._workers)
        finished = failed + sum(w.progress.get("completed", 0) for w in self._workers)
        if finished >= 20 and failed > limit * finished:  # the rule one process applies
            self.stop("max error rate")

    def _send_others(self) -> None:
        """--max-error-rate: every worker is told the others' counts, which its own rule adds in."""
        totals = {key: sum(w.progress.get(key, 0) for w in self._workers) for key in ("completed", "failed")}
        for worker in self._workers:
            worker.send("others", {key: totals[key] - worker.progress.get(key, 0) for key in totals})

    # -- the run -------------------------------------------------------------------------------

    async def run(self) -> RunData:
        plan = self.plan
        n = len(plan.bodies)
        offsets = arrival_offsets_ns(plan)
        loop = asyncio.get_running_loop()
        self._all_ready = loop.create_future()
        follows: list[asyncio.Task[None]] = []
        helpers: list[asyncio.Task[None]] = []
        try:
            count = await self._prepare()
            # claimed from one shared table: the closed loop's requests, and an open loop's arrivals under a
            # cap that can bind (uncapped, each arrival is sent when due wherever it is: dealt)
            self._claiming = self.SHARED_MEMORY and (offsets is None or plan.concurrency < n)
            self._sharing_cap = self._claiming and offsets is not None
            shares = split_schedule(n, plan.concurrency, offsets, len(plan.warmup_bodies), count,
                                    claimed=self._claiming)
            self._workers = [self._new_worker(share, i) for i, share in enumerate(shares)]
            if self._claiming:
                self._open_claim_table(n)
            for worker in self._workers:
                await self._spawn(worker)
                if self._stop_reason is not None:  # stopped while the transport was being readied
                    worker.send("stop", self._stop_reason)
            self._close_claim_fd()  # every worker has its own
            follows = [loop.create_task(self._follow(w)) for w in self._workers]
            # Both until every worker is reaped: a stalled one is killed, a Ctrl-C is heard.
            helpers.append(loop.create_task(self._watch()))
            if plan.stop_event is not None:
                helpers.append(loop.create_task(self._watch_stop(plan.stop_event)))
            await self._all_ready  # raises WorkerError when one could not start
            if self._stop_reason is None:
                await self._before_start()
                self._start_ns = now_ns() + self.start_margin_ns
                if plan.on_window_start is not None:
                    plan.on_window_start()
                for worker in self._workers:
                    worker.send("start", self._start_ns)
                if plan.on_progress is not None:
                    helpers.append(loop.create_task(self._report_progress()))
            else:  # stopped before the window opened: the workers end without one
                self._start_ns = now_ns()
            await asyncio.gather(*follows)
            await self._reap()
        except BaseException:
            self._kill_all()
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._reap())
            self._release()
            raise
        finally:
            for task in follows + helpers:
                task.cancel()
        started = now_ns()
        data = self._merged()
        self.merge_ns = now_ns() - started
        data.extra["workers"]["merge_s"] = self.merge_ns / 1e9
        return data

    # -- the transport: worker processes of this machine (fastbench.load.raypool overrides these) ----

    async def _prepare(self) -> int:
        """Ready the transport; returns how many workers to deal the schedule to."""
        return self.requested

    def _new_worker(self, share: Share, index: int) -> WorkerLink:
        return WorkerLink(share, index)

    async def _before_start(self) -> None:
        """Every worker is warm; the start instant is chosen next."""

    def _open_claim_table(self, n: int) -> None:
        """The closed loop's one request table, claim counter and claimer marks, in a memfd every worker
        maps (worker.claim_layout)."""
        size = claim_layout(n)[0]
        self._claim_fd = os.memfd_create("fastbench-worker-claims", os.MFD_CLOEXEC)
        os.ftruncate(self._claim_fd, size)
        self._claim_map = mmap.mmap(self._claim_fd, size)
        self._claim_next, self._claimers, self._claim_table = claim_views(self._claim_map, n)

    def _close_claim_fd(self) -> None:
        if self._claim_fd >= 0:
            os.close(self._claim_fd)
            self._claim_fd = -1

    async def _spawn(self, worker: WorkerLink) -> None:
        share = worker.share
        # CLOEXEC: no other child inherits it; pass_fds hands it to this worker alone.
        if self._claim_fd >= 0:  # the run's claimed table: each worker its own fd of the one memfd
            fd = os.dup(self._claim_fd)
        else:
            fd = os.memfd_create(f"fastbench-worker-{worker.index}", os.MFD_CLOEXEC)
        parent_end, child_end = socket.socketpair()
        try:
            if self._claim_fd < 0:
                os.ftruncate(fd, shared_size(len(share.rows)))
                worker.shared = mmap.mmap(fd, shared_size(len(share.rows)))
                worker.claims, worker.table = shared_views(worker.shared, len(share.rows))
            # The package this module is in, first on the child's path: the same fastbench as here.
            env = dict(os.environ)
            root = str(pathlib.Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
            worker.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "fastbench.load.worker", str(child_end.fileno()), str(fd),
                pass_fds=(child_end.fileno(), fd), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env,
                # Out of the terminal's process group: Ctrl-C reaches the parent alone, which stops
                # every worker and merges what they measured (a worker also stops when the parent goes).
                start_new_session=True)
            worker.reader, worker.writer = await asyncio.open_connection(sock=parent_end)
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
            os.close(fd)  # the mmap and the child hold their own
        worker.heard_ns = 0
        worker.send("spec", self._spec(worker))

    def _spec(self, worker: WorkerLink) -> WorkerSpec:
        plan, share = self.plan, worker.share
        rows = share.rows.tolist()
        expected = plan.expected_output_tokens
        rate = None
        if share.offsets is not None and len(share.offsets) > 1:
            span_s = (int(share.offsets[-1]) - int(share.offsets[0])) / 1e9
            rate = (len(share.offsets) - 1) / span_s if span_s > 0 else float(len(share.offsets))
            if self._sharing_cap:  # its own timer's share sizes its pool (a freed slot's connection
                rate /= len(self._workers)  # sends the other workers' arrivals)
        elif share.offsets is not None:
            rate = 1.0
        if self._claiming:  # every request, claimed as the slots free
            bodies, expected_here = list(plan.bodies), list(expected) if expected else None
        else:
            bodies = [plan.bodies[i] for i in rows]
            expected_here = [expected[i] for i in rows] if expected else None
        return WorkerSpec(
            index=worker.index, target=self.target, api_key=self.api_key, headers=dict(plan.headers),
            endpoint=plan.endpoint, rows=share.rows, bodies=bodies,
            warmup_bodies=[plan.warmup_bodies[i] for i in share.warmups],
            concurrency=share.slots, request_rate=rate, arrival_offsets_ns=share.offsets,
            max_seconds=plan.max_seconds, request_timeout_s=plan.request_timeout_s, verify_tls=plan.verify_tls,
            coalesce_s=plan.coalesce_s, expected_output_tokens=expected_here,
            save_outputs=plan.save_outputs, keep_chunk_stamps=plan.keep_chunk_stamps,
            max_error_rate=plan.max_error_rate, server_gone_s=plan.server_gone_s,
            kernel_timestamps=plan.kernel_timestamps,
            whole_answers=plan.whole_answers,
            shared_claims=self._claiming, shared_arrivals=len(self._workers) if self._sharing_cap else 0)

    async def _follow(self, worker: WorkerLink) -> None:
        """Read one worker's messages until it hands in its result or is gone."""
        assert worker.reader is not None and worker.process is not None
        stderr = asyncio.get_running_loop().create_task(self._read_stderr(worker))
        while True:
            message = await read_frame(worker.reader)
            if message is None:
                break
            worker.heard_ns = now_ns()
            kind, payload = message
            if kind == "ready":
                worker.ready = True
                if all(w.ready for w in self._workers) and self._all_ready and not self._all_ready.done():
                    self._all_ready.set_result(None)
            elif kind == "progress":
                worker.take_progress(payload)
                self._judge_error_rate()
            elif kind == "stopping":  # it stopped of its own accord: the others stop now too
                self.stop(str(payload))
            elif kind == "finishing":
                worker.finishing = True
            elif kind == "done":
                worker.outcome = payload
                break
            elif kind == "failed":
                worker.failure = str(payload)
        if worker.outcome is not None:
            return
        lost_ns = worker.lost_ns or now_ns()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(worker.process.wait(), 5.0)
        await asyncio.wait([stderr], timeout=1.0)
        code = worker.process.returncode
        if worker.lost_how:  # killed here (see _watch)
            how = worker.lost_how
        elif worker.failure is not None:
            how = worker.failure
        elif code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            last = worker.stderr_tail[-1] if worker.stderr_tail else ""
            how = f"exited with status {code}" + (f": {last}" if last else "")
        worker.lost_ns, worker.lost_how = lost_ns, how
        if self._all_ready is not None and not self._all_ready.done():
            self._all_ready.set_exception(WorkerError(
                f"--workers: worker {worker.index} (pid {worker.process.pid}) could not start: {how}"))
            return
        self.stop("worker lost")

    async def _read_stderr(self, worker: WorkerLink) -> None:
        assert worker.process is not None and worker.process.stderr is not None
        async for line in worker.process.stderr:
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                worker.stderr_tail = [*worker.stderr_tail[-19:], text]

    async def _watch_stop(self, event: asyncio.Event) -> None:
        await event.wait()
        self.stop("interrupted")

    async def _watch(self) -> None:
        """The parent's deadlines, every REPORT_INTERVAL_S: a worker silent too long, or still running
        STOP_GRACE_S past the time cap or a stop, is killed and counted lost. Also hands out the
        others' counts for --max-error-rate."""
        spawned_ns = last_ns = now_ns()
        while True:
            await asyncio.sleep(REPORT_INTERVAL_S)
            now = now_ns()
            # This loop itself held up (its messages unread): judge no one until they are read.
            behind = now - last_ns > SILENCE_LIMIT_S * 1e9 / 2
            last_ns = now
            if self.plan.max_error_rate is not None and self._start_ns and self._stop_reason is None:
                self._send_others()
            if behind:
                continue
            for worker in self._workers:
                why = self._overdue(worker, now, spawned_ns)
                if why is not None:
                    self._kill_lost(worker, now, why)

    def _deadline_ns(self) -> int | None:
        """When every worker should have ended its window: the time cap or the stop, plus the grace."""
        ends = []
        if self._start_ns and self.plan.max_seconds is not None:
            ends.append(self._start_ns + int(self.plan.max_seconds * 1e9))
        if self._stop_reason is not None:
            ends.append(self._stopped_ns)
        return min(ends) + int(STOP_GRACE_S * 1e9) if ends else None

    def _overdue(self, worker: WorkerLink, now: int, spawned_ns: int) -> str | None:
        """Why ``worker`` is to be killed now, or None."""
        if worker.outcome is not None or worker.lost_how or worker.process is None:
            return None
        if worker.process.returncode is not None:
            return None  # gone: _follow reports it
        if worker.heard_ns == 0:
            silent_s, limit_s = (now - spawned_ns) / 1e9, STARTUP_LIMIT_S
        else:
            silent_s, limit_s = (now - worker.heard_ns) / 1e9, FINISH_LIMIT_S if worker.finishing else SILENCE_LIMIT_S
        if silent_s > limit_s:
            return f"said nothing for {silent_s:.1f} s (stalled: stopped, or its event loop blocked) and was killed"
        deadline = self._deadline_ns()
        if deadline is not None and now > deadline and not worker.finishing:
            after = "the time cap" if self._stop_reason is None else f"the stop ({self._stop_reason})"
            return f"was still running {STOP_GRACE_S:g} s after {after} and was killed"
        return None

    def _kill_lost(self, worker: WorkerLink, now: int, why: str) -> None:
        assert worker.process is not None
        worker.lost_ns, worker.lost_how = now, why
        with contextlib.suppress(ProcessLookupError):
            worker.process.kill()  # its socket closes: _follow reports it lost

    async def _report_progress(self) -> None:
        plan = self.plan
        assert plan.on_progress is not None
        while True:
            await asyncio.sleep(plan.progress_interval_s)
            totals = {key: sum(w.progress.get(key, 0) for w in self._workers)
                      for key in ("completed", "failed", "in_flight", "output_tokens")}
            plan.on_progress({"elapsed_s": (now_ns() - self._start_ns) / 1e9, "max_seconds": plan.max_seconds,
                              "total": len(plan.bodies), **totals})

    # -- what a live look reads while the workers run (api.live.LiveSampler) ----------------------

    def running_tables(self, started: int = 0) -> list[tuple[np.ndarray, int]]:
        """The request tables this process can read while the workers fill them, each with how many of
        its rows were claimed so far: the run's one shared table (claimed), each worker's (dealt: shared
        memory, or with --ray the rows its actor handed over). Empty once the run is merged. ``started``
        is not needed: the workers count their claims."""
        if self._claim_table is not None and self._claim_next is not None:
            return [(self._claim_table, int(self._claim_next[0]))]
        return [(w.table, int(w.progress.get("claimed", 0))) for w in self._workers if w.table is not None]

    def running_chunk_counts(self, counts_len: int) -> dict[str, np.ndarray]:
        """The workers' running ITL and skew histograms, merged ("itl", "skew": HDR counts; empty before
        the first report carrying them)."""
        return merged_chunk_counts(self._workers, counts_len)

    def copy_chunk_counts(self, into: Mapping[str, np.ndarray]) -> bool:
        """The workers' running chunk histograms, merged, copied into ``into``'s arrays."""
        merged = self.running_chunk_counts(len(into["itl"]))
        for name, counts in merged.items():
            into[name][...] = counts
        return bool(merged)

    def _kill_all(self) -> None:
        for worker in self._workers:
            if worker.process is not None and worker.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()

    async def _reap(self) -> None:
        """Every worker process ended, its control socket closed. Each has handed in its result or is
        lost already, so they are waited for together, EXIT_GRACE_S at most, then killed."""
        running = [w.process for w in self._workers if w.process is not None]
        if running:
            waits = [asyncio.ensure_future(p.wait()) for p in running]
            _, late = await asyncio.wait(waits, timeout=EXIT_GRACE_S)
            if late:
                self._kill_all()
                await asyncio.wait(late)
        for worker in self._workers:
            if worker.writer is not None:
                worker.writer.close()
                with contextlib.suppress(Exception):
                    await worker.writer.wait_closed()

    def _release(self) -> None:
        """The shared memory let go (merged, or the run failed: nothing will be merged from it)."""
        for worker in self._workers:
            worker.table = worker.claims = None
            if worker.shared is not None:
                with contextlib.suppress(BufferError):
                    worker.shared.close()
                worker.shared = None
        self._claim_next = self._claimers = self._claim_table = None
        if self._claim_map is not None:
            with contextlib.suppress(BufferError):
                self._claim_map.close()
            self._claim_map = None
        self._close_claim_fd()

    # -- the merge -----------------------------------------------------------------------------

    def _merged(self) -> RunData:
        parts, claimed = self._claimed_parts() if self._claim_table is not None else self._dealt_parts()
        self._release()
        self.rows_by_worker = [part.rows_index for part in parts]
        for worker, part, count in zip(self._workers, parts, claimed, strict=True):
            if worker.outcome is None:
                self._mark_lost(worker, part, count)
        reported = [p.data for p in parts if p.data is not None]
        reasons = {d.stopped_reason for d in reported}
        if self._stop_reason is not None:
            reason = self._stop_reason
        elif reasons - {"completed", "time cap"}:
            reason = sorted(reasons - {"completed", "time cap"})[0]
        else:
            reason = "time cap" if "time cap" in reasons else "completed"
        cap_hit = any(d.cap_hit for d in reported)
        end_ns = max([d.end_ns for d in reported] + [w.lost_ns for w in self._workers if w.lost_ns] + [self._start_ns])
        if cap_hit and self.plan.max_seconds is not None:
            end_ns = min(end_ns, self._start_ns + int(self.plan.max_seconds * 1e9))
        open_loop = self.plan.request_rate is not None or self.plan.ramp_up is not None
        extra: dict[str, Any] = {"workers": self._section(parts, end_ns)}
        if not self._sharing_cap:  # each worker's own slots: a request waits only for one of its worker's
            extra["slot_pools"] = [(p.rows_index, w.share.slots) for w, p in zip(self._workers, parts, strict=True)]
        return merge_parts(parts, len(self.plan.bodies), start_ns=self._start_ns, end_ns=end_ns,
                           stopped_reason=reason, cap_hit=cap_hit, open_loop=open_loop, extra=extra)

    def _dealt_parts(self) -> tuple[list[Part], list[int]]:
        return dealt_parts(self._workers)

    def _claimed_parts(self) -> tuple[list[Part], list[int]]:
        assert self._claim_next is not None and self._claimers is not None and self._claim_table is not None
        return claimed_parts(self._workers, self._claim_next, self._claimers, self._claim_table)

    def _mark_lost(self, worker: WorkerLink, part: Part, claimed: int) -> None:
        mark_lost(worker, part, claimed, self._start_ns)

    def _chosen(self) -> dict[str, Any] | None:
        """Why the pool has the workers it has, as data (None: as many as asked for)."""
        return self.chosen or fewer_workers(self.plan, self.requested, len(self._workers))

    def _section(self, parts: list[Part], end_ns: int) -> dict[str, Any]:
        """The result's per-worker section (fastbench.load.workerreport.section)."""
        return section(self._workers, parts, self.plan, requested=self.requested, chosen=self._chosen(),
                       claiming=self._claiming, sharing_cap=self._sharing_cap, start_ns=self._start_ns,
                       end_ns=end_ns)
