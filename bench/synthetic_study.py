"""The crossover figure of docs/sweep.md, measured: a sweep of the synthetic server's engine model, a baseline and an
EAGLE3-like speculative variant x concurrency 1-64 x 2 repeats (bench/crossover_study.toml), then
`fastbench report`, whose crossover.svg becomes docs/study-crossover.svg. Measured against the synthetic
engine model (src/fastbench/synthetic/stepmodel.py: a step's time grows with the batch, speculation
verifies K + 1 tokens a step at their cost and keeps 1 + accepted), not a GPU: the figure shows that the
study's machinery finds a real crossing, not how any GPU behaves. About 2 minutes on a 2-core host.

    .venv/bin/python bench/synthetic_study.py                        # writes docs/study-crossover.svg
    .venv/bin/python bench/synthetic_study.py --store runs/ --figure /tmp/crossover.svg --repeats 3

which runs, with the store kept under --store (a temporary one without it):

    .venv/bin/fastbench sweep bench/crossover_study.toml --store STORE
    .venv/bin/fastbench report --store STORE --sweep synthetic-crossover --out STORE/report

``--made-up-store STORE`` instead writes a synthetic study straight into a store, for bench/plot_store.py
(a thousand stored runs in seconds): run folders whose result files are made, not measured, from one
real run's result (so every field a reader expects is there), with the figures of a simple batching
model; never a measurement, and no longer docs/sweep.md's figure. Its model, per variant: a decode step
takes ``step_ms + per_seq_ms x concurrency`` and yields ``accept`` tokens per stream; per-stream decode
rate = accept / step, aggregate throughput = concurrency x that x 0.95; latencies follow; each run gets
3% noise.

    .venv/bin/python bench/synthetic_study.py --made-up-store STORE [--repeats 3] [--runs N] [--variants base,eagle3]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from fastbench import BenchConfig, run
from fastbench.study.runfile import load_result

# The made-up store's model. variant -> (step_ms, per_seq_ms, accept tokens per step, per-position acceptance)
VARIANTS: dict[str, tuple[float, float, float, tuple[float, ...]]] = {
    "base": (10.0, 0.6, 1.0, ()),
    "eagle3": (14.0, 2.0, 2.4, (0.72, 0.46, 0.26)),
    "ngram": (11.0, 1.1, 1.5, (0.38, 0.12)),
}
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128)
SWEEP = "synthetic-crossover"  # bench/crossover_study.toml's name, and the made-up store's


def template(where: Path) -> dict[str, Any]:
    """One real run's result document, against the built-in synthetic server (spec-decode counters on)."""
    run(BenchConfig(num_prompts=32, concurrency=4, random_input_len=64, random_output_len=32,
                    synthetic_args=("--ttft-ms", "5", "--itl-ms", "2", "--tokens-per-chunk", "2-3"),
                    result_json=where / "template.json", progress=False))  # type: ignore[call-arg]
    return load_result(where / "template.json")


def make_doc(base: dict[str, Any], variant: str, conc: int, repeat: int, created: datetime.datetime,
             rng: random.Random) -> dict[str, Any]:
    step_ms, per_seq_ms, accept, positions = VARIANTS[variant]
    noise = lambda: rng.gauss(1.0, 0.03)  # noqa: E731 - one line, used only here
    step = (step_ms + per_seq_ms * conc) * noise()
    per_stream = accept * 1000.0 / step
    tpot = 1000.0 / per_stream
    ttft = (30.0 + 4.0 * conc) * noise()
    doc = copy.deepcopy(base)
    fb = doc["fastbench"]
    fb["created_at"] = created.isoformat(timespec="seconds")
    fb["config"]["variant"] = variant
    fb["config"]["label"] = SWEEP
    doc["max_concurrency"] = conc
    doc["model_id"] = "synthetic/llama-like-8b"
    doc["sweep"] = SWEEP
    doc["sweep_cell"] = orjson.dumps({"concurrency": conc, "repeat": repeat, "variant": variant},
                                     option=orjson.OPT_SORT_KEYS).decode()
    doc["output_throughput"] = conc * per_stream * 0.95 * noise()
    doc["request_throughput"] = doc["output_throughput"] / 256
    for stat, factor in (("mean", 1.05), ("median", 1.0), ("p99", 1.6)):
        doc[f"{stat}_ttft_ms"] = ttft * factor
        doc[f"{stat}_tpot_ms"] = tpot * (1.0 + (factor - 1.0) / 3)
        doc[f"{stat}_itl_ms"] = step * (1.0 + (factor - 1.0) / 2)
        doc[f"{stat}_e2el_ms"] = ttft * factor + 255 * tpot
    doc["p90_ttft_ms"], doc["p90_tpot_ms"] = ttft * 1.3, tpot * 1.1
    doc["p90_itl_ms"], doc["p90_e2el_ms"] = step * 1.2, ttft * 1.3 + 255 * tpot * 1.05
    decode = fb["distributions"]["decode_rate"]
    for key in list(decode):
        if key.endswith("_tok_s"):
            decode[key] = per_stream * noise()
    decode["median_tok_s"] = per_stream
    if positions:
        rates = [min(1.0, p * noise()) for p in positions]
        doc["spec_decode_per_position_acceptance_rates"] = rates
        doc["spec_decode_acceptance_length"] = 1.0 + sum(rates)
        doc["spec_decode_acceptance_rate"] = 100.0 * sum(rates) / len(rates)
    else:
        for key in [k for k in doc if k.startswith("spec_decode_")]:
            del doc[key]
        fb["tokens"]["mean_tokens_per_chunk"] = 1.0
    return doc


