"""``fastbench report``: one self-contained HTML page (figures, the table of cells, every run's card)
and a Markdown study card, from a sweep, a store query or the runs named (study/report.py)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastbench.cli.argtypes import LaidOutHelpFormatter, Parser
from fastbench.cli.runs import STORE_ENV, add_filter_args, default_store, parse_when
from fastbench.exceptions import FastbenchError
from fastbench.redact import redact_argv
from fastbench.study.figures_data import RunPoint, load_points
from fastbench.study.store import INDEX_NAME, RUNS_DIR
from fastbench.study.sweepplan import Journal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ("main",)

EPILOG = f"""\
What to report (SOURCE):
  a sweep file (FILE.toml)   the runs of that sweep, in its store; its journal adds the failed and
                             skipped cells, with their reasons
  --sweep NAME               the same by name, in --store
  a store directory          every run in it that matches the filters, of one sweep (else --sweep
                             NAME, or --compare-sweeps: each sweep its own series, never one mean)
  run ids, folders, files    those runs (ids looked up in --store)
  nothing                    the runs of --store (${STORE_ENV}, else ./fastbench-runs) that match the filters

Writes OUT/report.html (one file: the figures as inline SVG, the cells table and each run's card; it
opens offline and names nothing outside itself), OUT/study.md (the study card in the run cards' layout,
with the cells table and the crossover figure) and the figures as OUT/NAME.svg and .png. Needs
matplotlib: pip install 'fastbench-llm[plot]'. Exit status: 0 done, 2 bad input.
"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fastbench report", description="One self-contained HTML report and a Markdown study card "
               "from a sweep, a store query or runs.", epilog=EPILOG, formatter_class=LaidOutHelpFormatter)
    p.add_argument("sources", nargs="*", metavar="SOURCE", help="a sweep file, a store directory, or run ids / "
                   "folders / result files (below)")
    p.add_argument("--store", metavar="DIR", default=None, help=f"the store (default: ${STORE_ENV}, else "
                   "./fastbench-runs; a sweep file's own store)")
    p.add_argument("--sweep", metavar="NAME", default=None, help="the runs of the sweep of this name")
    p.add_argument("--compare-sweeps", action="store_true", help="report runs of several sweeps side by side, "
                   "each its own series and rows (without it, a store or filters must select one sweep)")
    p.add_argument("--out", metavar="DIR", default="report", help="where the files go (default ./report)")
    p.add_argument("--title", metavar="TEXT", default=None, help="the report's title (default: the sweep's name, "
                   "else the label filter, else 'fastbench study')")
    add_filter_args(p.add_argument_group("filters (as fastbench runs takes them; not with runs named)"))
    return p


def main(argv: Sequence[str]) -> int:
    ns = build_parser().parse_intermixed_args(list(argv))
    try:
        return _main(ns, list(argv))
    except FastbenchError as exc:
        print(f"fastbench report: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _sweep_file(path: str) -> tuple[str, str | None]:
    """A sweep file's (name, store), read as `fastbench sweep` reads them."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise FastbenchError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise FastbenchError(f"{path}: not valid TOML ({exc})") from None
    sweep = doc.get("sweep")
    sweep = sweep if isinstance(sweep, dict) else {}
    name, store = sweep.get("name") or Path(path).stem, sweep.get("store")
    if not isinstance(name, str) or (store is not None and not isinstance(store, str)):
        raise FastbenchError(f"{path}: [sweep] name and store must be text")
    return name, store


def _main(ns: argparse.Namespace, argv: list[str]) -> int:
    from fastbench.study.report import write_report  # matplotlib only now

    filters: dict[str, Any] = {"label": ns.label, "model": ns.model, "variant": ns.variant,
                               "since": parse_when(ns.since) if ns.since else None,
                               "until": parse_when(ns.until, end_of_day=True) if ns.until else None,
                               "limit": ns.last}
    store, sweep, refs = ns.store, ns.sweep, list(ns.sources)
    sweep_files = [r for r in refs if r.endswith(".toml") and Path(r).is_file()]
    stores = [r for r in refs if Path(r).is_dir() and any((Path(r) / n).exists() for n in (INDEX_NAME, RUNS_DIR))]
    command_lines: list[str] = []
    if sweep_files or stores:
        if len(refs) != 1:
            raise FastbenchError("give one sweep file or one store directory, or runs, not a mix")
        if sweep_files:
            sweep_name, sweep_store = _sweep_file(refs[0])
            if sweep is not None and sweep != sweep_name:
                raise FastbenchError(f"--sweep {sweep} names another sweep than {refs[0]} ({sweep_name})")
            sweep, store = sweep_name, store or sweep_store
            command_lines.append(f"fastbench sweep {shlex.quote(refs[0])}")
        else:
            store = refs[0]
        refs = []
    if refs and (sweep is not None or any(v is not None for v in filters.values())):
        raise FastbenchError("give runs, or a sweep or filters, not both")
    store = store or default_store()
    points = load_points(refs, store, filters)
    journal: list[dict[str, Any]] = []
    if sweep is not None:
        points = [p for p in points if p.flat.get("sweep") == sweep]
        journal = [e for e in Journal(store, sweep).read() if e.get("sweep") in (None, sweep)]
        filtered = any(v is not None for v in filters.values())
        if not points and (not journal or filtered):  # a sweep whose every cell failed is still reported
            raise FastbenchError(f"no runs of the sweep {sweep!r} in the store {store}"
                                 + (" match the filters" if filtered else ""))
    elif not points:
        raise FastbenchError("no runs to report (none named, or none match in the store)")
    sweeps = {p.sweep for p in points}
    if len(sweeps) > 1 and not refs and not ns.compare_sweeps:  # a store's runs: never one mean of two sweeps
        names = ", ".join(sorted(name or "(runs outside a sweep)" for name in sweeps))
        raise FastbenchError(f"the runs come from {len(sweeps)} sweeps ({names}): give --sweep NAME for one, or "
                             "--compare-sweeps to draw each as its own series")
    one_sweep = next(iter(sweeps)) if len(sweeps) == 1 else None
    title = ns.title or sweep or one_sweep or ns.label or "fastbench study"
    source = (f"sweep {sweep} in the store {store}" if sweep is not None else
              "the runs named" if refs else f"the store {store}" + _filters_text(filters))
    command_lines.append(shlex.join(["fastbench", "report", *redact_argv(argv)]))
    html_path, card_path = write_report(points, Path(ns.out), title=title, source=source,
                                        commands=command_lines, journal=journal,
                                        configuration=_configuration(points))
    left = sum(not p.complete for p in points)
    print(f"wrote {html_path} (self-contained), {card_path} and the figures in {ns.out}"
          + (f"; {left} incomplete run{'s' if left != 1 else ''} listed apart, not averaged" if left else ""))
    return 0


def _filters_text(filters: dict[str, Any]) -> str:
    given = [f"{k} {v}" for k, v in filters.items() if v is not None and k in ("label", "model", "variant")]
    return f" ({', '.join(given)})" if given else ""


def _configuration(points: Sequence[RunPoint]) -> list[tuple[str, str]]:
    """The study card's Configuration rows the runs share (model, engine, dataset)."""
    rows = []
    for label, key in (("Model", "model_id"), ("Backend", "endpoint_type"), ("Dataset", "dataset_name")):
        values = sorted({str(v) for p in points if (v := p.flat.get(key)) not in (None, "")})
        if values:
            rows.append((label, ", ".join(values)))
    versions = sorted({str(v) for p in points if (v := p.flat.get("fastbench_version"))})
    if versions:
        rows.append(("Client", "fastbench " + ", ".join(versions)))
    return rows
