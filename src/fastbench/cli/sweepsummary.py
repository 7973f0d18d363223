"""What ``fastbench sweep`` prints of a plan: the dry run (each server, its cells, done or to run, the time
left estimated), what each cell starts from, and the summary as a console table and as CSV.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastbench.atomicfile import write_bytes_atomic
from fastbench.results.notes import console_line
from fastbench.study import grid
from fastbench.study.cellstate import SHARED_CACHE
from fastbench.study.sustained import STEADY_SHARE_KEY, SUSTAINED_KEY, fallback_mark, fallback_note
from fastbench.study.sweepplan import SUMMARY_FIGURES, Journal, Plan, Point, pending

# A warning's opening under the table (after the point and its count): the figures it warns of, cut after them.
WARNING_WIDTH = 70

__all__ = ("TABLE_FIGURES", "cache_warning_lines", "describe_start", "render_plan", "render_table", "write_csv")


def _fmt(value: float | None, ci: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" + (f" ±{ci:,.{digits}f}" if ci is not None else "")


TABLE_FIGURES = ((SUSTAINED_KEY, "steady out tok/s"), ("median_ttft_ms", "TTFT p50 ms"),
                 ("median_tpot_ms", "TPOT p50 ms"), ("median_decode_rate_tok_s", "tok/s/stream p50"))


def render_table(points: Sequence[Point]) -> str:
    """The summary as a console table: a row per point, means ± the 95% interval's half-width; under it,
    which throughput it shows and a line per point whose runs were warned that the server's prefix cache
    held their prompts (their TTFT, prefill rate and E2E measure the cache)."""
    keys = list(points[0]["values"]) if points else []
    head = ["variant", *keys, "n", *(label for _, label in TABLE_FIGURES), "status"]
    rows = [head]
    for p in points:
        status = p["status"] + (f": {p['reason']}" if p["reason"] else "") + (f" ({p['note']})" if p["note"] else "")
        rows.append([p["variant"], *(str(p["values"][k]) for k in keys), str(p["n"]),
                     *(_fmt(*p[name]) + (fallback_mark(p[STEADY_SHARE_KEY][0]) if name == SUSTAINED_KEY else "")
                       for name, _ in TABLE_FIGURES), status])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]
    lines.append(fallback_note((p[STEADY_SHARE_KEY][0] for p in points), "points"))
    return "\n".join(lines + cache_warning_lines(points))


def cache_warning_lines(points: Sequence[Point]) -> list[str]:
    """One console line per point with runs the prefix-cache warning was given: how many of its runs, and
    the opening of the first one's warning (whole in its result file's prefix_cache_warning)."""
    lines = []
    for p in points:
        if p.get("prefix_cache_warned"):
            values = " ".join(f"{k}={v}" for k, v in p["values"].items())
            head = f"WARNING {p['variant']} {values}: {p['prefix_cache_warned']} of {p['n']} runs: prefix cache: "
            lines.append(head + console_line(str(p["prefix_cache_warning"]), WARNING_WIDTH))
    return lines


def write_csv(points: Sequence[Point], path: str | os.PathLike[str]) -> None:
    """The summary as CSV, written under a temporary name and renamed: a reader never sees half of it."""
    keys = list(points[0]["values"]) if points else []
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["variant", *keys, "status", "reason", "n", "runs",
                     *(f"{name}_{part}" for name in SUMMARY_FIGURES for part in ("mean", "ci95")), "note",
                     "prompt_seeds", "prefix_cache_reset", "prefix_cache_warning"])
    for p in points:
        figures = [("" if x is None else repr(x)) for name in SUMMARY_FIGURES for x in p[name]]
        writer.writerow([p["variant"], *(p["values"][k] for k in keys), p["status"], p["reason"], p["n"],
                         " ".join(p["runs"]), *figures, p["note"], " ".join(str(x) for x in p["prompt_seeds"]),
                         f"{p['prefix_cache_reset']}/{p['n']}", f"{p['prefix_cache_warned']}/{p['n']}"])
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(target, out.getvalue().encode("utf-8"))


def describe_start(plan: Plan) -> list[str]:
    """What each cell starts from, in a few lines: its prompts, and per variant whether the server's
    prefix cache is emptied before it; then the plan's notes."""
    if plan.prompt_reuse == "shared":
        lines = [f"prompts: shared (prompt_reuse = \"shared\"): every cell the seed its options give "
                 f"(the sweep's: {plan.sweep_seed})"]
    else:
        lines = [f"prompts: fresh: each point and repeat its own, seeds derived from the sweep's seed "
                 f"{plan.sweep_seed} (variants at one point share them)"]
    rules: dict[str, str] = {}
    for group in plan.groups:
        rules.setdefault(group.variant, group.cells[0].config.metadata.get("sweep_prefix_cache_reset", ""))
    cached = [variant for variant, rule in rules.items() if rule.endswith(SHARED_CACHE)]
    if cached:  # said before anything else: those cells' TTFT, prefill rate and E2E will measure the cache
        lines.insert(0, f"WARNING: {', '.join(cached)}: shared prompts and no prefix-cache reset between cells: "
                        "every cell after the first on a server will measure its cache, not its prefill "
                        "(prompt_reuse = \"fresh\", or reset_prefix_cache = true where the server allows)")
    lines += [f"prefix cache reset before each cell: {variant}: {rule}" for variant, rule in rules.items()]
    return lines + [f"note: {note}" for note in plan.notes]


