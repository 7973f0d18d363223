"""A sweep from the API layer: a plan (:class:`fastbench.study.sweepplan.Plan`: server variants x a
benchmark grid x repeats, each cell's BenchConfig built) run cell by cell into its results store, the
servers launched here and each cell measured by :func:`fastbench.api.runs.arun`. The command line
(``fastbench sweep FILE``) reads the file into a plan and calls :func:`asweep`; a Python harness may
do the same with ``fastbench.cli.sweepfile.plan_from_file`` or build its own plan.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from fastbench.api.live import LiveListener
from fastbench.api.runs import arun
from fastbench.exceptions import StoreError
from fastbench.results.result import Result
from fastbench.server import launch as launch_mod
from fastbench.server.engines import make_server
from fastbench.server.launch import LaunchedServer
from fastbench.study import store as run_store
from fastbench.study.sweep import execute
from fastbench.study.sweepplan import Cell, Group, Launched, Plan, Point

__all__ = ("SweepRunner", "SweepWatch", "asweep", "cell_figures", "sweep")


class LaunchedGroup:
    """A group's server, launched and ready, serving the group's cells."""

    def __init__(self, server: LaunchedServer, load_s: float) -> None:
        self.server = server
        self.base_url: str | None = server.base_url
        self.load_s = load_s

    async def close(self) -> None:
        await self.server.astop()


class SweepRunner:
    """What :func:`fastbench.study.sweep.execute` asks of the caller: servers through fastbench.server,
    runs through :func:`arun`."""

    def __init__(self, plan: Plan, *, on_live: Sequence[LiveListener] = (), watch: SweepWatch | None = None) -> None:
        self.plan = plan
        self.on_live = list(on_live)
        self.watch = watch

    async def launch(self, group: Group, stop: asyncio.Event) -> LaunchedGroup:
        config = group.cells[0].config
        assert config.launch is not None
        launch = config.launch
        if launch.log_path is None:  # one log per launch, beside the sweep's journal
            linked = "".join(f"-{arg.lstrip('-')}{value}" for arg, value in group.linked.items())
            logs = Path(self.plan.store) / "sweeps" / f"{self.plan.name}-logs"
            logs.mkdir(parents=True, exist_ok=True)
            launch = dataclasses.replace(launch, log_path=str(logs / f"{group.variant}{linked}.log"))
        server = make_server(launch, api_key=config.api_key, log_dir=launch_mod.log_dir_for(config),
                             headers=config.headers)
        started = time.monotonic()
        await server.astart(stop)
        return LaunchedGroup(server, server.load_time_s or time.monotonic() - started)

    async def run(self, cell: Cell, server: Launched | None, stop: asyncio.Event) -> str:
        """The cell's run; against the group's launched server, a run of that launch (arun's
        ``server``): its result and store folder say so, as a ``--launch`` run's do."""
        config = cell.config
        launched = server.server if isinstance(server, LaunchedGroup) else None
        if launched is not None:  # its launch as it ran: the log's path the sweep gave it
            config = dataclasses.replace(config, launch=launched.launch)
        if self.watch is not None:
            self.watch.cell_started(cell.key)
        try:
            result = await arun(config, stop=stop, server=launched, on_live=self.on_live)
        except BaseException as exc:
            if self.watch is not None:
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.watch.cell_finished(cell.key, "failed", why)
            raise
        if self.watch is not None:
            state = ("failed" if result.collapsed else "done" if result.stopped_reason in ("completed", "time cap")
                     else result.stopped_reason)  # a collapsed cell is no sample: failed, run again later
            self.watch.cell_finished(cell.key, state, cell_figures(result))
        if result.run_id is None:
            raise StoreError("the run was not stored")
        return result.run_id

    async def warm_up(self, cell: Cell, base_url: str, requests: int, stop: asyncio.Event) -> None:
        config = dataclasses.replace(
            cell.config, launch=None, base_url=base_url, num_prompts=requests, num_warmups=0, max_seconds=None,
            store=None, result_json=None, result_card=None, save_detailed=None, save_outputs=False, progress=False,
            label=None, metadata={})
        await arun(config, stop=stop)


class SweepWatch(Protocol):
    """What watches a sweep's cells (the CLI's SweepView): each cell's start and end, with its key figures."""

    def cell_started(self, key: str) -> None: ...

    def cell_finished(self, key: str, state: str, figures: str) -> None: ...


def cell_figures(result: Result) -> str:
    """A finished cell's key figures in one line: requests/s, output tok/s, TTFT and TPOT p50."""
    parts = [f"{result.throughput.request_throughput:,.2f} req/s", f"{result.throughput.output_throughput:,.0f} tok/s"]
    for name in ("ttft", "tpot"):
        figure = result.distributions.get(name)
        if figure is not None and figure.count:
            parts.append(f"{name.upper()} p50 {figure.median:,.1f} ms")
    return "   ".join(parts)


async def asweep(plan: Plan, *, stop: asyncio.Event | None = None,
                 say: Callable[[str], Any] = print, on_live: Sequence[LiveListener] = (),
                 watch: SweepWatch | None = None) -> list[Point]:
    """Run ``plan``'s cells not yet complete in its store, inside the running event loop, and return
    its points (each grid point's status and the means of its repeats). ``stop``: set it to end the
    running cell early (kept, marked interrupted, so that the sweep run again measures it anew) and
    start no other. ``say``: each line of progress. ``on_live``: each cell's live listeners (as
    :func:`arun`'s, each snapshot labelled with its cell); ``watch``: told each cell's start and end,
    and each cell skipped (by a stop rule, with its reason) or failed without a run."""

    def recorded(cell: Cell, state: str, reason: str) -> None:  # a stop rule's skip, a launch that failed
        if watch is not None:
            watch.cell_finished(cell.key, state, reason)

    with run_store.Store(plan.store) as store:
        return await execute(plan, store, SweepRunner(plan, on_live=on_live, watch=watch), stop or asyncio.Event(),
                             say=say, on_record=recorded)


def sweep(plan: Plan, *, stop: asyncio.Event | None = None, say: Callable[[str], Any] = print) -> list[Point]:
    """:func:`asweep` run to the end on a new uvloop."""
    import uvloop

    return uvloop.run(asweep(plan, stop=stop, say=say))
