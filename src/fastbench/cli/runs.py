"""``fastbench runs``: the runs a results store holds, listed, filtered and exported as CSV; runs
written elsewhere added to it; its index rebuilt from its folders."""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from fastbench.cli.argtypes import HelpFormatter, Parser, whole_number
from fastbench.exceptions import FastbenchError, StoreError
from fastbench.study.runfile import flat_why, load_result
from fastbench.study.store import KEY_FIGURES, Store, StoredRun

__all__ = ("default_store", "main", "parse_when")

STORE_ENV = "FASTBENCH_STORE"
DEFAULT_STORE = "fastbench-runs"

EPILOG = f"""\
A store is a directory: a folder per run (result.json, card.md, requests.jsonl.gz, histograms.hlog,
server.log) and index.sqlite, the index that this command reads. Runs land in it with
`fastbench ... --store DIR` (or store = "DIR" in a --config file's [benchmark] table), or with --add.
Without --store: ${STORE_ENV}, else ./{DEFAULT_STORE}.
Patterns match as in a shell: --label 'eagle*'. Dates are local: 2025-03-01, 2025-03-01T14:30, or
a span back from now: 36h, 7d. Status: ok, time cap (ended at --max-seconds), COLLAPSED (the server
did not work: most requests failed, or none completed), INTERRUPTED (Ctrl-C or the API's stop
event), CAPPED-EMPTY (the time cap came before the first completion), FAILED (REASON) (the server
exited, a worker was lost). A complete cell, the only kind a sweep, a report or a figure averages,
is a run that ran its whole workload on a working server (ok) or reached its time cap with a request
completed; a COLLAPSED run is none (a sweep runs its cell again). The CSV's complete column says
which, and why_not_complete why not. A run that completed nothing shows - for its figures.
Exit status: 0 done (also when nothing matched), 2 bad input or no store.
"""


def default_store() -> str:
    """The store a command uses without --store."""
    return os.environ.get(STORE_ENV) or DEFAULT_STORE


def add_filter_args(g: argparse._ArgumentGroup) -> None:
    """The store's filters, the same in `runs`, `plot` and `report`."""
    g.add_argument("--label", metavar="PATTERN", default=None, help="runs whose --label matches")
    g.add_argument("--model", metavar="PATTERN", default=None, help="runs whose model matches")
    g.add_argument("--variant", metavar="PATTERN", default=None, help="runs whose --variant matches")
    g.add_argument("--since", metavar="WHEN", default=None, help="runs made at or after this time")
    g.add_argument("--until", metavar="WHEN", default=None,
                   help="runs made before this time (a date alone: up to the end of that day)")
    g.add_argument("--last", metavar="N", type=whole_number, default=None, help="only the newest N that match")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fastbench runs", description="List, filter and export the runs of a results store.",
               epilog=EPILOG, formatter_class=HelpFormatter)
    p.add_argument("--store", metavar="DIR", default=None, help=f"the store (default: ${STORE_ENV}, else "
                   f"./{DEFAULT_STORE})")
    add_filter_args(p.add_argument_group("filters (all must hold)"))
    g = p.add_argument_group("actions")
    g.add_argument("--csv", metavar="FILE", default=None,
                   help="write the matching runs as CSV (- for stdout): every configuration field and flat key")
    g.add_argument("--ids", action="store_true", help="print only the matching run ids, one a line")
    g.add_argument("--add", metavar="RESULT.json", nargs="+", default=None,
                   help="keep these result files in the store, with their --save-detailed records and card "
                   "where the result names files that exist")
    g.add_argument("--reindex", action="store_true",
                   help="rebuild the index from the run folders, removing what writers killed mid-write left")
    return p


_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([hd])$")


def parse_when(text: str, *, end_of_day: bool = False, now: datetime.datetime | None = None) -> float:
    """A local time as Unix seconds: ``2025-03-01``, ``2025-03-01T14:30`` (or with a space), or ``36h`` /
    ``7d`` back from now. ``end_of_day``: a date alone means the end of that day (for --until)."""
    span = _SPAN.match(text.strip())
    if span:
        hours = float(span.group(1)) * (24 if span.group(2) == "d" else 1)
        return ((now or datetime.datetime.now()) - datetime.timedelta(hours=hours)).timestamp()
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise FastbenchError(f"expected a date (2025-03-01), a time (2025-03-01T14:30) or a span back "
                             f"from now (36h, 7d), got {text!r}") from None
    if end_of_day and re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
        when += datetime.timedelta(days=1)
    return when.timestamp()


