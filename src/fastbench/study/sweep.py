"""A sweep's plan and its execution: server variants x a benchmark grid x repeats, each cell one run
kept in a results store, found there again by its key so that a sweep run twice resumes.

The plan (:class:`Plan`) is made of launch groups: the cells one server serves, launched once (or
attached, or the built-in synthetic server that each run starts). A variant whose engine arguments
are linked to a grid value (``--max-num-seqs`` = the concurrency) has one group per linked value.

Execution (:func:`execute`) goes group by group: a group with nothing left to do is not launched;
each cell not already in the store is run; a cell whose run fails is recorded failed with its reason
and the rest go on; after each point (its repeats), the series' stop rules may skip the heavier loads
above it, each skipped cell recorded with the reason. What is recorded besides the runs themselves
(launch times, failures, skips) is appended to the sweep's journal, ``STORE/sweeps/NAME.jsonl``, a
line at a time: nothing written before is ever rewritten.

Running servers and runs is the caller's (:class:`Runner`): this room does not import the API.

One module of ~650 lines because the listed series, ``auto`` and ``find_max`` are three ways of
walking one series through the same state (what the store holds, the journal, a server launched
when a cell first needs it, then warmed up), which execute() keeps in one place.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import StoreError
from fastbench.study.grid import canonical
from fastbench.study.runfile import flat_complete  # the complete-cell rule every reader uses
from fastbench.study.sustained import STEADY_SHARE_KEY, SUSTAINED_KEY

__all__ = ("SUMMARY_FIGURES", "Cell", "Group", "Journal", "Launched", "Plan", "Point", "Runner", "StopRules",
           "execute", "summarize", "t_interval")

# The figures a summary gives a mean and a 95% interval for (flat keys of the stored runs).
SUMMARY_FIGURES: tuple[str, ...] = (
    "output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
    "median_itl_ms", "median_e2el_ms", "p99_e2el_ms", "median_decode_rate_tok_s", "request_goodput",
    "spec_decode_acceptance_length", SUSTAINED_KEY, STEADY_SHARE_KEY,  # steady-state, else the whole window's
)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run of the sweep: a variant, a grid point, a repeat."""

    variant: str
    values: Mapping[str, Any]  # the crossed options' values (and linked ones), as the file gives them
    repeat: int  # 0 .. repeats-1
    config: BenchConfig  # the run's options (a launched variant's: run against the group's launch, not its own)
    spec: str  # grid.spec_hash of the variant's server and the cell's options
    series: str  # the cells of one series share it: variant and values less the load axis
    load: float | None  # the value on the load axis (None: no load axis)

    @property
    def point(self) -> str:
        """The grid point (all repeats): variant and values."""
        return canonical({"variant": self.variant, **self.values})

    @property
    def key(self) -> str:
        """The cell's key, kept with its run (metadata ``sweep_cell``): point and repeat."""
        return canonical({"variant": self.variant, **self.values, "repeat": self.repeat})


@dataclasses.dataclass(frozen=True)
class Group:
    """The cells one server serves: a variant (with its linked values)."""

    variant: str
    kind: str  # "launch", "attach" or "synthetic"
    linked: Mapping[str, Any]  # the linked engine arguments' values
    cells: tuple[Cell, ...]
    where: str  # what the plan prints for the server: "vllm serve M ...", a URL, "built-in synthetic"


@dataclasses.dataclass(frozen=True)
class StopRules:
    """When a series stops raising its load (empty ``rules``: never)."""

    rules: tuple[str, ...] = ("slo", "saturation", "collapse")
    slo_attainment: float = 0.9  # the SLOs fail when fewer than this share of requests meets them all
    saturation: float = 0.05  # throughput grew less than this while median E2E latency grew more


@dataclasses.dataclass(frozen=True)
class Search:
    """A load axis found by measuring instead of listed (docs/sweep.md): ``auto`` measures each series'
    two ends and places ``points`` loads in all between them; ``find_max`` bisects between the two ends
    for the largest load that meets the SLOs, to within ``tolerance`` of it."""

    kind: str  # "auto" or "find_max"
    axis: str  # "concurrency" or "request_rate"
    points: int = 6
    tolerance: float = 0.1


@dataclasses.dataclass(frozen=True)
class Plan:
    name: str
    store: str
    groups: tuple[Group, ...]
    repeats: int
    stop: StopRules
    has_slos: bool
    warmup: int = 0  # requests sent to a launched or attached server before its first measured cell
    warmup_seed: int = 0  # the seed of those requests' prompts: one no cell has (study.cellstate)
    prompt_reuse: str = "fresh"  # "fresh": each point and repeat its own prompts; "shared": one seed for all
    sweep_seed: int = 0  # what each fresh cell's seed is derived from (study.cellstate.cell_seed)
    notes: tuple[str, ...] = ()  # what the plan says before it runs (prompts a dataset cannot vary, ...)
    search: Search | None = None
    # A series' cells (all repeats) at another load, given one of its cells: how a search makes the
    # loads it chooses (only a plan with a search has it).
    cells_at: Callable[[Cell, float], tuple[Cell, ...]] | None = None

    @property
    def cells(self) -> list[Cell]:
        return [cell for group in self.groups for cell in group.cells]


