"""A sweep's plan and what it keeps: the cells (server variants x a benchmark grid x repeats), their launch
groups, stop rules and search; what the caller runs them with (:class:`Runner`); the journal; the complete
runs a store already holds of it; and the summary's points.

The plan (:class:`Plan`) is made of launch groups: the cells one server serves, launched once (or
attached, or the built-in synthetic server that each run starts). A variant whose engine arguments
are linked to a grid value (``--max-num-seqs`` = the concurrency) has one group per linked value.
Each cell is one run kept in a results store, found there again by its key, spec and prompt seed, so
that a sweep run twice resumes. What is recorded besides the runs themselves (launch times, failures,
skips) is appended to the sweep's journal, ``STORE/sweeps/NAME.jsonl``, a line at a time: nothing
written before is ever rewritten. :func:`fastbench.study.sweep.execute` runs a plan.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import StoreError
from fastbench.study.grid import canonical
from fastbench.study.sustained import STEADY_SHARE_KEY, SUSTAINED_KEY

__all__ = ("SUMMARY_FIGURES", "Cell", "Group", "Journal", "Launched", "Plan", "Point", "Runner", "Search",
           "StopRules", "complete_runs", "found_key", "number", "pending", "stored_cells", "summarize",
           "t_interval")


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
    of them found the cache emptied), ``prefix_cache_warned`` (how many were warned that their prompts came
    from the server's cache) with ``prefix_cache_warning`` (the first one's warning, else None) and per
    figure ``mean`` / ``ci`` (95% half-width, None under 2 runs)."""


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


def number(value: Any) -> float | None:
    """A stored figure as a float, or None where it is missing, not a number, or not finite."""
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


def found_key(cell: Cell) -> tuple[str, str, int]:
    return cell.key, cell.spec, cell.config.seed


def stored_cells(store: Any, plan: Plan) -> dict[str, tuple[str, dict[str, Any]]]:
    """cell key -> (run id, flat keys) of the plan's cells already complete in ``store``."""
    found = complete_runs(store, plan)
    return {cell.key: found[found_key(cell)] for cell in plan.cells if found_key(cell) in found}


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
        warnings = [str(flat["prefix_cache_warning"]) for flat in ok if flat.get("prefix_cache_warning")]
        point["prefix_cache_warned"] = len(warnings)
        point["prefix_cache_warning"] = warnings[0] if warnings else None
        if len(ok) == len(cells):
            point["status"], point["reason"] = "done", ""
        elif states:
            point["status"], point["reason"] = states[0]
        else:
            point["status"], point["reason"] = "to run", ""
        for name in SUMMARY_FIGURES:
            values = [v for v in (number(flat.get(name)) for flat in ok) if v is not None]
            point[name] = t_interval(values) if values else (None, None)
        out.append(point)
    return out


def pending(plan: Plan, store: Any) -> tuple[list[Cell], dict[str, tuple[str, dict[str, Any]]]]:
    """The cells not yet complete in the store, and the complete ones found."""
    done = stored_cells(store, plan)
    return [cell for cell in plan.cells if cell.key not in done], done
