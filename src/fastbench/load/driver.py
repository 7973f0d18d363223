"""Drives the native connections: closed-loop concurrency or open-loop arrivals, time cap,
warm-ups, timeouts. Per request it does a handful of Python steps; per token, nothing.

One module of ~850 lines because the connection pool, the retries of stale connections, the three
schedules (closed, open, sessions) and the stop all share the same bookkeeping of which connection is where.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import math
import os
import resource
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from fastbench._core import BodyParts, Recorder, RunState, StreamConnection, now_ns
from fastbench.checks import check_value
from fastbench.exceptions import ConfigError, ServerError
from fastbench.load import pacer, protocols
from fastbench.load.outputs import decode_answer, decode_outputs
from fastbench.load.plan import LoadPlan, Target, check_api_key
from fastbench.load.sessions import start_on_arrival
from fastbench.results.records import COL, NCOLS, ErrorClass, RunData, TimestampSource, new_histogram

# The arrival timer fires early by a lead and the core waits out the rest: a wake-up from epoll takes
# ~30-40 us on the VM of bench/RESULTS.md, more from deep idle or on a busy host, which would make
# every arrival that late. The core learns the lead from the timer's own wake-up delays (their ~p99,
# RunState._learn_lead), between these bounds; the wait costs up to the lead in CPU per arrival, so
# the top bound also keeps that under LEAD_CPU_SHARE of a core at the run's rate.
ARRIVAL_LEAD_MIN_NS = 20_000
ARRIVAL_LEAD_MAX_NS = 300_000
LEAD_CPU_SHARE = 0.05
# Automatic coalescing's longest tick: past ~100 wake-ups/s the ticks cost under ~0.4 % of a core
# (a wake-up ~35 us here), and a longer one only delays what no tick foresees (an unwatched end).
AUTO_MAX_TICK_NS = 10_000_000
# --workers' shared cap (RunState.share_arrivals): how often a worker's loop looks at the run's arrivals
# without being woken, to see that the other workers have sent the last of them while it had nothing
# in flight (no wake-up crosses processes). Its window ends at the table's last end, not when it looked,
# so this only bounds how long it lingers; as often as the progress reports, it adds no CPU to speak of.
SHARED_POLL_S = 0.05
# The open loop's pool is filled before the window opens; a connect slower than this (an unreachable
# host) is left to the arrivals, which record it on their rows.
POOL_FILL_WAIT_S = 2.0


def arrival_lead_bounds(rate: float) -> tuple[int, int]:
    """The lead's bounds for an open loop at ``rate`` requests/s."""
    budget_ns = int(LEAD_CPU_SHARE / rate * 1e9) if rate > 0 else ARRIVAL_LEAD_MAX_NS
    return ARRIVAL_LEAD_MIN_NS, max(ARRIVAL_LEAD_MIN_NS, min(ARRIVAL_LEAD_MAX_NS, budget_ns))


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
                 rows: np.ndarray | None = None) -> None:
        """``rows``: the request table to fill (zeros, one row per body), e.g. in memory a parent
        shares with this worker process; by default one of its own."""
        # A run's options were checked where they entered (fastbench.checks); a plan built directly
        # meets the same rule for its slots, and the core's own for its drain tick.
        check_value("concurrency", plan.concurrency)
        if plan.coalesce_s != "auto" and not plan.coalesce_s >= 0:
            raise ConfigError(f"--coalesce-ms must be >= 0, got {plan.coalesce_s * 1e3:g}")
        check_api_key(api_key)
        self.target = target
        self.plan = plan
        self._idle: list[StreamConnection] = []
        self._addr: tuple[Any, ...] | None = None
        self._family = socket.AF_INET
        self._ssl_context: ssl.SSLContext | None = None
        self._stopping = False
        self._stop_reason = "completed"
        self._stopped_ns = 0
        self._stale_retries = 0
        self._stamp_guard: socket.socket | None = None
        self._pacer_wake: asyncio.Future[None] | None = None
        self._core_dispatch = False  # open loop: the core sends arrivals and holds the idle connections
        self._warming = 0  # pool connections being opened
        self._warm_paused_until = 0
        self._pool_misses = 0  # arrivals that found no connection ready and waited for a connect
        self._lead_learnt = False  # the core sent open-loop arrivals (and learnt its timer's lead)
        self._samples: list[tuple[float, int]] = []
        n = len(plan.bodies)
        self.rows = np.zeros((n, NCOLS), dtype=np.int64) if rows is None else rows
        self.histograms = {"itl_chunk": new_histogram(), "itl_token": new_histogram(), "skew": new_histogram()}
        self._recorders = {name: Recorder(h) for name, h in self.histograms.items()}
        self.state = RunState(
            self.rows, self._recorders["itl_chunk"], self._recorders["itl_token"], self._recorders["skew"]
        )
        self._bodies = list(plan.bodies)  # RunState holds it: a session's turn built during the run goes in it
        self.state.api = protocols.stream_api(plan.endpoint)  # before any connection: each takes the tables
        self.state.set_requests(protocols.request_head(target, api_key, plan.headers, plan.endpoint), self._bodies)
        self._session_stop: asyncio.Future[None] | None = None
        self.sessions_at_once = 0  # open-loop sessions: the most that ran at once
        if plan.max_error_rate is not None:
            self.state.max_error_rate = plan.max_error_rate
        self.state.on_stop = self._stop_soon
        self.state.kernel_timestamps = plan.kernel_timestamps
        self.state.save_outputs = plan.save_outputs
        # sessions whose history carries the server's replies need each reply's text, and only those: the
        # core keeps the answer's strings as it scans the events (reasoning left out), decoded once per turn
        self.state.keep_answers = plan.sessions is not None and plan.sessions.server_history
        self.state.keep_chunk_stamps = plan.keep_chunk_stamps

    # -- connections -------------------------------------------------------------------------

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

    async def _resolve(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(self.target.host, self.target.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ServerError(f"cannot resolve {self.target.host}: {exc.strerror or exc}") from None
        family, _, _, _, addr = infos[0]
        self._family, self._addr = family, addr
        if self.target.scheme == "https":
            ctx = ssl.create_default_context()
            if not self.plan.verify_tls:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["http/1.1"])
            self._ssl_context = ctx

    async def _connect(self) -> StreamConnection:
        loop = asyncio.get_running_loop()
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        sock.setblocking(False)
        assert self._addr is not None, "resolved in run() before any connection"
        try:
            await loop.sock_connect(sock, self._addr)
            if self._ssl_context is None:
                return StreamConnection(self.state, loop, sock)
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = self._ssl_context.wrap_bio(incoming, outgoing, server_hostname=self.target.host)
            await _handshake(loop, sock, tls, incoming, outgoing)
            return StreamConnection(self.state, loop, sock, tls, incoming, outgoing)
        except BaseException:
            sock.close()
            raise

    async def _send_one(self, body: bytes | BodyParts, row: int, scheduled_ns: int,
                        sent: tuple[StreamConnection, asyncio.Future[int]] | None = None,
                        reserved: bool = False, retried: int | None = None) -> int:
        """Send one request on an idle or new connection; returns the ErrorClass value of the
        last request of its chain (the core chains further requests itself: in closed loop the next
        one, in open loop the next one already due).
        ``sent``: the request already went out on this connection (the opening burst).
        ``reserved``: it holds a slot in the core's count (open loop) until it is sent or given up.
        ``retried``: the row already met a stale connection once."""
        # --workers' shared cap: a reserved send holds one of the run's slots (claim_due_with_slot, or a
        # stale retry's), kept through its retries and given back at its end
        shared_slot = reserved and self._core_dispatch and self.state.shares_arrivals
        try:
            while True:
                if sent is not None:
                    conn, pending = sent
                    sent = None
                else:
                    connect_ns = 0
                    idle = self._take_idle()
                    if idle is not None:
                        conn = idle
                    else:
                        t0 = now_ns()
                        try:
                            conn = await self._connect()
                        except (OSError, ssl.SSLError, ConnectionError) as exc:
                            self._record_connect_failure(row, scheduled_ns, t0, exc)
                            return int(ErrorClass.CONNECT)
                        connect_ns = now_ns() - t0
                    if self._stopping:  # warm-ups too: a stop during their connect sends nothing
                        conn.close()
                        return int(ErrorClass.CANCELLED)
                    if reserved:  # the slot is the request's now (the core counts it in flight)
                        self.state.reserved -= 1
                        reserved = False
                    pending = conn.start(body, row, scheduled_ns, connect_ns)
                error = await pending
                # A kept-alive connection the server had already closed fails before any byte of a
                # response: that is the connection's fault, not the request's, so try once more.
                if (error == ErrorClass.CONNECT and conn.last_was_reused and conn.row != retried
                        and not self._stopping):
                    row = retried = conn.row
                    if row >= 0:  # a measured request (a warm-up's re-send is not counted)
                        scheduled_ns = int(self.rows[row, COL["scheduled_ns"]])
                        self._undo_failure(row)
                        body = self.state.body(row)
                        self._stale_retries += 1
                    if self._core_dispatch:  # the slot stays held while it connects again
                        self.state.reserved += 1
                        reserved = True
                    continue
                if conn.is_usable:
                    if self._core_dispatch:
                        self.state.park(conn)
                    else:
                        self._idle.append(conn)
                return int(error)
        finally:
            if reserved:
                self.state.reserved -= 1
            if shared_slot:
                self.state.give_slot()

    def _take_idle(self) -> StreamConnection | None:
        """A kept-alive connection to reuse. One the server closed while it sat idle (its end of
        stream was read then) is dropped here, not sent on."""
        if self._core_dispatch:
            conn: StreamConnection | None = self.state.take_idle()
            return conn
        while self._idle:
            conn = self._idle.pop()
            if conn.is_usable:
                return conn
        return None

    def _record_connect_failure(self, row: int, scheduled_ns: int, t0: int, exc: BaseException) -> None:
        if row < 0:
            return
        end = now_ns()
        r = self.rows[row]
        r[COL["index"]] = row
        r[COL["scheduled_ns"]] = scheduled_ns
        r[COL["sent_ns"]] = t0
        r[COL["end_ns"]] = end
        r[COL["prompt_tokens"]] = -1
        r[COL["cached_tokens"]] = -1
        r[COL["error"]] = int(ErrorClass.CONNECT)
        r[COL["connect_ns"]] = end - t0
        errno_ = getattr(exc, "errno", None)
        reason = (os.strerror(errno_) if isinstance(errno_, int) and not isinstance(exc, ssl.SSLError)
                  else str(exc) or type(exc).__name__)
        if errno_ in (errno.EMFILE, errno.ENFILE):  # the client's limit, not the server's failure
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            reason += (f" in the client (one socket per request in flight, limit {soft}): give --concurrency "
                       "a cap, or raise the hard limit (ulimit -Hn, limits.conf, docker run --ulimit nofile=)")
        self.state.error_messages[row] = f"connect to {self.target.host}:{self.target.port} failed: {reason}"
        self.state.failed += 1
        self.state.check_error_rate()

    def _undo_failure(self, row: int) -> None:
        if row >= 0:
            self.rows[row] = 0
            self.state.error_messages.pop(row, None)
            self.state.failed -= 1

    # -- schedules ---------------------------------------------------------------------------

    async def _closed_loop_worker(self, start_ns: int,
                                  opening: tuple[int, StreamConnection, asyncio.Future[int]] | None) -> None:
        """One slot of the closed loop. Each request is due when the slot's previous one ended;
        while a connection stays usable the core sends the next request itself. ``opening``: the
        slot's first request, already sent by the opening burst."""
        due = start_ns
        if opening is not None:
            row, conn, pending = opening
            # The request is out already (b"": a stale-connection retry rebuilds it from the row).
            await self._send_one(b"", row, due, (conn, pending))
            due = now_ns()
        while not self._past_cap():
            row = self.state._claim_row()
            if row < 0:
                return
            await self._send_one(self.state.body(row), row, due)
            due = now_ns()  # the chain ended (its connection closed): the slot is free from now

    async def _run_warmups(self) -> None:
        """Warm-ups go out through the same connections, within the concurrency limit, unrecorded."""
        pending = list(reversed(self.plan.warmup_bodies))

        async def worker() -> None:
            while pending and not self._stopping:
                await self._send_one(pending.pop(), -1, now_ns())

        await asyncio.gather(*(worker() for _ in range(min(self.plan.concurrency, len(pending)))))

    async def _run_closed(self, start_ns: int) -> None:
        self.state.refill = True
        try:
            workers = min(self.plan.concurrency, len(self.plan.bodies))
            opening = self._opening_burst(workers, start_ns)
            await asyncio.gather(*(self._closed_loop_worker(start_ns, opening[i] if i < len(opening) else None)
                                   for i in range(workers)))
        finally:
            self.state.refill = False

    def _opening_burst(self, slots: int, start_ns: int) -> list[tuple[int, StreamConnection, asyncio.Future[int]]]:
        """Send the first request of every slot that has a warm connection, in one plain loop.

        The window starts with no stream open; every send costs a loopback round through the
        kernel (~5-10 us here), so 256 of them take milliseconds. Sending them back to back,
        before any worker task runs, keeps that ramp down to the sends themselves.
        """
        opening: list[tuple[int, StreamConnection, asyncio.Future[int]]] = []
        while len(opening) < slots and not self._stopping:
            conn = self._take_idle()
            if conn is None:
                break
            row = self.state._claim_row()
            if row < 0:
                self._idle.append(conn)
                break
            opening.append((row, conn, conn.start(self.state.body(row), row, start_ns)))
        return opening

    async def _run_open(self, start_ns: int, offsets: np.ndarray) -> None:
        """The core sends each arrival when it is due, on an idle connection of its pool, from inside
        the wake-up that finds it due (RunState.dispatch_arrivals); this loop keeps the pool topped
        up with connections opened ahead of need, and sends the arrivals that found it empty (they
        wait for a connect: late, and counted in ``pool_misses``)."""
        plan = self.plan
        loop = asyncio.get_running_loop()
        state = self.state
        n = len(offsets)
        tasks: set[asyncio.Task[None]] = set()
        # A request task that raised is a bug in the client: stop and raise it, never drop it.
        crashed: list[BaseException] = []

        def finished(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                crashed.append(exc)
                self.stop("client error")
            self._wake_pacer()

        def spawn(coro: Any) -> None:
            task = loop.create_task(coro)
            tasks.add(task)
            task.add_done_callback(finished)

        def retry_stale(conn: StreamConnection) -> None:
            # The core re-sends nothing itself; it holds the slot (reserved) for this send.
            row = conn.row
            self._undo_failure(row)
            self._stale_retries += 1
            spawn(self._send_one(state.body(row), row, int(self.rows[row, COL["scheduled_ns"]]),
                                 reserved=True, retried=row))

        self._core_dispatch = True
        shared = state.shares_arrivals  # --workers: one cap, and every arrival, shared by all workers
        pool_target = self._pool_target()
        state.on_wake = self._wake_pacer
        state.on_stale = retry_stale
        state.lead_min_ns, state.lead_max_ns = arrival_lead_bounds(float(plan.request_rate or 0.0))
        state.lead_ns = state.lead_min_ns
        self._lead_learnt = True
        state.dispatch_arrivals(offsets, start_ns, plan.concurrency)
        try:
            while True:
                if self._stopping:
                    if shared:
                        self._cancel_shared(offsets, start_ns)
                    else:
                        self._cancel_arrived(offsets[state.next_row:], state.next_row, start_ns)
                    break
                if state.arrival_head >= n and state.in_flight + state.reserved == 0 and not tasks:
                    break
                # Arrivals due with a slot free and no connection to send on or on its way: connect
                # for each (shared cap: the slot is taken with the claim).
                while (state.arrival_head < n and state.pool_size == 0 and self._warming == 0
                       and (shared or state.in_flight + state.reserved < plan.concurrency)):
                    row = state.claim_due_with_slot(now_ns()) if shared else state._claim_due_row(now_ns())
                    if row < 0:
                        break
                    state.reserved += 1
                    self._pool_misses += 1
                    spawn(self._send_one(state.body(row), row, start_ns + int(offsets[row]), reserved=True))
                self._top_up(pool_target, spawn)
                state.dispatch_due()  # re-arms the timer for the next arrival
                self._pacer_wake = loop.create_future()
                state.wake_handled()
                if shared:  # the last arrivals may go from other workers: nothing here is woken for them
                    await asyncio.wait([self._pacer_wake], timeout=SHARED_POLL_S)
                else:
                    await self._pacer_wake
        finally:
            self._core_dispatch = False
            state.on_wake = state.on_stale = None
            for task in tasks:
                task.cancel()  # only pool top-ups and sends the stop cancelled are left here
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            self._idle.extend(state.end_dispatch())
        if crashed:
            raise crashed[0]

    async def _run_sessions(self, start_ns: int, offsets: np.ndarray | None) -> None:
        """Multi-turn sessions. Closed loop: each of ``concurrency`` slots runs sessions one after
        another, keeping its slot through the think times. Open loop: sessions arrive at the rate,
        each turn due its think time after the reply before it; at most ``concurrency`` requests are
        in flight (a turn waiting for one is late, and its latency counts from when it was due)."""
        sessions = self.plan.sessions
        assert sessions is not None
        self._session_stop = asyncio.get_running_loop().create_future()
        n = len(sessions.first_rows)
        if offsets is None:
            queue = iter(range(n))

            async def slot() -> None:
                for s in queue:
                    if self._stopping:
                        return
                    await self._run_session(s, now_ns(), None)

            await asyncio.gather(*(slot() for _ in range(min(self.plan.concurrency, n))))
        else:
            limit = asyncio.Semaphore(self.plan.concurrency)
            first_due = start_ns + offsets.astype(np.int64)
            self.sessions_at_once = await start_on_arrival(
                first_due, limit, self._session_stop,
                lambda s, due: self._run_session(s, due, limit, holds_slot=True))
            if self._stopping:  # sessions that arrived and never got a slot for their first turn
                for s, due in enumerate(first_due.tolist()):
                    if due > self._stopped_ns:
                        break
                    row = sessions.first_rows[s]
                    if not self.rows[row].any():
                        self._cancel_waiting(row, due)

    async def _run_session(self, session: int, due: int, limit: asyncio.Semaphore | None,
                           holds_slot: bool = False) -> None:
        """One session's turns in order; it ends early when a turn fails (its history would be wrong).
        ``holds_slot``: its first turn's slot of ``limit`` is taken already (start_on_arrival)."""
        sessions = self.plan.sessions
        assert sessions is not None
        first = sessions.first_rows[session]
        reply: str | None = None
        for row in range(first, first + sessions.turns[session]):
            due += int(sessions.think_ns[row])  # 0 for the first turn
            delay_s = (due - now_ns()) / 1e9
            if delay_s > 0 and self._session_stop is not None:
                await asyncio.wait([self._session_stop], timeout=delay_s)
            if self._past_cap():
                if holds_slot and limit is not None:
                    limit.release()
                if limit is not None and due <= self._stopped_ns:
                    self._cancel_waiting(row, due)  # it was due: the stop, not its think time, held it
                return
            body = sessions.body(row, reply)
            self._bodies[row] = body  # where a stale-connection retry finds it
            if limit is None:
                error = await self._send_one(body, row, due)
            else:
                if not holds_slot:
                    await limit.acquire()
                    if self._stopping:  # the slot came after the stop
                        limit.release()
                        self._cancel_waiting(row, due)
                        return
                holds_slot = False
                try:
                    error = await self._send_one(body, row, due)
                finally:
                    limit.release()
            if error != ErrorClass.OK or self._stopping:
                return
            due = int(self.rows[row, COL["end_ns"]]) or now_ns()
            if sessions.server_history:
                reply = decode_answer(self.state.answers.pop(row, None))

    def _pool_target(self) -> int:
        """Idle connections the open loop keeps ready: enough for the arrivals of ~20 ms (a connect
        takes ~0.1 ms on loopback, a TLS handshake a few ms), and a few for bursts."""
        rate = float(self.plan.request_rate or 0.0)
        return min(self.plan.concurrency, math.ceil(rate * 0.02) + 8)

    async def _fill_pool(self) -> None:
        """Open loop, before the window opens: the warm-ups' connections into the pool, and the pool
        filled, so that the first arrivals (Poisson gaps can be microseconds) find connections ready
        instead of racing the top-up for a handshake. A connect still going after POOL_FILL_WAIT_S is
        given up; the arrivals then connect for themselves and record what happened on their rows."""
        for conn in self._idle:
            self.state.park(conn)
        self._idle.clear()
        connects: set[asyncio.Future[None]] = set()
        self._top_up(self._pool_target(), lambda coro: connects.add(asyncio.ensure_future(coro)))
        if connects:
            _, late = await asyncio.wait(connects, timeout=POOL_FILL_WAIT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*connects, return_exceptions=True)

    def _top_up(self, target: int, spawn: Any) -> None:
        """Open connections ahead of need, so that an arrival never waits for a handshake: up to
        ``target`` idle ones, and never more connections than the concurrency limit (in flight,
        held for a send, idle and connecting together). After a failed connect, none for 0.1 s (the
        arrivals then connect for themselves and record the failure on their rows)."""
        state = self.state
        room = self.plan.concurrency - (state.in_flight + state.reserved + state.pool_size + self._warming)
        want = min(target - state.pool_size - self._warming, room)
        # Below half the target the core asks for more (on_wake); none when no room is left.
        state.pool_low = target // 2 + 1 if room > 0 else 0
        if self._stopping or now_ns() < self._warm_paused_until:
            return
        for _ in range(max(0, want)):
            self._warming += 1
            spawn(self._warm_one())

    async def _warm_one(self) -> None:
        try:
            conn = await self._connect()
        except (OSError, ssl.SSLError, ConnectionError):
            self._warm_paused_until = now_ns() + 100_000_000
            return
        finally:
            self._warming -= 1
        if self._stopping:
            conn.close()
            return
        self.state.park(conn)

    def _cancel_arrived(self, offsets: np.ndarray, first_row: int, start_ns: int) -> None:
        """Open loop, run stopped: the arrivals already due that were still waiting for a free slot
        are cancelled requests, not "not started": their wait is part of what the load did."""
        for k in range(len(offsets)):
            due = start_ns + int(offsets[k])
            if due > self._stopped_ns:
                break  # arrival times only grow
            self._cancel_waiting(first_row + k, due)

    def _cancel_shared(self, offsets: np.ndarray, start_ns: int) -> None:
        """_cancel_arrived under --workers' shared cap: the arrivals due by this worker's stop that no
        worker sent are claimed one by one from the run's counter (RunState.claim_arrived), so that
        every stopping worker takes some and each is cancelled exactly once."""
        while (row := self.state.claim_arrived(self._stopped_ns)) >= 0:
            self._cancel_waiting(row, start_ns + int(offsets[row]))

    def _cancel_waiting(self, row: int, due: int) -> None:
        """A request that was due before the run stopped and still waited for a slot: cancelled, with
        its wait (see _cancel_arrived)."""
        r = self.rows[row]
        r[COL["index"]] = row
        r[COL["scheduled_ns"]] = due
        r[COL["end_ns"]] = self._stopped_ns
        r[COL["prompt_tokens"]] = -1
        r[COL["cached_tokens"]] = -1
        r[COL["error"]] = int(ErrorClass.CANCELLED)
        self.state.error_messages[row] = (
            f"arrived {(self._stopped_ns - due) / 1e6:.1f} ms before the run stopped ({self._stop_reason}) "
            f"and was still waiting for one of the {self.plan.concurrency} slots")

    def _wake_pacer(self) -> None:
        if self._pacer_wake is not None and not self._pacer_wake.done():
            self._pacer_wake.set_result(None)

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

    def _stop_soon(self, reason: str) -> None:
        asyncio.get_running_loop().call_soon(self.stop, reason)

    def stop(self, reason: str, at_ns: int | None = None) -> None:
        """Stop sending; cancel what is in flight (it is counted as cancelled, not failed). ``at_ns``: the
        instant the run stopped, when it is not now (the time cap's, which the loop's timer passes by up to
        a millisecond): an arrival due after it never arrived."""
        if self._stopping:
            return
        self._stopping = True
        self.state.stopping = True
        self._stop_reason = reason
        self._stopped_ns = now_ns() if at_ns is None else min(now_ns(), at_ns)
        self._wake_pacer()
        if self._session_stop is not None and not self._session_stop.done():
            self._session_stop.set_result(None)
        for conn in self.state.busy_connections():
            conn.abort(int(ErrorClass.CANCELLED), f"in flight when the run stopped ({reason})")

    def _past_cap(self) -> bool:
        """Whether the run is stopping, stopping it at the time cap's instant first when that has passed and
        the loop's timer for it (up to a millisecond late) has not fired yet: no request begins after it."""
        cap_ns = self.state.send_until_ns
        if not self._stopping and now_ns() >= cap_ns:
            self.stop("time cap", cap_ns)
        return self._stopping

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
        await self._resolve()
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
            if plan.expected_output_tokens is not None:
                self.state.expect_tokens(np.asarray(plan.expected_output_tokens, dtype=np.int64))
            if plan.coalesce_s == "auto":
                # Reads on every arrival until the chunk gaps are known, then on a tick the core
                # chooses from them and changes as they change (coalesce.pyx says how and why).
                wake_fd = self.state.coalesce_auto(AUTO_MAX_TICK_NS)
                if plan.expected_output_tokens is not None:
                    self.state.watch_ends()
                loop.add_reader(wake_fd, self.state.drain_coalesced)
            elif plan.coalesce_s:
                # Coalescing: the sockets are drained at least every coalesce_s, and at once when a
                # stream that may be ending gets a chunk; one wake-up serves every ready socket.
                wake_fd = self.state.coalesce(max(1, round(plan.coalesce_s * 1e9)))
                if plan.expected_output_tokens is not None:
                    self.state.watch_ends()
                loop.add_reader(wake_fd, self.state.drain_coalesced)
            else:
                loop.add_reader(wake_fd, self.state.drain)
            if plan.warmup_bodies and not self._stopping:
                await self._run_warmups()
            # Drawn before the window opens: numpy's generator takes ~6 ms to start and 10M arrivals
            # take ~1 s, which would make the first arrivals late by as much.
            arrivals = len(plan.sessions.first_rows) if plan.sessions is not None else len(plan.bodies)
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
            if offsets is not None and plan.sessions is None and not self._stopping:
                await self._fill_pool()
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
            try:
                if plan.sessions is not None:
                    await self._run_sessions(start_ns, offsets)
                elif offsets is None:
                    await self._run_closed(start_ns)
                else:
                    await self._run_open(start_ns, offsets)
            except (asyncio.CancelledError, KeyboardInterrupt):
                self.stop("interrupted")
                raise
            finally:
                sampler.cancel()
                if cap_timer is not None:
                    cap_timer.cancel()
            end_ns = now_ns()
            if self.state.shares_arrivals and not self._stopping:
                # the table is the run's: its last end, not when this worker's loop looked (SHARED_POLL_S)
                end_ns = min(end_ns, max(start_ns, int(self.rows[:, COL["end_ns"]].max())))
            cpu_ns = time.process_time_ns() - cpu0
        finally:
            watchdog.cancel()
            if watcher is not None:
                watcher.cancel()
            loop.remove_reader(wake_fd)
            for conn in self._idle:
                conn.close()
            self._idle.clear()
            self.state.close_all("in flight when the run was cancelled")  # none left unless cancelled
            if self._stamp_guard is not None:
                self._stamp_guard.close()
                self._stamp_guard = None
            if gc_was_enabled:
                gc.enable()
            gc.unfreeze()
        return self._run_data(start_ns, end_ns, cpu_ns, warm)

    def _run_data(self, start_ns: int, end_ns: int, cpu_ns: int, warm: dict[str, int]) -> RunData:
        cap_hit = self._stop_reason == "time cap"
        if cap_hit and self.plan.max_seconds is not None:
            end_ns = min(end_ns, start_ns + int(self.plan.max_seconds * 1e9))
        counters = {k: v - warm[k] for k, v in self.state.counters.items()}
        for recorder in self._recorders.values():
            recorder.sync()
        reads = counters["reads"]
        kernel = counters["kernel_stamped_reads"]
        return RunData(
            rows=self.rows,
            error_messages=dict(self.state.error_messages),
            histograms=self.histograms,
            start_ns=start_ns,
            end_ns=end_ns,
            cap_hit=cap_hit,
            stopped_reason=self._stop_reason,
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
            stale_retries=self._stale_retries,
            open_loop=(self.plan.request_rate is not None or self.plan.ramp_up is not None
                       or self.plan.arrival_offsets_ns is not None),
            extra={
                "skew_negative": self._recorders["skew"].negative_count,
                "histogram_clamped": {k: r.clamped_count for k, r in self._recorders.items()},
                "wakeups": counters["wakeups"],
                "ends_watched": counters["ends_watched"],
                # open loop: arrivals the core sent on a warm connection, and those that found none
                # ready and waited for a connect (late by it)
                "core_sends": self.state.core_sends,
                "pool_misses": self._pool_misses,
                # the arrival timer's lead as learnt at the end, and the time spent waiting leads out
                "arrival_lead_ns": self.state.lead_ns if self._lead_learnt else None,
                "lead_wait_ns": self.state.lead_wait_ns,
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


async def _handshake(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, tls: ssl.SSLObject,
    incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO,
) -> None:
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            pending = outgoing.read()
            if pending:
                await loop.sock_sendall(sock, pending)
            data = await loop.sock_recv(sock, 65536)
            if not data:
                raise ConnectionError("the server closed the connection during the TLS handshake") from None
            incoming.write(data)
    pending = outgoing.read()
    if pending:
        await loop.sock_sendall(sock, pending)