class Point(dict[str, Any]):
    """One grid point's outcome, as the summary shows it: ``variant``, ``values``, ``status``, ``reason``,
    ``runs`` (run ids), ``n``, ``prompt_seeds`` (each complete run's), ``prefix_cache_reset`` (how many
    of them found the cache emptied) and per figure ``mean`` / ``ci`` (95% half-width, None under 2 runs)."""


class Launched(Protocol):
    base_url: str | None
    load_s: float

    async def close(self) -> None: ...


class Runner(Protocol):
    """What executes a plan's servers and runs (the CLI's is fastbench.api's)."""

    async def launch(self, group: Group, stop: asyncio.Event) -> Launched:
        """Start the group's server and wait until it is ready (raise to fail the group)."""
        ...

    async def run(self, cell: Cell, server: Launched | None, stop: asyncio.Event) -> str:
        """Run the cell against the group's launched ``server`` (None: the config's own, attached or
        synthetic), recorded as a run of that launch, and keep it in the plan's store; return its run
        id. Raise to fail the cell."""
        ...

    async def warm_up(self, cell: Cell, base_url: str, requests: int, stop: asyncio.Event) -> None:
        """Send ``requests`` requests with the cell's options to ``base_url``, keeping nothing."""
        ...


class Journal:
    """``STORE/sweeps/NAME.jsonl``: one JSON line per event, appended with one write each."""

    def __init__(self, store: str | os.PathLike[str], name: str) -> None:
        self.path = Path(store) / "sweeps" / f"{name}.jsonl"

    def check(self) -> None:
        """Raise StoreError unless the journal can be appended to (before anything is launched)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab"):
                pass
        except OSError as exc:
            raise StoreError(f"cannot write the sweep's journal {self.path} ({exc.strerror or exc})") from None

    def add(self, event: str, **fields: Any) -> None:
        line = orjson.dumps({"event": event, "at": time.time(), **fields}) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # O_APPEND: one write lands whole after the others, even from two sweeps
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines:
            try:
                events.append(orjson.loads(line))
            except orjson.JSONDecodeError:  # a line cut short by a full disk: the others still count
                continue
        return events


# Student's t quantile for a two-sided 95% interval, by degrees of freedom (1-30), then 40, 60, 120.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
_T975_WIDE = ((40, 2.021), (60, 2.000), (120, 1.980))


def _t975(df: int) -> float:
    if df <= len(_T975):
        return _T975[df - 1]
    for limit, value in _T975_WIDE:
        if df <= limit:
            return value  # a little wide between table rows: the interval errs on the safe side
    return 1.960


def t_interval(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% t-interval (None with fewer than two values)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, _t975(n - 1) * math.sqrt(variance / n)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


Found = dict[tuple[str, str, int], tuple[str, dict[str, Any]]]


def complete_runs(store: Any, plan: Plan) -> Found:
    """(cell key, spec, seed) -> (run id, flat keys) of this sweep's complete runs in ``store`` (the
    newest where several are): every cell it has measured, the loads a search chose included. The
    seed that drew a run's prompts is part of what it measured: a cell stored with other prompts (a
    store from before fresh prompts, or ``prompt_reuse`` changed) is not this cell."""
    labels = {cell.config.label for cell in plan.cells if cell.config.label}
    runs = [run for label in sorted(labels) for run in store.query(label=label)]
    found: Found = {}
    data = store.flat([run.run_id for run in runs if run.meta.complete])
    for run in runs:  # oldest first: a newer run of the same cell replaces an older
        if run.run_id not in data:
            continue
        config, flat = data[run.run_id]
        key, spec, seed = flat.get("sweep_cell"), flat.get("sweep_spec"), config.get("seed")
        if flat.get("sweep") == plan.name and isinstance(key, str) and isinstance(spec, str) and \
                isinstance(seed, int):
            found[key, spec, seed] = (run.run_id, flat)
    return found


def _found_as(cell: Cell) -> tuple[str, str, int]:
    return cell.key, cell.spec, cell.config.seed


def stored_cells(store: Any, plan: Plan) -> dict[str, tuple[str, dict[str, Any]]]:
    """cell key -> (run id, flat keys) of the plan's cells already complete in ``store``."""
    found = complete_runs(store, plan)
    return {cell.key: found[_found_as(cell)] for cell in plan.cells if _found_as(cell) in found}


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
        values = [v for v in (_number(flat.get(name)) for flat in flats) if v is not None]
        out[name] = sum(values) / len(values) if values else None
    return out