def main(argv: Sequence[str]) -> int:
    ns = build_parser().parse_args(list(argv))
    try:
        return _main(ns)
    except FastbenchError as exc:
        print(f"fastbench runs: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _main(ns: argparse.Namespace) -> int:
    root = ns.store or default_store()
    if ns.last is not None and ns.last < 1:
        raise FastbenchError(f"--last must be at least 1, got {ns.last}")
    since = parse_when(ns.since) if ns.since else None
    until = parse_when(ns.until, end_of_day=True) if ns.until else None
    with Store(root, create=bool(ns.add)) as store:
        if ns.reindex:
            indexed, skipped, removed = store.reindex()
            for line in skipped:
                print(f"fastbench runs: skipped {line}", file=sys.stderr)
            for line in removed:
                print(f"removed {line}")
            print(f"indexed {indexed} run{'s' if indexed != 1 else ''} in {root}")
        if ns.add:
            for path in ns.add:
                print(f"{_add(store, path)}  {path}")
        if ns.add or ns.reindex:
            return 0
        runs = store.query(label=ns.label, model=ns.model, variant=ns.variant, since=since, until=until,
                           limit=ns.last)
        if ns.csv is not None:
            _write_csv(store, runs, ns.csv)
        elif ns.ids:
            sys.stdout.write("".join(run.run_id + "\n" for run in runs))
        else:
            print(render_table(runs) if runs else f"no runs match in {root} ({store.count()} stored)")
    return 0


def _add(store: Store, path: str) -> str:
    """Keep one result file, with the per-request records and card its config names where they exist
    (as given, or beside the result file)."""
    config = (load_result(path)["fastbench"].get("config") or {})

    def beside(name: str) -> str | None:
        given = config.get(name)
        if not isinstance(given, str) or not given:
            return None
        for candidate in (Path(given), Path(path).parent / Path(given).name):
            if candidate.is_file():
                return str(candidate)
        return None

    return store.add_files(path, records_path=beside("save_detailed"), card_path=beside("result_card"))


# -- the table -------------------------------------------------------------------------------------

def _cell(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if type(value) is float:  # (not isinstance: this runs 80,000 times for a table of every run)
        return format(value, _DIGITS[digits])
    return str(value)


_DIGITS = {1: ",.1f", 2: ",.2f"}
_NOTHING: dict[str, float | None] = dict.fromkeys(KEY_FIGURES)


def _clip(text: str | None, width: int) -> str:
    text = text or "-"
    return text if len(text) <= width else text[: width - 1] + "~"


def render_table(runs: Sequence[StoredRun]) -> str:
    """One line per run: who and what it measured, its key figures. (Written for 10,000 rows: the
    dates by isoformat, each line by one format call.)"""
    head = ("run", "created", "label", "variant", "model", "conc", "rate", "done/failed", "out tok/s",
            "TTFT p50", "TTFT p99", "TPOT p50", "decode p50", "status")
    rows = [head]
    from_unix = datetime.datetime.fromtimestamp
    for run in runs:
        m, f = run.meta, run.figures
        created = from_unix(m.created_unix).isoformat(" ", "minutes") if m.created_unix else "-"
        if not m.completed:  # no request completed: a latency of 0.0 would be a figure it never measured
            f = _NOTHING
        rows.append((
            run.run_id, created, _clip(m.label, 20), _clip(m.variant, 14), _clip(m.model, 28), _cell(m.concurrency),
            _cell(m.request_rate, 2) if m.request_rate is not None else "inf",
            f"{_cell(m.completed)}/{_cell(m.failed)}", _cell(f["output_throughput"]), _cell(f["median_ttft_ms"]),
            _cell(f["p99_ttft_ms"]), _cell(f["median_tpot_ms"], 2), _cell(f["median_decode_rate_tok_s"]),
            m.status,
        ))
    numeric = {5, 6, 7, 8, 9, 10, 11, 12}
    widths = [max(map(len, column)) for column in zip(*rows)]
    line = "  ".join(f"{{:{'>' if i in numeric else '<'}{w}}}" for i, w in enumerate(widths)).format
    units = "latencies in ms, rates in tokens/s; rate inf: closed loop"
    n = len(rows) - 1
    return "\n".join([*(line(*row).rstrip() for row in rows), f"{n} run{'s' if n != 1 else ''} ({units})"])


# -- CSV -------------------------------------------------------------------------------------------

_META_HEAD = ("run_id", "folder", "created_at", "label", "variant", "model", "engine", "concurrency",
              "request_rate", "has_records", "status", "complete", "why_not_complete")


def _csv_value(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    return "" if value is None else value


def _write_csv(store: Store, runs: Sequence[StoredRun], target: str) -> None:
    """The runs as CSV: who and what, then ``config.*`` (every configuration field; a list or table as
    JSON), then every flat key any of them has, in the order they first appear."""
    data = store.flat([run.run_id for run in runs])
    config_keys: dict[str, None] = {}
    flat_keys: dict[str, None] = dict.fromkeys(KEY_FIGURES)
    for config, flat in data.values():
        config_keys.update(dict.fromkeys(config))
        flat_keys.update(dict.fromkeys(flat))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*_META_HEAD, *(f"config.{k}" for k in config_keys), *flat_keys])
    for run in runs:
        config, flat = data.get(run.run_id, ({}, {}))
        m = run.meta
        writer.writerow([
            run.run_id, run.folder, m.created_at, m.label, m.variant, m.model, m.engine, m.concurrency,
            m.request_rate, int(run.has_records), m.status, int(m.complete), flat_why(flat) if not m.complete else "",
            *(_csv_value(config.get(k)) for k in config_keys), *(_csv_value(flat.get(k)) for k in flat_keys),
        ])
    text = out.getvalue()
    if target == "-":
        sys.stdout.write(text)
        return
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise StoreError(f"--csv {target}: {exc.strerror or exc}") from None
    print(f"wrote {len(runs)} run{'s' if len(runs) != 1 else ''} to {target}")