def render_plan(plan: Plan, store: Any) -> str:
    """The dry run: each server, its cells and whether each is done, and the time left, estimated."""
    todo, done = pending(plan, store)
    left = {cell.key for cell in todo}
    durations = [float(flat["duration"]) for _, flat in done.values() if isinstance(flat.get("duration"), (int, float))]
    per_cell = sum(durations) / len(durations) if durations else None
    loads: dict[str, list[float]] = {}
    for event in Journal(plan.store, plan.name).read():
        if event.get("event") == "launched" and isinstance(event.get("load_s"), (int, float)):
            loads.setdefault(event["variant"], []).append(float(event["load_s"]))
    lines = [f"sweep {plan.name}: {len(plan.cells)} cells ({len(plan.cells) // plan.repeats} points x "
             f"{plan.repeats} repeats), {len(plan.cells) - len(left)} done, {len(left)} to run; store {plan.store}",
             *describe_start(plan)]
    seconds = 0.0
    unknown_cells = unknown_launches = 0
    for group in plan.groups:
        group_left = [c for c in group.cells if c.key in left]
        verb = {"launch": "launch", "attach": "attach to", "synthetic": "start per run"}[group.kind]
        lines.append(f"{group.variant}: {verb} {group.where}" + ("" if group_left else "  (all done: not launched)"))
        if group_left and group.kind == "launch":
            if group.variant in loads:
                seconds += sum(loads[group.variant]) / len(loads[group.variant])
            else:
                unknown_launches += 1
        for cell in group.cells:
            state = "to run" if cell.key in left else "done"
            lines.append(f"  {grid.canonical(dict(cell.values))} repeat {cell.repeat + 1}/{plan.repeats}: {state}")
            if cell.key in left:
                cap = cell.config.max_seconds
                if cap is not None:
                    seconds += cap
                elif per_cell is not None:
                    seconds += per_cell
                else:
                    unknown_cells += 1
    if plan.search is not None and plan.search.kind == "auto":
        lines.append(f"concurrency auto: each series measures 1 and its top first, then up to {plan.search.points - 2} "
                     "concurrencies between, placed from those two cells' figures (not estimated below)")
    elif plan.search is not None:
        lines.append(f"find-max {plan.search.axis}: each series measures its two ends, then bisects between them "
                     f"to within {plan.search.tolerance:.0%} (those cells are not estimated below)")
    estimate = f"estimated time: {seconds / 60:.1f} min"
    unknown = [f"{unknown_cells} cell(s) with no time cap and no earlier cell to go by"] if unknown_cells else []
    unknown += [f"{unknown_launches} launch(es) not timed before"] if unknown_launches else []
    if unknown:
        estimate += " plus " + " and ".join(unknown)
    lines.append(estimate + " (stop rules may skip some cells)")
    return "\n".join(lines)
