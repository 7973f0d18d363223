"""A sweep's execution: :func:`execute` runs what a plan (``fastbench.study.sweepplan``) has left to do.

Execution goes group by group: a group with nothing left to do is not launched; each cell not already
in the store is run; a cell whose run fails is recorded failed with its reason and the rest go on;
after each point (its repeats), the series' stop rules may skip the heavier loads above it, each
skipped cell recorded with the reason in the sweep's journal. A series is walked one of three ways
through that same state (what the store holds, the journal, a server launched when a cell first needs
it, then warmed up): its listed loads in rising order, ``auto`` (the two ends measured, the loads
between placed from them) or ``find_max`` (a bisection for the largest load that meets the SLOs).

Running servers and runs is the caller's (:class:`~fastbench.study.sweepplan.Runner`): this room does
not import the API.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastbench.study.runfile import flat_complete, flat_failed, flat_why  # the complete-cell rule every reader uses
from fastbench.study.sustained import SUSTAINED_KEY
from fastbench.study.sweepplan import (
    SUMMARY_FIGURES,
    Cell,
    Group,
    Journal,
    Launched,
    Plan,
    Point,
    Runner,
    StopRules,
    complete_runs,
    found_key,
    number,
    summarize,
)

__all__ = ("auto_loads", "execute", "meets_slos")


def _stop_reason(rules: StopRules, has_slos: bool, below: Mapping[str, float | None] | None,
                 here: Mapping[str, float | None], collapsed: bool, load: float | None) -> str | None:
    """Why a series stops above this point, or None. ``here``/``below``: the figures' means at this
    load and the one below it in the series."""
    if "collapse" in rules.rules and collapsed:
        return f"the server collapsed at load {load:g}" if load is not None else "the server collapsed"
    throughput, goodput = here.get("request_throughput"), here.get("request_goodput")
    if "slo" in rules.rules and has_slos and throughput and goodput is not None:
        attained = goodput / throughput
        if attained < rules.slo_attainment:
            return (f"SLOs failed at load {load:g}: {attained:.0%} of requests met them "
                    f"(< {rules.slo_attainment:.0%})")
    if "saturation" in rules.rules and below is not None:
        t0, t1 = (m.get(SUSTAINED_KEY, m.get("output_throughput")) for m in (below, here))
        l0, l1 = below.get("median_e2el_ms"), here.get("median_e2el_ms")
        if t0 and t1 is not None and l0 and l1 is not None:
            gain, growth = t1 / t0 - 1, l1 / l0 - 1
            if gain < rules.saturation and growth > rules.saturation:
                return (f"saturated at load {load:g}: throughput {gain:+.0%} while median E2E latency "
                        f"{growth:+.0%}")
    return None


def _means(flats: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name in SUMMARY_FIGURES:
        values = [v for v in (number(flat.get(name)) for flat in flats) if v is not None]
        out[name] = sum(values) / len(values) if values else None
    return out


Say = Callable[[str], None]


async def execute(plan: Plan, store: Any, runner: Runner, stop: asyncio.Event, say: Say = print,
                  on_record: Callable[[Cell, str, str], None] | None = None) -> list[Point]:
    """Run what the plan has left to do (see the module docstring); return the summary's points.

    ``stop`` set (Ctrl-C): the cell running ends early and is kept marked interrupted (not complete:
    a later sweep runs it again); no further cell starts; the server is torn down. ``on_record``: told
    each cell recorded without a complete run, as the journal is ("skipped" or "failed", the reason).
    """
    journal = Journal(plan.store, plan.name)
    found = complete_runs(store, plan)
    done: set[str] = set()  # the keys of the cells complete in the store
    collapsed: set[str] = set()  # the keys of the cells whose run found no working server (collapsed, exited)
    status: dict[str, tuple[str, str]] = {}  # cell key -> (status, reason) for cells not done
    flats: dict[str, dict[str, Any]] = {}
    run_ids: dict[str, str] = {}

    def find(cells: Sequence[Cell]) -> None:
        for cell in cells:
            if found_key(cell) in found:
                done.add(cell.key)
                run_ids[cell.key], flats[cell.key] = found[found_key(cell)]

    find(plan.cells)
    notes: dict[str, str] = {}  # point -> what a search found there
    cells: list[Cell] = list(plan.cells)  # and the loads a search chose, as it chooses them

    def record(cell: Cell, state: str, reason: str, run_id: str | None = None) -> None:
        status[cell.key] = (state, reason)
        journal.add(state, sweep=plan.name, cell=cell.key, spec=cell.spec, reason=reason,
                    **({"run_id": run_id} if run_id is not None else {}))
        if on_record is not None:
            on_record(cell, state, reason)

    for group in plan.groups:
        if stop.is_set():
            break
        todo = [c for c in group.cells if c.key not in done]
        if not todo and plan.search is None:
            continue
        launched: Launched | None = None
        warm = group.kind == "synthetic" or plan.warmup == 0  # each synthetic run starts its own server

        async def measure(point_cells: Sequence[Cell], group: Group = group) -> dict[str, float | None] | None:
            """Run the point's cells not yet done (launching the group's server first if need be);
            return its means over the complete ones (None: none complete)."""
            nonlocal launched, warm
            find(point_cells)  # a search's loads: perhaps measured by an earlier sweep
            for cell in point_cells:
                if cell.key in done or stop.is_set():
                    continue
                if group.kind == "launch" and launched is None:  # only once a cell needs it
                    launched = await _launch(plan, group, runner, stop, journal, say)
                base_url = launched.base_url if launched else _attached_url(cell)
                if not warm and base_url is not None:
                    warm = True
                    await _warm_up(plan, group, cell, base_url, runner, stop, journal, say)
                    if stop.is_set():
                        break
                say(f"  cell {cell.key}")
                try:
                    run_id = await runner.run(cell, launched, stop)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # recorded; the other cells go on
                    record(cell, "failed", _one_line(exc))
                    say(f"    failed: {_one_line(exc)}")
                    continue
                run_ids[cell.key] = run_id
                (_, flat), = store.flat([run_id]).values()
                reason = str(flat.get("stopped_reason") or "")
                if flat_complete(flat):
                    flats[cell.key] = flat
                elif flat_failed(flat):  # kept as a failed cell: never averaged, run again by a later sweep
                    collapsed.add(cell.key)
                    record(cell, "failed", flat_why(flat), run_id)
                    say(f"    failed: {flat_why(flat)}")
                else:  # kept, but not complete: a later sweep runs the cell again
                    reason = "time cap before the first completion" if reason == "time cap" else reason
                    status[cell.key] = (("interrupted", "stopped mid-cell; a later sweep runs it again")
                                        if reason == "interrupted" else ("incomplete", reason))
                    if reason != "interrupted":
                        journal.add("incomplete", sweep=plan.name, cell=cell.key, spec=cell.spec,
                                    reason=reason, run_id=run_id)
            point_flats = [flats[c.key] for c in point_cells if c.key in flats]
            if stop.is_set():  # interrupted: nothing is judged on a cut point
                return None
            broke = any(c.key in collapsed for c in point_cells)
            if not point_flats and not broke:
                return None
            means = _means(point_flats)  # the complete repeats only: a collapsed one is no sample
            means["collapsed"] = 1.0 if broke else 0.0
            return means

        def skip(point_cells: Sequence[Cell], reason: str) -> None:
            for cell in point_cells:
                if cell.key not in done and cell.key not in status:
                    record(cell, "skipped", reason)

        try:
            for series in _series(group.cells):
                if stop.is_set():
                    break
                if plan.search is None:
                    await _listed_series(plan, series, measure, skip, say)
                elif plan.search.kind == "auto":
                    await _auto_series(plan, series, measure, skip, cells, say)
                else:
                    await _find_max_series(plan, series, measure, skip, cells, notes, journal, say)
        except _LaunchFailed as exc:  # a launch that fails fails its cells; the other variants go on
            for cell in group.cells:
                if cell.key not in done and cell.key not in status:
                    record(cell, "failed", str(exc))
        finally:
            if launched is not None:
                await launched.close()
    if stop.is_set():
        for cell in cells:
            if cell.key not in flats and cell.key not in status:
                status[cell.key] = ("not run", "the sweep was stopped before it")
    return summarize(plan, flats, status, run_ids, cells=cells, notes=notes)


class _LaunchFailed(Exception):
    """A group's server did not start: its cells fail with this reason."""


