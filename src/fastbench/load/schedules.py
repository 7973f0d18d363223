"""The three schedules a run's requests follow, each over the run's Connections: the closed loop (each
slot's next request when its last one ended), the open loop (each arrival at its time, sent by the core;
SharedOpenLoop under --workers' shared cap) and multi-turn sessions. ``run(start_ns)`` runs the window.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from fastbench._core import Dispatcher, RowClaims, SharedDispatcher, StreamConnection, now_ns
from fastbench.load import gone
from fastbench.load.connections import Connections
from fastbench.load.outputs import decode_answer
from fastbench.load.sessions import start_on_arrival
from fastbench.results.records import COL, ErrorClass

# The arrival timer fires early by a lead and the core waits out the rest: a wake-up from epoll takes
# ~30-40 us on the VM of bench/RESULTS.md, more from deep idle or on a busy host, which would make
# every arrival that late. The core learns the lead from the timer's own wake-up delays (their ~p99,
# Dispatcher.learn_lead), between these bounds; the wait costs up to the lead in CPU per arrival, so
# the top bound also keeps that under LEAD_CPU_SHARE of a core at the run's rate.
ARRIVAL_LEAD_MIN_NS = 20_000
ARRIVAL_LEAD_MAX_NS = 300_000
LEAD_CPU_SHARE = 0.05
# --workers' shared cap (RunState.share_arrivals): how often a worker's loop looks at the run's arrivals
# without being woken, to see that the other workers have sent the last of them while it had nothing
# in flight (no wake-up crosses processes). Its window ends at the table's last end, not when it looked,
# so this only bounds how long it lingers; as often as the progress reports, it adds no CPU to speak of.
SHARED_POLL_S = 0.05


def arrival_lead_bounds(rate: float) -> tuple[int, int]:
    """The lead's bounds for an open loop at ``rate`` requests/s."""
    budget_ns = int(LEAD_CPU_SHARE / rate * 1e9) if rate > 0 else ARRIVAL_LEAD_MAX_NS
    return ARRIVAL_LEAD_MIN_NS, max(ARRIVAL_LEAD_MIN_NS, min(ARRIVAL_LEAD_MAX_NS, budget_ns))


class ClosedLoop:
    """``concurrency`` slots; each request is due when the slot's previous one ended, and while a
    connection stays usable the core sends the next request itself."""

    def __init__(self, conns: Connections, claims: RowClaims) -> None:
        self.conns = conns
        self.claims = claims

    async def run(self, start_ns: int) -> None:
        plan, state = self.conns.plan, self.conns.state
        try:
            slots = min(plan.concurrency, len(plan.bodies))
            opening = self._opening_burst(slots, start_ns)
            await asyncio.gather(*(self._slot(start_ns, opening[i] if i < len(opening) else None)
                                   for i in range(slots)))
        finally:
            state.end_schedule()

    async def _slot(self, start_ns: int, opening: tuple[int, StreamConnection, asyncio.Future[int]] | None) -> None:
        """One slot. ``opening``: its first request, already sent by the opening burst."""
        conns = self.conns
        due = start_ns
        if opening is not None:
            row, conn, pending = opening
            # The request is out already (b"": a stale-connection retry rebuilds it from the row).
            await conns.send_one(b"", row, due, (conn, pending))
            due = now_ns()
        refusals = 0
        while not conns.stop.past_cap():
            row = self.claims.claim()
            if row < 0:
                return
            await conns.send_one(conns.state.body(row), row, due)
            if conns.plan.server_gone_s:  # a port that refuses every connect is not hammered (load.gone)
                refusals = refusals + 1 if gone.refused(conns.rows[row]) else 0
                if refusals:
                    await asyncio.sleep(gone.refusal_wait(refusals))
                    if conns.stop.stopping:
                        return
            due = now_ns()  # the chain ended (its connection closed): the slot is free from now

    def _opening_burst(self, slots: int, start_ns: int) -> list[tuple[int, StreamConnection, asyncio.Future[int]]]:
        """Send the first request of every slot that has a warm connection, in one plain loop.

        The window starts with no stream open; every send costs a loopback round through the
        kernel (~5-10 us here), so 256 of them take milliseconds. Sending them back to back,
        before any slot's task runs, keeps that ramp down to the sends themselves.
        """
        conns = self.conns
        opening: list[tuple[int, StreamConnection, asyncio.Future[int]]] = []
        while len(opening) < slots and not conns.stop.stopping:
            conn = conns.take_idle()
            if conn is None:
                break
            row = self.claims.claim()
            if row < 0:
                conns.idle.append(conn)
                break
            opening.append((row, conn, conn.start(conns.state.body(row), row, start_ns)))
        return opening


