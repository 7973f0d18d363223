"""Indexing and plotting 1,000 stored runs, timed (target: both together under 10 s).

The runs are written straight into a temporary store by bench/synthetic_study.py's made-up mode
(``--made-up-store``'s functions: result files made from one real run's, three variants x eight
concurrencies, repeated to 1,000), without an index. Then, each round:

- index: open the store, which finds no index.sqlite and builds it from the 1,000 folders (what
  ``fastbench runs --reindex`` does);
- read: the runs and their flat keys from the index, as `fastbench plot` and `fastbench report` do;
- plot: `fastbench plot all`'s four figures (crossover, Pareto, latency, acceptance with per-position,
  which reads each spec-decode run's result file), each as PNG and SVG.

Medians over the rounds are printed, with the total against the target.

    .venv/bin/python bench/plot_store.py               # ~1-2 minutes
    .venv/bin/python bench/plot_store.py --runs 200 --rounds 2 --report
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from synthetic_study import template, write_study  # noqa: E402 - bench/ is not a package

from fastbench.study import plots  # noqa: E402
from fastbench.study.figures_data import load_points  # noqa: E402
from fastbench.study.store import INDEX_NAME, Store  # noqa: E402

TARGET_S = 10.0
FIGURES = (("crossover", plots.draw_crossover), ("pareto", plots.draw_pareto), ("latency", plots.draw_latency),
           ("acceptance", plots.draw_acceptance))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--report", action="store_true", help="also time fastbench report's HTML page and study card")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        base = template(root)
        t0 = time.perf_counter()
        write_study(root / "store", base, repeats=0, runs=args.runs)
        print(f"wrote {args.runs} run folders in {time.perf_counter() - t0:.1f} s (not timed below)")
        times: dict[str, list[float]] = {}

        def timed(name: str, t_start: float) -> None:
            times.setdefault(name, []).append(time.perf_counter() - t_start)

        for round_ in range(args.rounds):
            (root / "store" / INDEX_NAME).unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                (root / "store" / (INDEX_NAME + suffix)).unlink(missing_ok=True)
            t = time.perf_counter()
            with Store(root / "store") as store:
                count = store.count()
            timed("index", t)
            assert count == args.runs, count
            t = time.perf_counter()
            points = load_points([], str(root / "store"), {})
            timed("read", t)
            for name, draw in FIGURES:
                t = time.perf_counter()
                draw(points, root / f"plots-{round_}", ("png", "svg"))
                timed(name, t)
            if args.report:
                from fastbench.study.report import write_report

                t = time.perf_counter()
                write_report(points, root / f"report-{round_}", title="bench", source="bench", commands=[])
                timed("report (figures, page, card)", t)
        print(f"\n{args.runs} stored runs, median of {args.rounds} rounds:")
        medians = {name: statistics.median(values) for name, values in times.items()}
        for name, value in medians.items():
            spread = f"{min(times[name]):.2f}-{max(times[name]):.2f}"
            print(f"  {name:<30} {value:6.2f} s   (range {spread})")
        plot_s = sum(medians[name] for name, _ in FIGURES)
        total = medians["index"] + medians["read"] + plot_s
        print(f"  {'index + read + plot all':<30} {total:6.2f} s   target < {TARGET_S:.0f} s: "
              f"{'met' if total < TARGET_S else 'NOT met'} ({total / TARGET_S:.2f} of it)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
