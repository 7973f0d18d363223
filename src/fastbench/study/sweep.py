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

__all__ = ("SUMMARY_FIGURES", "Cell", "Group", "Journal", "Plan", "Point", "Runner", "StopRules",
           "execute", "summarize", "t_interval")

# The figures a summary gives a mean and a 95% interval for (flat keys of the stored runs).
SUMMARY_FIGURES: tuple[str, ...] = (
    "output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
    "median_itl_ms", "median_e2el_ms", "p99_e2el_ms", "median_decode_rate_tok_s", "request_goodput",
    "spec_decode_acceptance_length",
)
DONE_REASONS = ("completed", "time cap")  # a stored run that ended so is a complete cell


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run of the sweep: a variant, a grid point, a repeat."""

    variant: str
    values: Mapping[str, Any]  # the crossed options' values (and linked ones), as the file gives them
    repeat: int  # 0 .. repeats-1
    config: BenchConfig  # the run's options, its server still to be filled in for a launched variant
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
class Plan:
    name: str
    store: str
    groups: tuple[Group, ...]
    repeats: int
    stop: StopRules
    has_slos: bool

    @property
    def cells(self) -> list[Cell]:
        return [cell for group in self.groups for cell in group.cells]


class Point(dict[str, Any]):
    """One grid point's outcome, as the summary shows it: ``variant``, ``values``, ``status``, ``reason``,
    ``runs`` (run ids), ``n`` and per figure ``mean`` / ``ci`` (95% half-width, None under 2 runs)."""


class Launched(Protocol):
    base_url: str | None
    load_s: float

    async def close(self) -> None: ...


class Runner(Protocol):
    """What executes a plan's servers and runs (the CLI's is fastbench.api's)."""

    async def launch(self, group: Group, stop: asyncio.Event) -> Launched:
        """Start the group's server and wait until it is ready (raise to fail the group)."""
        ...

    async def run(self, cell: Cell, base_url: str | None, stop: asyncio.Event) -> str:
        """Run the cell against ``base_url`` (None: the config's own server) and keep it in the plan's
        store; return its run id. Raise to fail the cell."""
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


