"""Runs side by side: each key figure, its change against the first run (the baseline) in %, whether
that change is beyond run-to-run noise, and whether it is big enough to matter.

Noise is judged from the per-request records where both runs kept them (a stored run always does;
a result file does when its --save-detailed file is found): each run's requests are resampled with
replacement (a bootstrap, :data:`BOOTSTRAP_ROUNDS` rounds, seeded so that the answer is the same every
time), the figure recomputed on each resample, and the 95% interval of the relative change taken
from the resampled changes. A change whose interval excludes 0 is beyond noise; one whose interval
holds 0 is within it. Where that cannot be done, it says why instead of guessing: no records, too
few requests for the percentile, or a figure of which a run has one value only (aggregate
throughput, chunk-level ITL, acceptance length: they need repeated runs).

Size is judged apart from noise: a change matters only when it reaches the figure's practical
threshold (:class:`Threshold`; 5% of the baseline for throughputs, medians and rates, 10% for p99s by
default; settable per figure, :func:`parse_thresholds`). So a change has one of three verdicts: within
noise; beyond noise but below the threshold (trivial); or beyond both (better or worse). Where noise
cannot be judged, a change below the threshold is still trivial whatever the noise.

Each run's prefix-cache state is read too (the server's hit rate over the window, the share of prompt
tokens its usage said were cached, the run's cache warning): two runs whose hit rates differ by more
than :data:`CACHE_DIFFERENCE` while a latency changed are said to differ in what the cache did, which
can explain the change.

``--fail-if`` rules (:func:`parse_rule`) turn a comparison into a regression gate, with the same
judgement of noise: a change within noise holds no rule.
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
from fastbench.study.runfile import (
    Scalar,
    flat_complete,
    flat_keys,
    flat_status,
    load_result,
    per_request_values,
    read_records,
)
from fastbench.study.store import RECORDS_FILE, RESULT_FILE, Store

__all__ = ("CACHE_DIFFERENCE", "FIGURES", "CacheState", "Comparison", "Figure", "Rule", "RunSide", "Threshold",
           "cache_state", "compare", "load_run", "parse_rule", "parse_thresholds")

BOOTSTRAP_ROUNDS = 1000
BOOTSTRAP_SEED = 20250301
# A percentile is resampled only where this many requests lie beyond it (p99: 500 requests): with
# fewer, the resamples repeat the same few top values and the interval means little.
MIN_TAIL = 5


@dataclasses.dataclass(frozen=True)
class Threshold:
    """The smallest change of a figure that matters: ``value`` in % of the baseline (``percent``), or in
    the figure's own unit."""

    value: float
    percent: bool = True

    def text(self, unit: str) -> str:
        return f"{self.value:g}%" if self.percent else f"{self.value:g} {unit}"

    def reached(self, baseline: float, value: float, change_pct: float) -> bool:
        return abs(change_pct) >= self.value if self.percent else abs(value - baseline) >= self.value


# The defaults: 5% for throughputs, medians and per-request rates (a smaller change rarely moves a
# capacity or SLO decision, and repeats of a steady server drift by a few %), 10% for a p99 (it rests on
# 1% of the requests, so it moves more between repeats than a median does).
CENTRAL, TAIL = Threshold(5.0), Threshold(10.0)


@dataclasses.dataclass(frozen=True)
class Figure:
    key: str  # its flat key (runfile.flat_keys)
    name: str
    unit: str
    better: Literal["lower", "higher"]
    series: str | None = None  # the per-request series it is a statistic of (runfile.PER_REQUEST)
    percentile: float | None = None  # None: the mean (when series is set)
    metric: str = ""  # the short name --threshold takes for all its statistics (default: the series)
    threshold: Threshold = CENTRAL  # the default practical threshold

    @property
    def short(self) -> str:
        return self.metric or self.series or self.key


