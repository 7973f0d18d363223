"""The one place a load generator is chosen: one process (:class:`~fastbench.load.driver.LoadGenerator`),
worker processes on this machine (:class:`~fastbench.load.workers.WorkerPool`), or Ray actors over a
cluster (:class:`~fastbench.load.raypool.RayPool`, imported only when asked for). A run, a client
validation and each cell of a sweep come through here, so the three always mean the same by
``workers``, ``ray`` and ``workers_per_node``. Each is a :class:`~fastbench.load.drive.Generator`, run
by :func:`~fastbench.load.drive.drive`.
"""

from __future__ import annotations

from typing import Any

from fastbench.load.drive import Generator
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.workers import WorkerPool, choose_workers, usable_cores

__all__ = ("make_generator",)


def make_generator(target: Target, plan: LoadPlan, api_key: str | None = None, *, workers: int | str | None = None,
                   ray: str | None = None, workers_per_node: int | None = None, server_here: bool = False,
                   concurrency_cap: int | None = None) -> tuple[Generator, dict[str, Any] | None]:
    """The generator for ``plan``, and, where ``workers="auto"`` chose one process, the result's
    ``fastbench.workers`` section saying why (its ``chosen`` record, worded by
    :mod:`fastbench.results.workersection`).

    :param workers: None or 1: one process; N: N worker processes; "auto": one per so many streams, as
        the cores allow (:func:`~fastbench.load.workers.choose_workers`). With ``ray``: None spreads one
        actor on each node (or ``workers_per_node``), N that many actors over the nodes.
    :param ray: "auto" or a Ray cluster's address: the workers are actors on its nodes.
    :param server_here: the server runs on this machine too (auto leaves it a core).
    :param concurrency_cap: the cap on streams the run was given (None: an uncapped open loop, whose
        streams auto counts by its requests).
    """
    if ray is not None:  # Ray is imported by the pool itself, only here
        from fastbench.load.raypool import RayPool

        total = workers if isinstance(workers, int) else None
        return RayPool(target, plan, api_key, address=ray, workers=total, workers_per_node=workers_per_node), None
    if workers == "auto":
        count, why = choose_workers(concurrency_cap, len(plan.bodies), usable_cores(), server_here)
        if plan.sessions is not None:  # their turns are built during the run, in one process
            count, why = 1, {"how": "sessions"}
        if count == 1:
            return LoadGenerator(target, plan, api_key), {"count": 1, "requested": "auto", "chosen": why}
        return WorkerPool(target, plan, api_key, workers=count, chosen=why), None
    if workers is None or workers == 1:
        return LoadGenerator(target, plan, api_key), None
    if not isinstance(workers, int):
        raise ValueError(f"workers must be a whole number, 'auto' or None, got {workers!r}")
    return WorkerPool(target, plan, api_key, workers=workers), None