Measure = Callable[[Sequence[Cell]], Awaitable["dict[str, float | None] | None"]]
Skip = Callable[[Sequence[Cell], str], None]


def _series(cells: Sequence[Cell]) -> list[list[list[Cell]]]:
    """The cells as series (in plan order), each a list of points (their repeats), lightest first."""
    series: dict[str, dict[str, list[Cell]]] = {}
    for cell in cells:
        series.setdefault(cell.series, {}).setdefault(cell.point, []).append(cell)
    return [list(points.values()) for points in series.values()]


async def _listed_series(plan: Plan, points: Sequence[Sequence[Cell]], measure: Measure, skip: Skip,
                         say: Say) -> None:
    """A listed load axis: each point in rising order, until a stop rule stops the series."""
    below: dict[str, float | None] | None = None
    stopped: str | None = None
    for point_cells in points:
        if stopped is not None:
            skip(point_cells, stopped)
            continue
        here = await measure(point_cells)
        if here is None or point_cells[0].load is None:
            continue
        stopped = _stop_reason(plan.stop, plan.has_slos, below, here, bool(here["collapsed"]), point_cells[0].load)
        below = here
        if stopped is not None:
            say(f"  series {point_cells[0].series}: stops: {stopped}")


def auto_loads(low: Mapping[str, float | None], high: Mapping[str, float | None], top: int, points: int) -> list[int]:
    """The concurrencies an ``auto`` series measures between 1 and ``top``, from the figures measured
    at both (docs/sweep.md): the knee is where concurrency 1's request rate, scaled linearly, would
    reach the top's throughput (``X_top / X_1``); the useful range ends at twice it (or the top), and
    ``points - 2`` loads are placed geometrically over it, rounded and without repeats."""
    x1, xh = low.get("request_throughput"), high.get("request_throughput")
    if not x1 or not xh or points <= 2:
        return []
    knee = xh / x1
    end = min(float(top), max(2.0, 2 * knee))
    between = points - 2 if end < top else points - 1  # an end below the top is itself measured
    loads = {round(end ** (i / between)) for i in range(1, points - 1)}
    return sorted(load for load in loads if 1 < load < top)


