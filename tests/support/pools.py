"""A --workers pool run with a fault of the test's own: an action (kill a worker, freeze one, stop) once
the workers have completed enough requests, and a guard that kills every worker and fails the test when
the run hangs. Shared by the tests of the pool and of its shared concurrency cap."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from fastbench.load.workers import WorkerPool


async def run_and_then(pool: WorkerPool, action: object, after_completed: int) -> object:
    """Run ``pool``; once its workers have completed ``after_completed`` requests, ``action(pool)``."""
    task = asyncio.ensure_future(pool.run())
    while not task.done():
        await asyncio.sleep(0.02)
        workers = pool._workers
        if pool._start_ns and sum(w.progress.get("completed", 0) for w in workers) >= after_completed:
            action(pool)  # type: ignore[operator]
            break
    return await task


def guarded(coro: object, pool: WorkerPool, guard_s: float = 120.0) -> object:
    """Run ``coro``; past ``guard_s`` (a hang, not a measurement) kill the workers and fail."""
    async def main() -> object:
        try:
            return await asyncio.wait_for(coro, guard_s)  # type: ignore[arg-type]
        except asyncio.TimeoutError:
            pool._kill_all()
            pytest.fail(f"the run did not end within {guard_s} s")

    return uvloop.run(main())
