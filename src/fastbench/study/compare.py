"""Runs side by side: each key figure, its change against the first run (the baseline) in %, and whether
that change is beyond run-to-run noise.

Noise is judged from the per-request records where both runs kept them (a stored run always does;
a result file does when its --save-detailed file is found): each run's requests are resampled with
replacement (a bootstrap, :data:`BOOTSTRAP_ROUNDS` rounds, seeded so that the answer is the same every
time), the figure recomputed on each resample, and the 95% interval of the relative change taken
from the resampled changes. A change whose interval excludes 0 is beyond noise; one whose interval
holds 0 is within it. Where that cannot be done, it says why instead of guessing: no records, too
few requests for the percentile, or a figure of which a run has one value only (aggregate
throughput, chunk-level ITL, acceptance length: they need repeated runs).

``--fail-if`` rules (:func:`parse_rule`) turn a comparison into a regression gate.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fastbench.exceptions import StoreError
from fastbench.study.runfile import Scalar, flat_keys, load_result, per_request_values, read_records
from fastbench.study.store import RECORDS_FILE, RESULT_FILE, Store

__all__ = ("FIGURES", "Comparison", "Figure", "Rule", "RunSide", "compare", "load_run", "parse_rule")

BOOTSTRAP_ROUNDS = 1000
BOOTSTRAP_SEED = 20250301
# A percentile is resampled only where this many requests lie beyond it (p99: 500 requests): with
# fewer, the resamples repeat the same few top values and the interval means little.
MIN_TAIL = 5


@dataclasses.dataclass(frozen=True)
class Figure:
    key: str  # its flat key (runfile.flat_keys)
    name: str
    unit: str
    better: Literal["lower", "higher"]
    series: str | None = None  # the per-request series it is a statistic of (runfile.PER_REQUEST)
    percentile: float | None = None  # None: the mean (when series is set)


FIGURES: tuple[Figure, ...] = (
    Figure("output_throughput", "Output throughput", "tok/s", "higher"),
    Figure("request_throughput", "Request throughput", "req/s", "higher"),
    Figure("median_ttft_ms", "TTFT median", "ms", "lower", "ttft", 50.0),
    Figure("p99_ttft_ms", "TTFT p99", "ms", "lower", "ttft", 99.0),
    Figure("median_tpot_ms", "TPOT median", "ms", "lower", "tpot", 50.0),
    Figure("p99_tpot_ms", "TPOT p99", "ms", "lower", "tpot", 99.0),
    Figure("median_itl_ms", "ITL median (chunks)", "ms", "lower"),
    Figure("p99_itl_ms", "ITL p99 (chunks)", "ms", "lower"),
    Figure("median_e2el_ms", "E2E latency median", "ms", "lower", "e2el", 50.0),
    Figure("p99_e2el_ms", "E2E latency p99", "ms", "lower", "e2el", 99.0),
    Figure("median_decode_rate_tok_s", "Per-stream decode median", "tok/s", "higher", "decode_rate", 50.0),
    Figure("median_prefill_rate_tok_s", "Prefill rate median", "tok/s", "higher", "prefill_rate", 50.0),
    Figure("spec_decode_acceptance_length", "Acceptance length", "tokens", "higher"),
)


@dataclasses.dataclass(frozen=True)
class RunSide:
    """One run of a comparison."""

    ref: str  # as it was named: a run id, a run folder or a result file
    run_id: str | None  # its id in a store, where it has one
    doc: dict[str, Any]
    flat: dict[str, Scalar]
    series: dict[str, np.ndarray] | None  # per-request values (runfile.PER_REQUEST); None without records
    records: str  # where the per-request records came from, or why there are none


def load_run(ref: str, store_root: str | None) -> RunSide:
    """A run named by a result file, a run folder (holding result.json) or a run id (or a unique
    prefix of one) in the store at ``store_root``."""
    path = Path(ref)
    run_id = None
    if path.is_file():
        doc = load_result(path)
        records_path = records_of_file(path, doc)
    elif path.is_dir():
        if not (path / RESULT_FILE).is_file():
            raise StoreError(f"{ref}: a directory without {RESULT_FILE}; give a run folder, a result file or a run id")
        doc = load_result(path / RESULT_FILE)
        records_path = path / RECORDS_FILE if (path / RECORDS_FILE).is_file() else None
    else:
        if store_root is None:
            raise StoreError(f"{ref}: no such file or folder, and no store to look it up in")
        try:
            with Store(store_root) as store:
                stored = store.resolve(ref)
        except StoreError as exc:
            raise StoreError(f"{ref}: not a file or folder, and {exc}") from None
        run_id = stored.run_id
        doc = load_result(Path(stored.folder) / RESULT_FILE)
        records_path = Path(stored.folder) / RECORDS_FILE if stored.has_records else None
    series = per_request_values(read_records(records_path)) if records_path is not None else None
    records = str(records_path) if records_path is not None else "none kept (run with --store or --save-detailed)"
    return RunSide(ref=ref, run_id=run_id, doc=doc, flat=flat_keys(doc), series=series, records=records)


def records_of_file(path: Path, doc: Mapping[str, Any]) -> Path | None:
    """The --save-detailed file a result file names, as written (relative to where the run was started)
    or beside the result file."""
    given = ((doc.get("fastbench") or {}).get("config") or {}).get("save_detailed")
    if not isinstance(given, str) or not given:
        return None
    for candidate in (Path(given), path.parent / Path(given).name):
        if candidate.is_file():
            return candidate
    return None


# -- the comparison ---------------------------------------------------------------------------------

Verdict = Literal["beyond noise", "within noise", "cannot tell"]


@dataclasses.dataclass(frozen=True)
class Change:
    """One figure of one run against the baseline."""

    value: float | None
    change_pct: float | None  # (value - baseline) / |baseline| x 100
    interval_pct: tuple[float, float] | None  # 95% bootstrap interval of change_pct
    verdict: Verdict
    why: str  # the reason when it cannot tell; else ""


@dataclasses.dataclass(frozen=True)
class Row:
    figure: Figure
    baseline: float | None
    changes: list[Change]  # one per run after the baseline


@dataclasses.dataclass(frozen=True)
class Comparison:
    runs: list[RunSide]
    rows: list[Row]
    config_differences: list[str]  # "concurrency 4 -> 32", per field that differs from the baseline


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _statistic(values: np.ndarray, percentile: float | None) -> np.ndarray:
    """The statistic of each row of ``values`` (resamples x requests)."""
    if percentile is None:
        return np.asarray(values.mean(axis=1))
    return np.asarray(np.percentile(values, percentile, axis=1))


def _resampled(values: np.ndarray, percentile: float | None, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(BOOTSTRAP_ROUNDS)
    per_batch = max(1, 4_000_000 // len(values))  # about 32 MB of resampled values at a time
    for start in range(0, BOOTSTRAP_ROUNDS, per_batch):
        n = min(per_batch, BOOTSTRAP_ROUNDS - start)
        out[start:start + n] = _statistic(values[rng.integers(0, len(values), size=(n, len(values)))], percentile)
    return out


def _too_few(figure: Figure, n: int) -> str | None:
    need = MIN_TAIL / (1 - figure.percentile / 100) if figure.percentile is not None and figure.percentile > 50 \
        else 2 * MIN_TAIL
    return f"{n} requests are too few for a p{figure.percentile:g} (need {math.ceil(need)})" if n < need else None


def _change(figure: Figure, base: RunSide, other: RunSide, rng: np.random.Generator) -> Change:
    a, b = _number(base.flat.get(figure.key)), _number(other.flat.get(figure.key))
    if a is None or b is None:
        return Change(b, None, None, "cannot tell", "not measured in both runs")
    pct = 0.0 if a == b else ((b - a) / abs(a) * 100 if a != 0 else math.copysign(math.inf, b - a))
    if figure.series is None:
        return Change(b, pct, None, "cannot tell", "one value per run: needs repeated runs")
    if base.series is None or other.series is None:
        return Change(b, pct, None, "cannot tell", "no per-request records")
    xa, xb = base.series[figure.series], other.series[figure.series]
    few = _too_few(figure, min(len(xa), len(xb)))
    if few:
        return Change(b, pct, None, "cannot tell", few)
    sa = _resampled(xa, figure.percentile, rng)
    sb = _resampled(xb, figure.percentile, rng)
    if np.any(sa == 0):
        return Change(b, pct, None, "cannot tell", "the baseline's resamples reach 0")
    lo, hi = (float(x) for x in np.percentile((sb - sa) / np.abs(sa) * 100, [2.5, 97.5]))
    verdict: Verdict = "beyond noise" if lo > 0 or hi < 0 else "within noise"
    return Change(b, pct, (lo, hi), verdict, "")


# Configuration fields that say nothing about what was measured: where its files went, how it was shown.
_NOT_COMPARED = frozenset({"result_json", "result_card", "save_detailed", "save_outputs", "store", "progress",
                           "command_line", "config_file", "card_rows", "card_notes", "label", "api_key_set"})


def _config_differences(base: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    out = []
    for key in dict.fromkeys([*base, *other]):
        if key in _NOT_COMPARED or base.get(key) == other.get(key):
            continue
        if isinstance(base.get(key), dict) and isinstance(other.get(key), dict):
            out += [f"{key}.{line}" for line in _config_differences(base[key], other[key])]
        else:
            out.append(f"{key} {_short(base.get(key))} -> {_short(other.get(key))}")
    return out


def _short(value: Any) -> str:
    text = "none" if value is None else str(value)
    return text if len(text) <= 40 else text[:39] + "~"


def compare(runs: Sequence[RunSide], figures: Sequence[Figure] = FIGURES) -> Comparison:
    """Each figure of each run against the first."""
    if len(runs) < 2:
        raise StoreError("compare needs at least two runs")
    base = runs[0]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rows = [Row(figure, _number(base.flat.get(figure.key)), [_change(figure, base, other, rng) for other in runs[1:]])
            for figure in figures]
    configs = [(run.doc.get("fastbench") or {}).get("config") or {} for run in runs]
    differences = [f"{chr(ord('B') + i)}: {line}" for i, config in enumerate(configs[1:])
                   for line in _config_differences(configs[0], config)]
    return Comparison(list(runs), rows, differences)


# -- --fail-if ---------------------------------------------------------------------------------------

_RULE = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*(>=|<=|>|<)\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(%?)\s*$")
_OPS: dict[str, Callable[[float, float], bool]] = {">": operator.gt, "<": operator.lt, ">=": operator.ge,
                                                   "<=": operator.le}


@dataclasses.dataclass(frozen=True)
class Rule:
    """``KEY OP CHANGE``: fails when a run's change against the baseline is OP CHANGE; CHANGE in % of the
    baseline (``p99_ttft_ms>+10%``) or, without %, in the key's own unit (``p99_ttft_ms>+20``)."""

    text: str
    key: str
    op: str
    threshold: float
    percent: bool

    def check(self, base: RunSide, other: RunSide) -> tuple[bool, str]:
        """Whether ``other`` fails the rule, and a line saying what was found."""
        a, b = _number(base.flat.get(self.key)), _number(other.flat.get(self.key))
        if a is None or b is None:
            missing = base.ref if a is None else other.ref
            raise StoreError(f"--fail-if {self.text}: {self.key} is not measured in {missing}")
        if self.percent:
            change = 0.0 if a == b else ((b - a) / abs(a) * 100 if a != 0 else math.copysign(math.inf, b - a))
            shown = f"{change:+.1f}%"
        else:
            change = b - a
            shown = f"{change:+g}"
        failed = _OPS[self.op](change, self.threshold)
        return failed, f"{self.key}: {a:g} -> {b:g} ({shown})"


def parse_rule(text: str, known: Sequence[str]) -> Rule:
    """A --fail-if expression; one line saying what is wrong with it otherwise."""
    match = _RULE.match(text)
    if match is None:
        raise StoreError(f"--fail-if {text!r}: expected KEY OP CHANGE, e.g. 'p99_ttft_ms>+10%' or "
                         "'output_throughput<-5%' (OP one of > < >= <=; CHANGE in % of the baseline, or without % "
                         "in the key's unit)")
    key, op, number, percent = match.groups()
    if key not in known:
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else " (see `fastbench runs --csv -` for the keys)"
        raise StoreError(f"--fail-if {text!r}: no figure {key!r} in these runs{hint}")
    return Rule(text=text, key=key, op=op, threshold=float(number), percent=bool(percent))
