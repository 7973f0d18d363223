"""The agent trees' schedule (``--dataset-name weka``, planned by ``fastbench.load.agentic``): each call sent
once every call it depends on has ended and its gap has passed, over the run's Connections.

Closed loop: ``slots`` trees at once, each slot taking the next tree when its tree has drained. Open loop:
trees start at their arrival offsets, at most ``concurrency`` calls in flight (a call waiting for one is
late, and its latency counts from when it was due, as every open-loop figure does). A call that fails
ends its tree: the calls after it would carry a context the server never built. One task per call that
is due or waiting, none per row ahead of time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from fastbench._core import now_ns
from fastbench.load.connections import Connections
from fastbench.load.schedules import run_in_slots
from fastbench.results.records import COL, ErrorClass


class _TreeRun:
    """One tree while it runs: its calls in flight or waiting, and whether one failed."""

    __slots__ = ("done", "failed", "live")

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.done = done
        self.live = 0  # calls of the tree with a task
        self.failed = False


class AgentTrees:
    def __init__(self, conns: Connections, bodies: list[Any], offsets: np.ndarray | None) -> None:
        assert conns.plan.trees is not None
        self.conns = conns
        self.plan = conns.plan.trees
        self.bodies = bodies
        self.offsets = offsets
        self.at_once = 0  # the most trees that ran at once
        self._running = 0
        first, rows = self.plan.dependants()
        self._dependants_first, self._dependants = first.tolist(), rows.tolist()
        self._waiting_on = np.diff(self.plan.deps_first).tolist()  # per row: dependencies not yet ended
        self._latest_end = [0] * len(self._waiting_on)  # per row: the latest end of its dependencies so far
        self._gap = self.plan.gap_ns.tolist()
        self._limit: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # the calls' tasks: held here, as the loop holds them weakly
        self._loop = asyncio.get_running_loop()

    async def run(self, start_ns: int) -> None:
        conns, n = self.conns, len(self.plan.trees)
        if self.offsets is None:
            await run_in_slots(n, conns.plan.concurrency, conns.stop.past_cap, self._tree)
            return
        self._limit = asyncio.Semaphore(conns.plan.concurrency)
        started: list[asyncio.Task[None]] = []
        for tree, offset in enumerate(self.offsets.tolist()):
            due = start_ns + int(offset)
            await conns.stop.sleep_until(due)
            if conns.stop.past_cap():
                break
            started.append(self._loop.create_task(self._tree(tree, due)))
        await asyncio.gather(*started)

    async def _tree(self, tree: int, due: int) -> None:
        """Run one tree from ``due`` until it drains (or fails, or the run stops)."""
        first, end = int(self.plan.tree_first[tree]), int(self.plan.tree_first[tree + 1])
        run = _TreeRun(self._loop.create_future())
        self._running += 1
        self.at_once = max(self.at_once, self._running)
        try:
            for row in range(first, end):
                if self._waiting_on[row] == 0:
                    self._spawn(run, row, due + self._gap[row])
            if run.live:
                await run.done
        finally:
            self._running -= 1

    def _spawn(self, run: _TreeRun, row: int, due: int) -> None:
        run.live += 1
        task = self._loop.create_task(self._call(run, row, due))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, run: _TreeRun, row: int, due: int) -> None:
        try:
            if await self._send(run, row, due):
                end = int(self.conns.rows[row, COL["end_ns"]]) or now_ns()
                for k in range(self._dependants_first[row], self._dependants_first[row + 1]):
                    waiting = self._dependants[k]
                    self._latest_end[waiting] = max(self._latest_end[waiting], end)
                    self._waiting_on[waiting] -= 1
                    if self._waiting_on[waiting] == 0:
                        self._spawn(run, waiting, self._latest_end[waiting] + self._gap[waiting])
            else:
                run.failed = True
        finally:
            run.live -= 1
            if run.live == 0 and not run.done.done():
                run.done.set_result(None)

    async def _send(self, run: _TreeRun, row: int, due: int) -> bool:
        """Send ``row`` when due; whether it completed (and the run goes on)."""
        conns, limit = self.conns, self._limit
        await conns.stop.sleep_until(due)
        if run.failed:
            return False
        if conns.stop.past_cap():
            if limit is not None and due <= conns.stop.at_ns:
                conns.cancel_waiting(row, due)  # it was due: the stop, not its gap, held it
            return False
        if limit is None:
            error = await conns.send_one(self.bodies[row], row, due)
        else:
            await limit.acquire()
            try:
                if conns.stop.stopping:  # the slot came after the stop
                    conns.cancel_waiting(row, due)
                    return False
                error = await conns.send_one(self.bodies[row], row, due)
            finally:
                limit.release()
        return error == ErrorClass.OK and not conns.stop.stopping
