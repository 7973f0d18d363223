"""A sweep's grid: which benchmark values are crossed, the cells they make, and each cell's key.

A grid is the [benchmark] table of a sweep file with its options as they were written: an option
given as a list is crossed with every other listed one (``concurrency = [1, 4, 16]``), any other is
the same in every cell. An option whose single value is itself a list (``percentile_metrics``,
``goodput``'s array form, ``args``) is crossed only when written as a list of such values
(``metric_percentiles = [[50, 99], [50, 90, 99]]``): which options those are is the caller's to say.

The load axis (concurrency, or else request_rate) is crossed last and in rising order, so that the
cells of one series (same variant, same other values) run from the lightest load up: the stop rules
judge each load against the one below it.

A sweep of more than :data:`MAX_CELLS` cells (variants x grid points x repeats) is refused by
:func:`check_size` before any cell is made: its size is the product of the lists' lengths, known without
crossing them, and making each cell (its configuration, built and checked) takes milliseconds.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from fastbench.exceptions import ConfigError

__all__ = ("LOAD_KEYS", "MAX_CELLS", "canonical", "check_size", "cross", "crossed_keys", "load_key", "spec_hash")

# The most cells one sweep may make: at 30 s a run, three and a half days of runs, and a plan of about a
# minute to build (a --dry-run of 2,000 cells took 13 s and 64 MB at load 5 on 2 cores); a larger grid is
# a typo or several sweeps.
MAX_CELLS = 10_000

LOAD_KEYS = ("concurrency", "request_rate")  # the options a series raises, in this order of preference


def _is_crossed(key: str, value: Any, takes_list: Callable[[str], bool]) -> bool:
    if not isinstance(value, list):
        return False
    if not takes_list(key):
        return True
    return bool(value) and all(isinstance(item, (list, dict)) for item in value)


def crossed_keys(bench: Mapping[str, Any], takes_list: Callable[[str], bool]) -> list[str]:
    """The keys of ``bench`` whose values are crossed, in the file's order."""
    return [key for key, value in bench.items() if _is_crossed(key, value, takes_list)]


def load_key(crossed: Sequence[str]) -> str | None:
    """The series' load axis: concurrency when it is crossed, else request_rate, else none."""
    return next((key for key in LOAD_KEYS if key in crossed), None)


def _rising(values: list[Any]) -> list[Any]:
    """A load axis's values, lightest first (numbers ascending; "inf" as a rate is the heaviest)."""
    def weight(value: Any) -> float:
        return float(value) if isinstance(value, (int, float)) or value == "inf" else float("inf")
    return sorted(values, key=weight)


def cross(bench: Mapping[str, Any], takes_list: Callable[[str], bool]) -> list[dict[str, Any]]:
    """Every cell's benchmark options (all of them, crossed ones set to one value each), in run order:
    the file's order of the crossed keys, the load axis last and rising. A grid with an empty list
    has no cells."""
    crossed = crossed_keys(bench, takes_list)
    load = load_key(crossed)
    order = [key for key in crossed if key != load] + ([load] if load else [])
    axes = [_rising(list(bench[key])) if key == load else list(bench[key]) for key in order]
    cells = []
    for combination in itertools.product(*axes):
        cell = dict(bench)
        cell.update(zip(order, combination))
        cells.append(cell)
    return cells


def check_size(bench: Mapping[str, Any], takes_list: Callable[[str], bool], *, variants: int, repeats: int,
               where: str) -> int:
    """The number of cells the sweep makes (variants x grid points x repeats), computed from the lists'
    lengths; a one-line ConfigError naming the factors when it is over :data:`MAX_CELLS`."""
    lengths = {key: len(bench[key]) for key in crossed_keys(bench, takes_list)}
    points = math.prod(lengths.values())
    cells = variants * points * repeats
    if cells > MAX_CELLS:
        axes = " x ".join(f"{n} {key}" for key, n in lengths.items()) or "1"
        raise ConfigError(f"{where}: the sweep makes {cells:,} cells ({variants} variant{'s' if variants != 1 else ''}"
                          f" x {points:,} grid points ({axes}) x {repeats} repeat{'s' if repeats != 1 else ''}), "
                          f"more than the {MAX_CELLS:,} one sweep may make: shorten its lists or split it")
    return cells


def canonical(value: Any) -> str:
    """A value as sorted, compact JSON: the same options always read the same."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def spec_hash(value: Any) -> str:
    """A short digest of everything that defines a cell (its server and all its options): a cell kept
    by an earlier sweep counts as done only when this matches, so an edited sweep measures again."""
    return hashlib.sha256(canonical(value).encode()).hexdigest()[:16]