class OpenLoop:
    """The core sends each arrival when it is due, on an idle connection of its pool, from inside the
    wake-up that finds it due (RunState.dispatch_arrivals); this loop keeps the pool topped up with
    connections opened ahead of need, and sends the arrivals that found it empty (they wait for a
    connect: late, and counted in ``pool_misses``)."""

    def __init__(self, conns: Connections, offsets: np.ndarray) -> None:
        self.conns = conns
        self.offsets = offsets
        self.pool_misses = 0  # arrivals that found no connection ready and waited for a connect
        self.sent_by_core: tuple[int, int, int] | None = None  # core_sends, lead_ns, lead_wait_ns at the end
        self._wake: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._crashed: list[BaseException] = []  # a request task that raised: a bug, raised, never dropped
        conns.stop.hooks.append(self.wake)

    def wake(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _dispatch(self, start_ns: int) -> Dispatcher:
        plan = self.conns.plan
        return self.conns.state.dispatch_arrivals(self.offsets, start_ns, plan.concurrency,
                                                  *arrival_lead_bounds(float(plan.request_rate or 0.0)),
                                                  self.wake, self._retry_stale)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            self._crashed.append(exc)
            self.conns.stop.stop("client error")
        self.wake()

    def _retry_stale(self, conn: StreamConnection) -> None:
        # The core re-sends nothing itself; it holds the slot (reserved) for this send.
        conns = self.conns
        row = conn.row
        conns.undo_failure(row)
        conns.stale_retries += 1
        self._spawn(conns.send_one(conns.state.body(row), row, int(conns.rows[row, COL["scheduled_ns"]]),
                                   reserved=True, retried=row))

    def _has_room(self) -> bool:
        state = self.conns.state
        return state.in_flight + state.reserved < self.conns.plan.concurrency

    def _claim_miss(self, dispatcher: Dispatcher) -> int:
        """An arrival due, for Python to connect for, or -1."""
        return dispatcher.claim(now_ns())

    def _cancel_arrived(self, dispatcher: Dispatcher, start_ns: int) -> None:
        """Run stopped: the arrivals already due that were still waiting for a free slot are cancelled
        requests, not "not started": their wait is part of what the load did."""
        conns = self.conns
        first = conns.state.next_row
        for k, offset in enumerate(self.offsets[first:].tolist()):
            due = start_ns + int(offset)
            if due > conns.stop.at_ns:
                break  # arrival times only grow
            conns.cancel_waiting(first + k, due)

    async def _wait(self, wake: asyncio.Future[None]) -> None:
        await wake

    async def run(self, start_ns: int) -> None:
        conns, state = self.conns, self.conns.state
        loop = asyncio.get_running_loop()
        n = len(self.offsets)
        pool_target = conns.pool_target()
        dispatcher = conns.dispatcher = self._dispatch(start_ns)
        try:
            while True:
                if conns.stop.stopping:
                    self._cancel_arrived(dispatcher, start_ns)
                    break
                if dispatcher.arrival_head >= n and state.in_flight + state.reserved == 0 and not self._tasks:
                    break
                # Arrivals due with a slot free and no connection to send on or on its way: connect
                # for each (shared cap: the slot is taken with the claim).
                while (dispatcher.arrival_head < n and len(state.pool) == 0 and conns.warming == 0
                       and self._has_room()):
                    row = self._claim_miss(dispatcher)
                    if row < 0:
                        break
                    state.reserved += 1
                    self.pool_misses += 1
                    self._spawn(conns.send_one(state.body(row), row, start_ns + int(self.offsets[row]),
                                               reserved=True))
                conns.top_up(pool_target, self._spawn)
                dispatcher.dispatch_due()  # re-arms the timer for the next arrival
                self._wake = loop.create_future()
                dispatcher.wake_handled()
                await self._wait(self._wake)
        finally:
            conns.dispatcher = None
            for task in self._tasks:
                task.cancel()  # only pool top-ups and sends the stop cancelled are left here
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            conns.idle.extend(state.end_schedule())
            self.sent_by_core = (dispatcher.core_sends, dispatcher.lead_ns, dispatcher.lead_wait_ns)
        if self._crashed:
            raise self._crashed[0]


class SharedOpenLoop(OpenLoop):
    """The open loop under --workers' shared cap: every worker holds every arrival, and the cap and the
    next unsent arrival are the run's, in memory every worker shares (``header``, ``claimers``)."""

    def __init__(self, conns: Connections, offsets: np.ndarray, header: np.ndarray, claimers: np.ndarray,
                 claimer: int, workers: int) -> None:
        super().__init__(conns, offsets)
        self._shared = (header, claimers, claimer, workers)

    def _dispatch(self, start_ns: int) -> Dispatcher:
        plan = self.conns.plan
        lead_min_ns, lead_max_ns = arrival_lead_bounds(float(plan.request_rate or 0.0))
        return self.conns.state.share_arrivals(self.offsets, start_ns, plan.concurrency, *self._shared,
                                               lead_min_ns, lead_max_ns, self.wake, self._retry_stale)

    def _has_room(self) -> bool:
        return True  # the run's slot is taken with the claim

    def _claim_miss(self, dispatcher: Dispatcher) -> int:
        assert isinstance(dispatcher, SharedDispatcher)
        return dispatcher.claim_due_with_slot(now_ns())

    def _cancel_arrived(self, dispatcher: Dispatcher, start_ns: int) -> None:
        """The arrivals due by this worker's stop that no worker sent are claimed one by one from the
        run's counter (SharedDispatcher.claim_arrived), so that every stopping worker takes some and
        each is cancelled exactly once."""
        assert isinstance(dispatcher, SharedDispatcher)
        while (row := dispatcher.claim_arrived(self.conns.stop.at_ns)) >= 0:
            self.conns.cancel_waiting(row, start_ns + int(self.offsets[row]))

    async def _wait(self, wake: asyncio.Future[None]) -> None:
        # the last arrivals may go from other workers: nothing here is woken for them
        await asyncio.wait([wake], timeout=SHARED_POLL_S)


async def run_in_slots(count: int, slots: int, stopped: Callable[[], bool],
                       one: Callable[[int, int], Awaitable[None]]) -> None:
    """Closed loop over ``count`` units (sessions, agent trees): ``slots`` of them at once, each slot taking
    the next as ``one(unit, now_ns())`` when its last has ended, until none is left or ``stopped()``."""
    queue = iter(range(count))

    async def slot() -> None:
        for unit in queue:
            if stopped():
                return
            await one(unit, now_ns())

    await asyncio.gather(*(slot() for _ in range(min(slots, count))))


class Sessions:
    """Multi-turn sessions. Closed loop: each of ``concurrency`` slots runs sessions one after another,
    keeping its slot through the think times. Open loop: sessions arrive at the rate, each turn due its
    think time after the reply before it; at most ``concurrency`` requests are in flight (a turn waiting
    for one is late, and its latency counts from when it was due)."""

    def __init__(self, conns: Connections, bodies: list[Any], offsets: np.ndarray | None) -> None:
        """``bodies``: the list the RunState sends from: a turn built during the run is put in it."""
        assert conns.plan.sessions is not None
        self.conns = conns
        self.sessions = conns.plan.sessions
        self.bodies = bodies
        self.offsets = offsets
        self.at_once = 0  # open loop: the most sessions that ran at once
        self._stop = conns.stop.future()

    async def run(self, start_ns: int) -> None:
        conns, n = self.conns, len(self.sessions.first_rows)
        if self.offsets is None:
            await run_in_slots(n, conns.plan.concurrency, lambda: conns.stop.stopping,
                               lambda s, due: self._session(s, due, None))
            return
        limit = asyncio.Semaphore(conns.plan.concurrency)
        first_due = start_ns + self.offsets.astype(np.int64)
        self.at_once = await start_on_arrival(first_due, limit, self._stop,
                                              lambda s, due: self._session(s, due, limit, holds_slot=True))
        if conns.stop.stopping:  # sessions that arrived and never got a slot for their first turn
            for s, due in enumerate(first_due.tolist()):
                if due > conns.stop.at_ns:
                    break
                row = self.sessions.first_rows[s]
                if not conns.rows[row].any():
                    conns.cancel_waiting(row, due)

    async def _session(self, session: int, due: int, limit: asyncio.Semaphore | None,
                       holds_slot: bool = False) -> None:
        """One session's turns in order; it ends early when a turn fails (its history would be wrong).
        ``holds_slot``: its first turn's slot of ``limit`` is taken already (start_on_arrival)."""
        conns, sessions = self.conns, self.sessions
        first = sessions.first_rows[session]
        reply: str | None = None
        for row in range(first, first + sessions.turns[session]):
            due += int(sessions.think_ns[row])  # 0 for the first turn
            delay_s = (due - now_ns()) / 1e9
            if delay_s > 0:
                await asyncio.wait([self._stop], timeout=delay_s)
            if conns.stop.past_cap():
                if holds_slot and limit is not None:
                    limit.release()
                if limit is not None and due <= conns.stop.at_ns:
                    conns.cancel_waiting(row, due)  # it was due: the stop, not its think time, held it
                return
            body = sessions.body(row, reply)
            self.bodies[row] = body  # where a stale-connection retry finds it
            if limit is None:
                error = await conns.send_one(body, row, due)
            else:
                if not holds_slot:
                    await limit.acquire()
                    if conns.stop.stopping:  # the slot came after the stop
                        limit.release()
                        conns.cancel_waiting(row, due)
                        return
                holds_slot = False
                try:
                    error = await conns.send_one(body, row, due)
                finally:
                    limit.release()
            if error != ErrorClass.OK or conns.stop.stopping:
                return
            due = int(conns.rows[row, COL["end_ns"]]) or now_ns()
            if sessions.server_history:
                reply = decode_answer(conns.state.answers.pop(row, None))