def write_study(store: Path, base: dict[str, Any], repeats: int, runs: int | None = None, seed: int = 1,
                variants: tuple[str, ...] = tuple(VARIANTS)) -> int:
    """Write the study's run folders into ``store``/runs (no index: the store builds it when opened);
    ``runs`` caps the count (the cells repeated in turn until it is reached). Returns the runs written."""
    rng = random.Random(seed)
    cells = [(v, c) for v in variants for c in CONCURRENCIES]
    total = runs if runs is not None else len(cells) * repeats
    start = datetime.datetime(2025, 3, 1, 9, 0).astimezone()
    (store / "runs").mkdir(parents=True, exist_ok=True)
    for i in range(total):
        variant, conc = cells[i % len(cells)]
        created = start + datetime.timedelta(minutes=2 * i)
        doc = make_doc(base, variant, conc, i // len(cells), created, rng)
        folder = store / "runs" / f"{created:%Y%m%d-%H%M%S}-{i:06x}"
        folder.mkdir()
        (folder / "result.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY))
    return total


BENCH = Path(__file__).resolve().parent
SWEEP_FILE = BENCH / "crossover_study.toml"
FIGURE = BENCH.parent / "docs" / "study-crossover.svg"


def measure(store: Path, figure: Path, repeats: int | None) -> None:
    """Sweep bench/crossover_study.toml into ``store``, report it, and copy its crossover.svg to ``figure``."""
    fastbench = [sys.executable, "-m", "fastbench"]
    sweep = [*fastbench, "sweep", str(SWEEP_FILE), "--store", str(store)]
    if repeats is not None:
        sweep += ["--repeats", str(repeats)]
    subprocess.run(sweep, check=True)
    report = store / "report"
    subprocess.run([*fastbench, "report", "--store", str(store), "--sweep", SWEEP, "--out", str(report)], check=True)
    figure.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(report / "crossover.svg", figure)
    notes = [line for line in (report / "study.md").read_text().splitlines() if " cross at " in line]
    print("\n".join(notes) or "no crossing found")
    print(f"wrote {figure} (from {report / 'crossover.svg'})")


def made_up(store: Path, repeats: int, runs: int | None, variants_text: str, ap: argparse.ArgumentParser) -> None:
    variants = tuple(v.strip() for v in variants_text.split(",") if v.strip())
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        ap.error(f"--variants takes {', '.join(VARIANTS)}, got {variants_text!r}")
    with tempfile.TemporaryDirectory() as scratch:
        base = template(Path(scratch))
    written = write_study(store, base, repeats, runs, variants=variants)
    print(f"wrote {written} made-up runs into {store}/runs (sweep {SWEEP}; indexed when the store is opened)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, default=None,
                    help="keep the measured sweep's store (and its report/) here (default: a temporary one)")
    ap.add_argument("--figure", type=Path, default=FIGURE, help=f"where the crossover goes (default {FIGURE})")
    ap.add_argument("--repeats", type=int, default=None,
                    help="repeats per cell (default: the sweep file's 2; made-up: 3)")
    made = ap.add_argument_group("made-up store (bench/plot_store.py's; no measurement)")
    made.add_argument("--made-up-store", type=Path, default=None, metavar="STORE",
                      help="write made-up runs into STORE instead of measuring")
    made.add_argument("--runs", type=int, default=None, help="how many made-up runs (default: every cell x --repeats)")
    made.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)} (default: all)")
    args = ap.parse_args()
    if args.repeats is not None and args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.made_up_store is not None:
        made_up(args.made_up_store, args.repeats or 3, args.runs, args.variants, ap)
        return 0
    if args.store is not None:
        measure(args.store, args.figure, args.repeats)
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        measure(Path(scratch) / "store", args.figure, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
