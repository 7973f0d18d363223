"""The one drive step: a run, a client validation (streamed or whole answers) and a worker process each
hand their generator to :func:`drive`; and :class:`Generator`, what every load generator offers (one
process's :class:`~fastbench.load.driver.LoadGenerator`, a :class:`~fastbench.load.workers.WorkerPool`, a
:class:`~fastbench.load.raypool.RayPool`), so that whoever drives or watches one never asks which it is."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from fastbench.results.records import RunData

__all__ = ("Generator", "drive")


class Generator(Protocol):
    """What every load generator offers, whichever runs the load (one process, worker processes, Ray
    actors): the run, a stop, and what a live look (``api.live.LiveSampler``) reads while it runs."""

    async def run(self) -> RunData:
        """Run the plan to its end (or its stop) and return what was measured."""
        ...

    def stop(self, reason: str) -> None:
        """End the run early for ``reason``; what was measured is kept."""
        ...

    def running_tables(self, started: int) -> list[tuple[np.ndarray, int]]:
        """The request tables readable while the run goes on, each with how many of its rows were
        claimed so far (``started``: the requests the progress counts as sent)."""
        ...

    def copy_chunk_counts(self, into: Mapping[str, np.ndarray]) -> bool:
        """Copy the running "itl" and "skew" chunk histograms (HDR counts) into ``into``'s arrays;
        False while none are known yet."""
        ...


async def drive(generator: Generator, *, watch: contextlib.AbstractAsyncContextManager[object] | None = None,
                alongside: Sequence[Coroutine[Any, Any, None]] = ()) -> RunData:
    """Run ``generator`` to its end: the one drive step of a run, a validation and a worker.

    :param watch: entered before the run and left after it, however it ends (a run's window monitor).
    :param alongside: tasks that live as long as the run (a worker's inbox and heartbeat), cancelled after it.
    """
    async with contextlib.AsyncExitStack() as around:
        if watch is not None:
            await around.enter_async_context(watch)
        loop = asyncio.get_running_loop()
        for task in [loop.create_task(work) for work in alongside]:
            around.callback(task.cancel)
        return await generator.run()