FIGURES: tuple[Figure, ...] = (
    Figure("output_throughput", "Output throughput", "tok/s", "higher", metric="output_throughput"),
    Figure("request_throughput", "Request throughput", "req/s", "higher", metric="request_throughput"),
    Figure("median_ttft_ms", "TTFT median", "ms", "lower", "ttft", 50.0),
    Figure("p99_ttft_ms", "TTFT p99", "ms", "lower", "ttft", 99.0, threshold=TAIL),
    Figure("median_tpot_ms", "TPOT median", "ms", "lower", "tpot", 50.0),
    Figure("p99_tpot_ms", "TPOT p99", "ms", "lower", "tpot", 99.0, threshold=TAIL),
    Figure("median_itl_ms", "ITL median (chunks)", "ms", "lower", metric="itl"),
    Figure("p99_itl_ms", "ITL p99 (chunks)", "ms", "lower", metric="itl", threshold=TAIL),
    Figure("median_e2el_ms", "E2E latency median", "ms", "lower", "e2el", 50.0),
    Figure("p99_e2el_ms", "E2E latency p99", "ms", "lower", "e2el", 99.0, threshold=TAIL),
    Figure("median_decode_rate_tok_s", "Per-stream decode median", "tok/s", "higher", "decode_rate", 50.0),
    Figure("median_prefill_rate_tok_s", "Prefill rate median", "tok/s", "higher", "prefill_rate", 50.0),
    Figure("spec_decode_acceptance_length", "Acceptance length", "tokens", "higher", metric="acceptance_length"),
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
Judgement = Literal["within noise", "trivial", "better", "worse", "cannot tell"]


@dataclasses.dataclass(frozen=True)
class Change:
    """One figure of one run against the baseline."""

    value: float | None
    change_pct: float | None  # (value - baseline) / |baseline| x 100
    interval_pct: tuple[float, float] | None  # 95% bootstrap interval of change_pct
    verdict: Verdict  # of noise
    why: str  # the reason when it cannot tell; else ""
    threshold: Threshold = CENTRAL
    matters: bool | None = None  # the change reaches the threshold (None: no change measured)
    direction: Literal["better", "worse", "same"] | None = None

    @property
    def judgement(self) -> Judgement:
        """Noise and size together: within noise; trivial (below the threshold, beyond noise or not
        judged); better or worse (beyond noise and the threshold); or cannot tell (no noise judgement of
        a change that reaches the threshold, or no change measured)."""
        if self.verdict == "within noise":
            return "within noise"
        if self.matters is False:
            return "trivial"
        if self.verdict == "beyond noise" and self.direction == "better":
            return "better"
        if self.verdict == "beyond noise" and self.direction == "worse":
            return "worse"
        return "cannot tell"


@dataclasses.dataclass(frozen=True)
class Row:
    figure: Figure
    baseline: float | None
    changes: list[Change]  # one per run after the baseline


@dataclasses.dataclass(frozen=True)
class CacheState:
    """What a run's prefix cache did, as its result says (None where it says nothing)."""

    hit_rate: float | None  # the server's /metrics hit rate over the window (prefix_cache_hit_rate)
    cached_share: float | None  # the share of prompt tokens the server's usage said were cached
    warning: str | None  # the run's prefix_cache_warning


@dataclasses.dataclass(frozen=True)
class Comparison:
    runs: list[RunSide]
    rows: list[Row]
    config_differences: list[str]  # "concurrency 4 -> 32", per field that differs from the baseline
    cache: list[CacheState] = dataclasses.field(default_factory=list)  # one per run
    notes: list[str] = dataclasses.field(default_factory=list)  # cache states, warnings, incomplete runs


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


def _change(figure: Figure, base: RunSide, other: RunSide, rng: np.random.Generator,
            threshold: Threshold) -> Change:
    a, b = _number(base.flat.get(figure.key)), _number(other.flat.get(figure.key))
    if a is None or b is None:
        return Change(b, None, None, "cannot tell", "not measured in both runs", threshold)
    pct = 0.0 if a == b else ((b - a) / abs(a) * 100 if a != 0 else math.copysign(math.inf, b - a))
    up = (b > a) == (figure.better == "higher")
    sized = Change(b, pct, None, "cannot tell", "", threshold, threshold.reached(a, b, pct),
                   "same" if a == b else "better" if up else "worse")
    if figure.series is None:
        return dataclasses.replace(sized, why="one value per run: needs repeated runs")
    if base.series is None or other.series is None:
        return dataclasses.replace(sized, why="no per-request records")
    xa, xb = base.series[figure.series], other.series[figure.series]
    few = _too_few(figure, min(len(xa), len(xb)))
    if few:
        return dataclasses.replace(sized, why=few)
    sa = _resampled(xa, figure.percentile, rng)
    sb = _resampled(xb, figure.percentile, rng)
    if np.any(sa == 0):
        return dataclasses.replace(sized, why="the baseline's resamples reach 0")
    lo, hi = (float(x) for x in np.percentile((sb - sa) / np.abs(sa) * 100, [2.5, 97.5]))
    verdict: Verdict = "beyond noise" if lo > 0 or hi < 0 else "within noise"
    return dataclasses.replace(sized, interval_pct=(lo, hi), verdict=verdict)


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


def threshold_of(figure: Figure, given: Mapping[str, Threshold]) -> Threshold:
    """The figure's threshold: given for its key, else for its short name (``ttft``), else for ``all``,
    else its default."""
    for name in (figure.key, figure.short, "all"):
        if name in given:
            return given[name]
    return figure.threshold


def compare(runs: Sequence[RunSide], figures: Sequence[Figure] = FIGURES,
            thresholds: Mapping[str, Threshold] | None = None) -> Comparison:
    """Each figure of each run against the first; ``thresholds`` (:func:`parse_thresholds`) replace the
    figures' default practical thresholds."""
    if len(runs) < 2:
        raise StoreError("compare needs at least two runs")
    base = runs[0]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rows = [Row(figure, _number(base.flat.get(figure.key)),
                [_change(figure, base, other, rng, threshold_of(figure, thresholds or {})) for other in runs[1:]])
            for figure in figures]
    configs = [(run.doc.get("fastbench") or {}).get("config") or {} for run in runs]
    differences = [f"{chr(ord('B') + i)}: {line}" for i, config in enumerate(configs[1:])
                   for line in _config_differences(configs[0], config)]
    states = [cache_state(run) for run in runs]
    notes = _status_notes(runs) + _cache_notes(states, rows)
    return Comparison(list(runs), rows, differences, states, notes)


# -- the cache, and runs that are no complete cell --------------------------------------------------

CACHE_DIFFERENCE = 0.2  # hit rates further apart than this are different cache states
# The figures a prefix cache moves: a hit skips prefill, so the first token (and the whole request) comes sooner.
CACHE_SENSITIVE = ("median_ttft_ms", "p99_ttft_ms", "median_prefill_rate_tok_s", "median_e2el_ms", "p99_e2el_ms")


def cache_state(run: RunSide) -> CacheState:
    """The run's prefix-cache state: the flat keys ``prefix_cache_hit_rate`` (else the result's
    ``fastbench.server.prefix_cache_stats.hit_rate``), ``cached_tokens_share`` and ``prefix_cache_warning``."""
    hit = _number(run.flat.get("prefix_cache_hit_rate"))
    if hit is None:
        stats = ((run.doc.get("fastbench") or {}).get("server") or {}).get("prefix_cache_stats")
        hit = _number(stats.get("hit_rate")) if isinstance(stats, dict) else None
    warning = run.flat.get("prefix_cache_warning")
    return CacheState(hit, _number(run.flat.get("cached_tokens_share")),
                      warning if isinstance(warning, str) and warning else None)


def _name(i: int) -> str:
    return chr(ord("A") + i)


def _cache_notes(states: Sequence[CacheState], rows: Sequence[Row]) -> list[str]:
    """A line per run whose cache state differs from the baseline's by more than CACHE_DIFFERENCE (by
    hit rate where both have one, else by cached-token share), saying whether a latency changed with
    it; a line per cache warning."""
    notes = [f"{_name(i)}: prefix cache: {state.warning}" for i, state in enumerate(states) if state.warning]
    base = states[0]
    for i, state in enumerate(states[1:]):
        name = _name(i + 1)
        if base.hit_rate is not None and state.hit_rate is not None:
            what, a, b = "prefix-cache hit rate", base.hit_rate, state.hit_rate
        elif base.cached_share is not None and state.cached_share is not None:
            what, a, b = "cached-token share", base.cached_share, state.cached_share
        else:
            continue
        if abs(b - a) <= CACHE_DIFFERENCE:
            continue
        moved = [(row.figure.name, row.changes[i]) for row in rows if row.figure.key in CACHE_SENSITIVE
                 and row.changes[i].judgement in ("better", "worse")]
        if moved:
            figure, change = moved[0]
            notes.append(f"{name}: the {what} was {a:.2f} in A and {b:.2f} in {name} while {figure} changed "
                         f"{change.change_pct:+.1f}%: the cache, not the server, may explain the latency change")
        else:
            notes.append(f"{name}: the {what} was {a:.2f} in A and {b:.2f} in {name}; no latency changed beyond its "
                         "threshold")
    return notes


def _status_notes(runs: Sequence[RunSide]) -> list[str]:
    """A line per run that is no complete cell: its figures cover only part of what it was asked."""
    notes = []
    for i, run in enumerate(runs):
        if not flat_complete(run.flat):
            notes.append(f"{_name(i)}: {flat_status(run.flat)}: not a complete run (stopped "
                         f"{run.flat.get('stopped_reason')}, {run.flat.get('completed')} completed); its figures "
                         "cover only what it completed")
    return notes


# -- --threshold ---------------------------------------------------------------------------------------

_THRESHOLD = re.compile(r"^\s*([A-Za-z0-9_.]+)\s*=\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*$")


def parse_thresholds(texts: Sequence[str], figures: Sequence[Figure] = FIGURES) -> dict[str, Threshold]:
    """``--threshold NAME=CHANGE`` (repeatable, or several comma-separated): NAME a figure's key
    (``p99_ttft_ms``), its short name for all its statistics (``ttft``, ``tpot``, ``itl``, ``e2el``,
    ``decode_rate``, ``prefill_rate``, ``output_throughput``, ``request_throughput``,
    ``acceptance_length``) or ``all``; CHANGE in % of the baseline (``2%``) or in the figure's unit
    (``0.5``). One line saying what is wrong otherwise."""
    known = {"all", *(f.key for f in figures), *(f.short for f in figures)}
    out: dict[str, Threshold] = {}
    for text in texts:
        for part in text.split(","):
            match = _THRESHOLD.match(part)
            if match is None:
                raise StoreError(f"--threshold {part.strip()!r}: expected NAME=CHANGE, e.g. 'ttft=2%' or "
                                 "'median_tpot_ms=0.5' (CHANGE a size, in % of the baseline or without % in the "
                                 "figure's unit)")
            name, number, percent = match.groups()
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
                hint = f" (did you mean {', '.join(close)}?)" if close else f" (it takes {', '.join(sorted(known))})"
                raise StoreError(f"--threshold {part.strip()!r}: no figure {name!r}{hint}")
            out[name] = Threshold(float(number), bool(percent))
    return out


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

    def check(self, base: RunSide, other: RunSide, judged: Change | None = None) -> tuple[bool, str]:
        """Whether ``other`` fails the rule, and a line saying what was found. With the comparison's
        change of this key (``judged``), judged as the table judges it: a change within noise holds no
        rule; where noise could not be judged, the change alone decides."""
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
        found = f"{self.key}: {a:g} -> {b:g} ({shown})"
        if judged is None:
            return failed, found
        if judged.verdict == "within noise":
            return False, found + (", within noise: does not hold" if failed else ", within noise")
        return failed, found + (", beyond noise" if judged.verdict == "beyond noise" else
                                f", noise not judged ({judged.why})")


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
