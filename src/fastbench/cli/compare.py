"""``fastbench compare A B [...]``: runs side by side, each change against the first, whether it is
beyond run-to-run noise and whether it reaches the figure's practical threshold; the runs' prefix-cache
states; ``--fail-if`` makes it a regression gate for CI."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence

from fastbench.cli.argtypes import HelpFormatter, Parser
from fastbench.cli.runs import STORE_ENV, default_store
from fastbench.exceptions import FastbenchError
from fastbench.study.compare import (
    BOOTSTRAP_ROUNDS,
    CACHE_DIFFERENCE,
    Change,
    Comparison,
    Row,
    RunSide,
    cache_state,
    compare,
    load_run,
    parse_rule,
    parse_thresholds,
)

__all__ = ("main", "render")

EPILOG = f"""\
A run is named by its id in the store (or a unique start of it, as `fastbench runs` lists them), its
folder (STORE/runs/ID), or a result file (--result-json; its --save-detailed file is used where it is
found). The first run is the baseline. Each change gets one verdict: "within noise" (the 95% interval
of the change, from {BOOTSTRAP_ROUNDS} bootstrap resamples of both runs' per-request records, holds 0);
"beyond noise, below T (trivial)" (outside noise, smaller than the figure's practical threshold T);
"yes, better" / "yes, worse" (beyond both); "cannot tell: WHY" where noise cannot be judged (a change
below T is trivial all the same). Thresholds by default: 5% of the baseline for throughputs, medians and
rates, 10% for p99s; --threshold NAME=CHANGE (repeatable, or comma-separated) sets one: NAME a figure's
key (p99_ttft_ms), a metric for all its statistics (ttft, tpot, itl, e2el, decode_rate, prefill_rate,
output_throughput, request_throughput, acceptance_length) or all; CHANGE in % ('ttft=2%') or in the
figure's unit ('median_tpot_ms=0.5'). Each run's prefix cache is shown (the server's hit rate, the
cached-token share, its warning), and a line says when two runs' hit rates differ by more than
{CACHE_DIFFERENCE:g} while a latency changed. --fail-if KEY OP CHANGE (repeatable): KEY is any flat key of
the result (p99_ttft_ms, output_throughput, median_decode_rate_tok_s, ...), OP one of > < >= <=, CHANGE
in % of the baseline ('p99_ttft_ms>+10%', 'output_throughput<-5%') or without % in the key's unit
('p99_ttft_ms>+20'); a change the table finds within noise holds no rule. Without --store: ${STORE_ENV},
else ./fastbench-runs. Exit status: 0 done, 1 a --fail-if rule held for some run, 2 bad input.
"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fastbench compare", description="Compare runs: key figures side by side, the change in %, "
               "and whether it is beyond run-to-run noise.", epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN", help="run ids, run folders or result files; the first is "
                   "the baseline")
    p.add_argument("--store", metavar="DIR", default=None, help="the store to look run ids up in")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table instead of the console one")
    p.add_argument("--threshold", action="append", default=[], metavar="NAME=CHANGE",
                   help="the smallest change that matters for a figure, e.g. 'ttft=2%%' or 'median_tpot_ms=0.5' "
                   "(default 5%% of the baseline, 10%% for p99s)")
    p.add_argument("--fail-if", action="append", default=[], metavar="RULE",
                   help="exit 1 when a run's change against the baseline passes this beyond noise, e.g. "
                   "'p99_ttft_ms>+10%%'")
    return p


def main(argv: Sequence[str]) -> int:
    ns = build_parser().parse_args(list(argv))
    try:
        if len(ns.runs) < 2:
            raise FastbenchError("compare needs two runs or more: the baseline first")
        store = ns.store or default_store()
        runs = [load_run(ref, store) for ref in ns.runs]
        known = sorted({key for run in runs for key in run.flat})
        rules = [parse_rule(text, known) for text in ns.fail_if]
        comparison = compare(runs, thresholds=parse_thresholds(ns.threshold))
        rows = {row.figure.key: row for row in comparison.rows}
        verdicts = [(rule, other, *rule.check(runs[0], other, _judged(rows.get(rule.key), i)))
                    for rule in rules for i, other in enumerate(runs[1:])]
    except FastbenchError as exc:
        print(f"fastbench compare: error: {exc}", file=sys.stderr)
        return 2
    print(render(comparison, markdown=ns.markdown))
    failed = False
    for rule, other, fails, found in verdicts:
        failed = failed or fails
        name = _names(comparison)[comparison.runs.index(other)]
        print(f"{'FAIL' if fails else 'pass'}  --fail-if {rule.text}  {name}: {found}")
    return 1 if failed else 0


def _judged(row: Row | None, i: int) -> Change | None:
    return row.changes[i] if row is not None else None


def _names(comparison: Comparison) -> list[str]:
    return [chr(ord("A") + i) for i in range(len(comparison.runs))]


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    digits = 2 if abs(value) < 10 else 1
    return f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _verdict(change: Change, unit: str) -> str:
    judgement, below = change.judgement, f"below {change.threshold.text(unit)} (trivial)"
    if judgement == "within noise":
        return "within noise"
    if judgement == "trivial":
        return f"beyond noise, {below}" if change.verdict == "beyond noise" else f"{below}; noise: {change.why}"
    if judgement in ("better", "worse"):
        return f"yes, {judgement}"
    return f"cannot tell: {change.why}"


def _describe(run: RunSide) -> str:
    fb = run.doc.get("fastbench") or {}
    config = fb.get("config") or {}
    parts = [run.run_id or run.ref]
    for key, value in (("label", config.get("label")), ("variant", config.get("variant")),
                       ("model", run.doc.get("model_id")), ("concurrency", run.doc.get("max_concurrency")),
                       ("rate", run.doc.get("request_rate"))):
        if value is not None:
            parts.append(f"{key} {value}")
    created = fb.get("created_at")
    if isinstance(created, str):
        try:
            parts.append(datetime.datetime.fromisoformat(created).strftime("%Y-%m-%d %H:%M"))
        except ValueError:
            pass
    count = len(run.series["ttft"]) if run.series is not None else None
    parts.append(f"records: {count} completed requests" if count is not None else f"records: {run.records}")
    cache = cache_state(run)
    if cache.hit_rate is not None:
        parts.append(f"prefix-cache hit rate {cache.hit_rate:.2f}")
    if cache.cached_share is not None:
        parts.append(f"cached-token share {cache.cached_share:.2f}")
    return ", ".join(parts)


def render(comparison: Comparison, *, markdown: bool = False) -> str:
    """The comparison as a console table, or as Markdown."""
    names = _names(comparison)
    head = ["figure", "unit", names[0]]
    for name in names[1:]:
        head += [name, f"change {name}", f"95% interval {name}", f"verdict {name}"]
    table = []
    for row in comparison.rows:
        cells = [row.figure.name, row.figure.unit, _value(row.baseline, row.figure.unit)]
        for change in row.changes:
            interval = "-" if change.interval_pct is None else \
                f"[{change.interval_pct[0]:+.1f}%, {change.interval_pct[1]:+.1f}%]"
            cells += [_value(change.value, row.figure.unit), _pct(change.change_pct), interval,
                      _verdict(change, row.figure.unit)]
        table.append(cells)
    runs = [f"{name}  {_describe(run)}" for name, run in zip(names, comparison.runs)]
    note = (f"Baseline: A. Configuration differs from A: {'; '.join(comparison.config_differences)}"
            if comparison.config_differences else "Baseline: A. The runs' configurations are the same.")
    # right-aligned: the baseline's value, and each other run's value and change
    numeric = {i for i in range(2, len(head)) if i == 2 or (i - 3) % 4 in (0, 1)}
    if markdown:
        lines = [*(f"- **{line[:1]}** {line[3:]}" for line in runs), "", note,
                 *(f"- {line}" for line in comparison.notes), "",
                 "| " + " | ".join(head) + " |",
                 "|" + "|".join("---:" if i in numeric else "---" for i in range(len(head))) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in table]
        return "\n".join(lines)
    widths = [max(len(head[i]), *(len(cells[i]) for cells in table)) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([*runs, note, *comparison.notes, "", line(head), *(line(cells) for cells in table)])