async def _auto_series(plan: Plan, points: Sequence[Sequence[Cell]], measure: Measure, skip: Skip,
                       cells: list[Cell], say: Say) -> None:
    assert plan.search is not None and plan.cells_at is not None
    low_cells, high_cells = points[0], points[-1]
    low = await measure(low_cells)
    high = await measure(high_cells)
    if low is None or high is None:
        return
    top = int(high_cells[0].load or 1)
    loads = auto_loads(low, high, top, plan.search.points)
    say(f"  series {low_cells[0].series}: auto range: measured 1 and {top}; "
        f"between: {', '.join(map(str, loads)) or 'none'}")
    below: dict[str, float | None] | None = low
    stopped: str | None = None
    for load in loads:
        point_cells = plan.cells_at(low_cells[0], load)
        cells.extend(point_cells)
        if stopped is not None:
            skip(point_cells, stopped)
            continue
        here = await measure(point_cells)
        if here is None:
            continue
        stopped = _stop_reason(plan.stop, plan.has_slos, below, here, bool(here["collapsed"]), float(load))
        below = here
        if stopped is not None:
            say(f"  series {low_cells[0].series}: stops: {stopped}")


def meets_slos(means: Mapping[str, float | None], attainment: float) -> bool:
    """A point meets its SLOs: it did not collapse, and at least ``attainment`` of its requests met them all."""
    throughput, goodput = means.get("request_throughput"), means.get("request_goodput")
    return not means.get("collapsed") and bool(throughput) and goodput is not None and \
        goodput / throughput >= attainment  # type: ignore[operator]


def _midpoint(low: float, high: float, whole: bool, tolerance: float) -> float | None:
    """The next load a bisection measures (geometric: the loads span decades), or None once the
    bracket is as narrow as it gets."""
    if high <= low * (1 + tolerance):
        return None
    mid = math.sqrt(low * high)
    if whole:
        mid = float(round(mid))
        if mid <= low or mid >= high:
            return None
    return mid


