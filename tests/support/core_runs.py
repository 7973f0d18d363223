"""One run of the load generator against a scripted server (support.scripted), on the event loop a test
names, and a column of its request table: what the core's tests of connections and dispatch share."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import uvloop

from support.scripted import ScriptedServer
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.records import COL, RunData

# The core runs on either loop (uvloop's and asyncio's own): tests/core/conftest.py's loop_factory is each.
LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


def drive(loop_factory: Any, script: Any, n: int = 1, concurrency: int = 1, close_after_each: bool = False,
          base_url: str | None = None, api_key: str | None = None, **plan: Any) -> tuple[RunData, ScriptedServer]:
    async def main() -> tuple[RunData, ScriptedServer]:
        async with ScriptedServer(script, close_after_each) as server:
            target = Target.parse(base_url or server.base_url, "/v1/completions")
            load = LoadPlan(bodies=[b'{"n":%d}' % i for i in range(n)], warmup_bodies=plan.pop("warmup_bodies", []),
                            concurrency=concurrency, **plan)
            data = await LoadGenerator(target, load, api_key).run()
            return data, server

    loop = loop_factory()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def col(data: RunData, name: str) -> np.ndarray:
    return data.rows[:, COL[name]]
