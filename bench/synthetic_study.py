"""A synthetic study written straight into a results store: run folders whose result files are made,
not measured, from one real run's result (so every field a reader expects is there), with the figures
of a simple batching model, so that a thousand stored runs cost seconds instead of a thousand
benchmarks. For bench/plot_store.py and the README's example figure; never a measurement.

The model, per variant: a decode step takes ``step_ms + per_seq_ms x concurrency`` and yields
``accept`` tokens per stream (speculative decoding drafts, so its steps cost more and yield more);
per-stream decode rate = accept / step, aggregate throughput = concurrency x that x 0.95; latencies
follow; each run gets 3% noise. With these numbers EAGLE3 is ahead of the baseline per stream at low
concurrency and behind it from about 24 on, as such studies find.

    .venv/bin/python bench/synthetic_study.py STORE [--repeats 3] [--runs N] [--variants base,eagle3]
    .venv/bin/fastbench report STORE --out report/

The README's example figure, docs/study-crossover.svg, is report/crossover.svg of
``synthetic_study.py STORE --repeats 3 --variants base,eagle3``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from fastbench import BenchConfig, run
from fastbench.study.runfile import load_result

# variant -> (step_ms, per_seq_ms, accept tokens per step, per-position acceptance)
VARIANTS: dict[str, tuple[float, float, float, tuple[float, ...]]] = {
    "base": (10.0, 0.6, 1.0, ()),
    "eagle3": (14.0, 2.0, 2.4, (0.72, 0.46, 0.26)),
    "ngram": (11.0, 1.1, 1.5, (0.38, 0.12)),
}
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128)
SWEEP = "synthetic-crossover"


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--runs", type=int, default=None, help="how many runs (default: every cell x --repeats)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)} (default: all)")
    args = ap.parse_args()
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        ap.error(f"--variants takes {', '.join(VARIANTS)}, got {args.variants!r}")
    with tempfile.TemporaryDirectory() as scratch:
        base = template(Path(scratch))
    written = write_study(args.store, base, args.repeats, args.runs, variants=variants)
    print(f"wrote {written} synthetic runs into {args.store}/runs (sweep {SWEEP}; indexed when the store is opened)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