async def _find_max_series(plan: Plan, points: Sequence[Sequence[Cell]], measure: Measure, skip: Skip,
                           cells: list[Cell], notes: dict[str, str], journal: Journal, say: Say) -> None:
    assert plan.search is not None and plan.cells_at is not None
    attainment = plan.stop.slo_attainment
    low_cells, high_cells = points[0], points[-1]
    series = low_cells[0].series
    low = await measure(low_cells)
    if low is None:
        return
    if not meets_slos(low, attainment):
        reason = f"even the lowest load {low_cells[0].load:g} fails the SLOs"
        skip(high_cells, reason)
        say(f"  series {series}: {reason}")
        journal.add("found_max", sweep=plan.name, series=series, axis=plan.search.axis, value=None, reason=reason)
        return
    best, best_means = low_cells, low
    failing = high_cells
    high = await measure(high_cells)
    if high is None:
        return
    if meets_slos(high, attainment):
        best, best_means = high_cells, high
    else:
        whole = plan.search.axis == "concurrency"
        while True:
            mid = _midpoint(float(best[0].load or 0), float(failing[0].load or 0), whole, plan.search.tolerance)
            if mid is None:
                break
            mid_cells = plan.cells_at(low_cells[0], mid)
            cells.extend(mid_cells)
            here = await measure(mid_cells)
            if here is None:
                return  # interrupted or failed: the search cannot go on (a later sweep resumes it)
            if meets_slos(here, attainment):
                best, best_means = mid_cells, here
            else:
                failing = mid_cells
    value = best[0].load
    share = (best_means["request_goodput"] or 0) / (best_means["request_throughput"] or 1)
    top = failing is high_cells and best is high_cells
    note = (f"largest {plan.search.axis} meeting the SLOs" + (" (the bracket's top: higher may too)" if top else
            f" ({failing[0].load:g} does not)"))
    notes[best[0].point] = note
    say(f"  series {series}: {note}: {value:g}, {share:.0%} of requests met them (cell {best[0].point})")
    journal.add("found_max", sweep=plan.name, series=series, axis=plan.search.axis, value=value,
                cell=best[0].point, attainment=share, failing=None if top else failing[0].load)


async def _launch(plan: Plan, group: Group, runner: Runner, stop: asyncio.Event, journal: Journal,
                  say: Say) -> Launched:
    """The group's server, launched and ready; _LaunchFailed (journaled) when it is not."""
    say(f"launching {group.variant}{_linked(group)}: {group.where}")
    try:
        launched = await runner.launch(group, stop)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        reason = f"launch failed: {_one_line(exc)}"
        journal.add("launch_failed", sweep=plan.name, variant=group.variant, linked=dict(group.linked), reason=reason)
        say(f"  {reason}")
        raise _LaunchFailed(reason) from None
    journal.add("launched", sweep=plan.name, variant=group.variant, linked=dict(group.linked),
                load_s=launched.load_s)
    say(f"  ready in {launched.load_s:.1f} s")
    return launched


def _attached_url(cell: Cell) -> str | None:
    return cell.config.base_url if cell.config.launch is None else None


async def _warm_up(plan: Plan, group: Group, cell: Cell, base_url: str, runner: Runner, stop: asyncio.Event,
                   journal: Journal, say: Say) -> None:
    """A server's first requests pay for what a cold server does once (allocations, compiled graphs,
    caches): ``warmup`` requests with the first cell's options, kept nowhere, before any measured cell;
    their prompts drawn from the plan's warm-up seed, which no cell has (a cell's prompts found in the
    cache would be the warm-up's). No reset before them: the cell's own comes after."""
    started = time.monotonic()
    config = dataclasses.replace(cell.config, seed=plan.warmup_seed, reset_prefix_cache=False)
    try:
        await runner.warm_up(dataclasses.replace(cell, config=config), base_url, plan.warmup, stop)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the cells that follow will say what is wrong with the server
        say(f"  warm-up failed: {_one_line(exc)}")
        journal.add("warmup_failed", sweep=plan.name, variant=group.variant, reason=_one_line(exc))
        return
    seconds = time.monotonic() - started
    say(f"  warmed up: {plan.warmup} requests in {seconds:.1f} s")
    journal.add("warmed_up", sweep=plan.name, variant=group.variant, linked=dict(group.linked),
                requests=plan.warmup, seconds=seconds)


def _linked(group: Group) -> str:
    return "".join(f" {arg}={value}" for arg, value in group.linked.items())


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