def stored_cells(store: Any, plan: Plan) -> dict[str, tuple[str, dict[str, Any]]]:
    """cell key -> (run id, flat keys) of the complete runs of this sweep already in ``store`` whose
    spec matches the plan's cell (the newest where several do)."""
    specs = {cell.key: cell.spec for cell in plan.cells}
    labels = {cell.config.label for cell in plan.cells if cell.config.label}
    runs = [run for label in sorted(labels) for run in store.query(label=label)]
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    data = store.flat([run.run_id for run in runs if run.meta.stopped_reason in DONE_REASONS])
    for run in runs:  # oldest first: a newer run of the same cell replaces an older
        if run.run_id not in data:
            continue
        flat = data[run.run_id][1]
        key = flat.get("sweep_cell")
        if flat.get("sweep") == plan.name and isinstance(key, str) and specs.get(key) == flat.get("sweep_spec"):
            found[key] = (run.run_id, flat)
    return found


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
        t0, t1 = below.get("output_throughput"), here.get("output_throughput")
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
    done = stored_cells(store, plan)
    status: dict[str, tuple[str, str]] = {}  # cell key -> (status, reason) for cells not done
    flats: dict[str, dict[str, Any]] = {key: flat for key, (_, flat) in done.items()}
    run_ids: dict[str, str] = {key: run_id for key, (run_id, _) in done.items()}
    stopped: dict[str, str] = {}  # series -> why it stopped
    below: dict[str, dict[str, float | None]] = {}  # series -> the last point's means

    def record(cell: Cell, state: str, reason: str) -> None:
        status[cell.key] = (state, reason)
        journal.add(state, sweep=plan.name, cell=cell.key, spec=cell.spec, reason=reason)

    def judge(point_cells: Sequence[Cell]) -> None:
        cell = point_cells[0]
        point_flats = [flats[c.key] for c in point_cells if c.key in flats]
        if not point_flats or cell.load is None:
            return
        here = _means(point_flats)
        collapsed = any(bool(flat.get("collapsed")) for flat in point_flats)
        reason = _stop_reason(plan.stop, plan.has_slos, below.get(cell.series), here, collapsed, cell.load)
        below[cell.series] = here
        if reason is not None:
            stopped[cell.series] = reason
            say(f"  series {cell.series}: stops: {reason}")

    for group in plan.groups:
        if stop.is_set():
            break
        points: dict[str, list[Cell]] = {}
        for cell in group.cells:
            points.setdefault(cell.point, []).append(cell)
        todo = [c for c in group.cells if c.key not in done]
        launched: Launched | None = None
        if todo and not all(c.series in stopped for c in todo):
            if group.kind == "launch":
                say(f"launching {group.variant}{_linked(group)}: {group.where}")
                try:
                    launched = await runner.launch(group, stop)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a launch that fails fails its cells; the other variants go on
                    reason = f"launch failed: {_one_line(exc)}"
                    journal.add("launch_failed", sweep=plan.name, variant=group.variant,
                                linked=dict(group.linked), reason=reason)
                    say(f"  {reason}")
                    for cell in todo:
                        record(cell, "failed", reason)
                    continue
                journal.add("launched", sweep=plan.name, variant=group.variant, linked=dict(group.linked),
                            load_s=launched.load_s)
                say(f"  ready in {launched.load_s:.1f} s")
        try:
            for point_cells in points.values():
                for cell in point_cells:
                    if cell.key in done:
                        continue
                    if cell.series in stopped:
                        record(cell, "skipped", stopped[cell.series])
                        continue
                    if stop.is_set():
                        break
                    say(f"  cell {cell.key}")
                    try:
                        run_id = await runner.run(cell, launched.base_url if launched else None, stop)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # recorded; the other cells go on
                        record(cell, "failed", _one_line(exc))
                        say(f"    failed: {_one_line(exc)}")
                        continue
                    run_ids[cell.key] = run_id
                    (_, flat), = store.flat([run_id]).values()
                    reason = str(flat.get("stopped_reason") or "")
                    if reason in DONE_REASONS:
                        flats[cell.key] = flat
                    else:  # kept, but not complete: a later sweep runs the cell again
                        status[cell.key] = ("interrupted" if reason == "interrupted" else "incomplete", reason)
                        if reason != "interrupted":
                            journal.add("incomplete", sweep=plan.name, cell=cell.key, spec=cell.spec,
                                        reason=reason, run_id=run_id)
                if stop.is_set():
                    break
                judge(point_cells)
        finally:
            if launched is not None:
                await launched.close()
    if stop.is_set():
        for cell in plan.cells:
            if cell.key not in flats and cell.key not in status:
                status[cell.key] = ("not run", "interrupted")
    return summarize(plan, flats, status, run_ids)


def _linked(group: Group) -> str:
    return "".join(f" {arg}={value}" for arg, value in group.linked.items())


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def summarize(plan: Plan, flats: Mapping[str, Mapping[str, Any]], status: Mapping[str, tuple[str, str]],
              run_ids: Mapping[str, str]) -> list[Point]:
    """One point per variant and grid point: its status, runs, and mean and 95% interval per figure."""
    points: dict[str, list[Cell]] = {}
    for cell in plan.cells:
        points.setdefault(cell.point, []).append(cell)
    out = []
    for cells in points.values():
        point = Point(variant=cells[0].variant, values=dict(cells[0].values), load=cells[0].load)
        ok = [flats[c.key] for c in cells if c.key in flats]
        states = [status[c.key] for c in cells if c.key not in flats and c.key in status]
        point["runs"] = [run_ids[c.key] for c in cells if c.key in run_ids]
        point["n"] = len(ok)
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