Say = Callable[[str], None]


async def execute(plan: Plan, store: Any, runner: Runner, stop: asyncio.Event, say: Say = print) -> list[Point]:
    """Run what the plan has left to do (see the module docstring); return the summary's points.

    ``stop`` set (Ctrl-C): the cell running ends early and is kept marked interrupted (not complete:
    a later sweep runs it again); no further cell starts; the server is torn down.
    """
    journal = Journal(plan.store, plan.name)
    found = complete_runs(store, plan)
    done: set[str] = set()  # the keys of the cells complete in the store
    status: dict[str, tuple[str, str]] = {}  # cell key -> (status, reason) for cells not done
    flats: dict[str, dict[str, Any]] = {}
    run_ids: dict[str, str] = {}

    def find(cells: Sequence[Cell]) -> None:
        for cell in cells:
            if _found_as(cell) in found:
                done.add(cell.key)
                run_ids[cell.key], flats[cell.key] = found[_found_as(cell)]

    find(plan.cells)
    notes: dict[str, str] = {}  # point -> what a search found there
    cells: list[Cell] = list(plan.cells)  # and the loads a search chose, as it chooses them

    def record(cell: Cell, state: str, reason: str) -> None:
        status[cell.key] = (state, reason)
        journal.add(state, sweep=plan.name, cell=cell.key, spec=cell.spec, reason=reason)

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
                else:  # kept, but not complete: a later sweep runs the cell again
                    reason = "time cap before the first completion" if reason == "time cap" else reason
                    status[cell.key] = ("interrupted" if reason == "interrupted" else "incomplete", reason)
                    if reason != "interrupted":
                        journal.add("incomplete", sweep=plan.name, cell=cell.key, spec=cell.spec,
                                    reason=reason, run_id=run_id)
            point_flats = [flats[c.key] for c in point_cells if c.key in flats]
            if not point_flats or stop.is_set():  # interrupted: nothing is judged on a cut point
                return None
            means = _means(point_flats)
            means["collapsed"] = 1.0 if any(bool(flat.get("collapsed")) for flat in point_flats) else 0.0
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
                status[cell.key] = ("not run", "interrupted")
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


def summarize(plan: Plan, flats: Mapping[str, Mapping[str, Any]], status: Mapping[str, tuple[str, str]],
              run_ids: Mapping[str, str], *, cells: Sequence[Cell] | None = None,
              notes: Mapping[str, str] | None = None) -> list[Point]:
    """One point per variant and grid point (the plan's, or ``cells``: with the loads a search chose),
    in load order within each series: its status, runs, a search's note, and mean and 95% interval
    per figure."""
    points: dict[str, list[Cell]] = {}
    ordered = list(cells if cells is not None else plan.cells)
    if plan.search is not None:  # the loads a search chose, in their series, by load
        first: dict[str, int] = {}
        for i, cell in enumerate(ordered):
            first.setdefault(cell.series, i)
        ordered.sort(key=lambda c: (first[c.series], c.load or 0.0))
    for cell in ordered:
        points.setdefault(cell.point, []).append(cell)
    out = []
    for cells in points.values():
        point = Point(variant=cells[0].variant, values=dict(cells[0].values), load=cells[0].load)
        ok = [flats[c.key] for c in cells if c.key in flats]
        states = [status[c.key] for c in cells if c.key not in flats and c.key in status]
        point["runs"] = [run_ids[c.key] for c in cells if c.key in run_ids]
        point["note"] = (notes or {}).get(cells[0].point, "")
        point["n"] = len(ok)
        point["prompt_seeds"] = [flat.get("prompt_seed") for flat in ok]
        point["prefix_cache_reset"] = sum(flat.get("prefix_cache_reset") is True for flat in ok)
        if len(ok) == len(cells):
            point["status"], point["reason"] = "done", ""
        elif states:
            point["status"], point["reason"] = states[0]
        else:
            point["status"], point["reason"] = "to run", ""
        for name in SUMMARY_FIGURES:
            values = [v for v in (_number(flat.get(name)) for flat in ok) if v is not None]
            point[name] = t_interval(values) if values else (None, None)
        out.append(point)
    return out


def pending(plan: Plan, store: Any) -> tuple[list[Cell], dict[str, tuple[str, dict[str, Any]]]]:
    """The cells not yet complete in the store, and the complete ones found."""
    done = stored_cells(store, plan)
    return [cell for cell in plan.cells if cell.key not in done], done

