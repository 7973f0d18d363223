"""The results store's queries over 10,000 runs, timed (target: a query under 100 ms).

One real run against the synthetic server gives a result document; 10,000 index rows are made from
it, each with its own label, model, variant and date (as a long study would leave them), through the
same insert the store uses. A query reads the index alone, so the folders are left out, except for
a sample of whole ``Store.add`` calls, timed to price a run's folder.

Each query is run several times and its median and max printed, with the rows it returned.

Usage (from the repository root)::

    .venv/bin/python bench/store_query.py             # ~1 minute
    .venv/bin/python bench/store_query.py --runs 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import copy
import datetime
import io
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from fastbench import BenchConfig, run
from fastbench.cli import runs as runs_cli
from fastbench.study.runfile import RunMeta, load_result, run_meta
from fastbench.study.store import KEY_FIGURES, Store

TARGET_MS = 100.0
MODELS = ("google/gemma-3-27b-it", "Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct", "gemma-26b-a4b")
VARIANTS = ("base", "eagle3", "mtp", "ngram", None)


def _one_real_run(where: Path) -> tuple[dict[str, Any], bytes]:
    run(BenchConfig(num_prompts=64, concurrency=8, random_input_len=64, random_output_len=16,
                    synthetic_args=("--ttft-ms", "5", "--itl-ms", "2"), result_json=where / "r.json",
                    save_detailed=where / "d.jsonl"))
    return load_result(where / "r.json"), (where / "d.jsonl").read_bytes()


def _fill(store: Store, doc: dict[str, Any], n: int) -> None:
    start = datetime.datetime(2025, 1, 1).timestamp()
    with store._transaction() as db:
        for i in range(n):
            d = copy.deepcopy(doc) if i == 0 else doc
            config = d["fastbench"]["config"]
            config["label"] = f"sweep-{i // 24:04d}"
            config["variant"] = VARIANTS[i % len(VARIANTS)]
            d["model_id"] = MODELS[(i // 24) % len(MODELS)]
            d["max_concurrency"] = 2 ** (i % 8)
            created = datetime.datetime.fromtimestamp(start + i * 600).astimezone()
            d["fastbench"]["created_at"] = created.isoformat(timespec="seconds")
            d["p99_ttft_ms"] = 10.0 + i % 97
            run_id = f"{created:%Y%m%d-%H%M%S}-{i:06x}"
            store._insert(db, run_id, d, run_meta(d), has_records=True)


def _as_version_1(store: Store) -> list[tuple[str, RunMeta, dict[str, Any]]]:
    """Every run as schema 1 read them, for comparison: 30 columns a row, each row's meta and figures
    built at once."""
    columns = ", ".join(("run_id", "folder", "has_records", *RunMeta._fields, *KEY_FIGURES))
    rows = store._db.execute(f"SELECT {columns} FROM runs ORDER BY created_unix DESC, run_id DESC").fetchall()
    n = len(RunMeta._fields)
    out = []
    for row in reversed(rows):
        meta = list(row[3:3 + n])
        meta[13] = bool(meta[13])
        out.append((row[0], RunMeta._make(meta), dict(zip(KEY_FIGURES, row[3 + n:]))))
    return out


def _command_ms(argv: list[str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _time(what: Callable[[], Any], rounds: int) -> tuple[float, float, Any]:
    times, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = what()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), max(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--adds", type=int, default=50, help="whole Store.add calls to time (folders written)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        doc, records = _one_real_run(where)
        root = where / "store"
        with Store(root, create=True) as store:
            t0 = time.perf_counter()
            _fill(store, doc, args.runs)
            fill_s = time.perf_counter() - t0
            add_ms = []
            for _ in range(args.adds):
                t0 = time.perf_counter()
                store.add(doc, card="card", records_jsonl=records)
                add_ms.append((time.perf_counter() - t0) * 1e3)
        total = args.runs + args.adds
        since = datetime.datetime(2025, 2, 1).timestamp()
        until = datetime.datetime(2025, 2, 8).timestamp()
        with Store(root) as store:
            an_id = store.query(limit=1)[0].run_id
            queries: list[tuple[str, Callable[[], Any]]] = [
                ("open the store (connect, schema check)", lambda: Store(root).close()),
                (f"every run ({total:,})", lambda: store.query()),
                ("every run, read as schema 1 did (30 columns, rows built at once; for comparison)",
                 lambda: _as_version_1(store)),
                ("every run, each one's meta and figures read", lambda: [(r.meta, r.figures) for r in store.query()]),
                ("--label 'sweep-01*'", lambda: store.query(label="sweep-01*")),
                ("--model 'Qwen/*' --variant eagle3", lambda: store.query(model="Qwen/*", variant="eagle3")),
                ("--since/--until one week", lambda: store.query(since=since, until=until)),
                ("--last 20", lambda: store.query(limit=20)),
                ("a run by id prefix", lambda: store.resolve(an_id[:-2])),
                ("table of every run (query + render)", lambda: runs_cli.render_table(store.query())),
            ]
            print(f"# Results store: queries over {total:,} runs\n")
            print(f"index filled in {fill_s:.1f} s; a whole Store.add (folder: result, card, gzip records, "
                  f"hlog; fsyncs; index row) median {statistics.median(add_ms):.1f} ms, max {max(add_ms):.1f} ms "
                  f"over {args.adds}\n")
            print(f"| query | rows | median ms | max ms | under {TARGET_MS:.0f} ms |")
            print("|---|---:|---:|---:|---|")
            for name, query in queries:
                median, top, out = _time(query, args.rounds)
                rows = len(out) if isinstance(out, list) else (out.count("\n") - 1 if isinstance(out, str) else 1)
                print(f"| {name} | {rows:,} | {median:.1f} | {top:.1f} | {'yes' if median < TARGET_MS else 'NO'} |")

            def csv_all() -> int:
                buffer = io.StringIO()
                with redirect_stdout(buffer):
                    runs_cli._write_csv(store, store.query(), "-")
                return buffer.getvalue().count("\n")

            median, top, lines = _time(csv_all, max(1, args.rounds // 3))
            print(f"| CSV of every run, all flat keys (not a query: parses each row's JSON) | {lines - 1:,} | "
                  f"{median:.1f} | {top:.1f} | - |")
        command = ["-m", "fastbench", "runs", "--store", str(root), "--last", "20"]
        # Before the lazy fastbench/__init__, `import fastbench` imported the API (aiohttp, numpy): the same
        # command with the API imported first is that start, measured beside today's.
        eager = ["-c", "import runpy, fastbench.api; "
                 "runpy.run_module('fastbench', run_name='__main__')", *command[2:]]
        bare = ["-c", "pass"]
        lazy_ms, eager_ms, python_ms = (_command_ms([sys.executable, *argv], 5) for argv in (command, eager, bare))
        print(f"\n`fastbench runs --last 20` as a command, median of 5, Python's own start ({python_ms:.0f} ms) "
              f"included: {lazy_ms:.0f} ms; with the API imported first, as `import fastbench` did before: "
              f"{eager_ms:.0f} ms ({eager_ms / lazy_ms:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
