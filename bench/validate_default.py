"""``fastbench validate`` with each build's default reading, side by side: this build (``--coalesce-ms
auto``) against another (e.g. main before auto: reads on every arrival), alternating which goes first.

For each setting it prints skew p99, the TTFT and chunk-gap p99-level error bounds, streams kept open,
client CPU per chunk, wake-ups per second and, for auto, the tick it chose and when. Client and server are
pinned to different CPUs where there are two (validate --pin).

    .venv/bin/python bench/validate_default.py --baseline-python /tmp/base/.venv/bin/python
    .venv/bin/python bench/validate_default.py --baseline-python ... --rounds 3 --tokens-per-chunk 1 1-4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any


def run_validate(python: str, concurrency: int, tokens_per_chunk: str, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [python, "-m", "fastbench", "validate", "--concurrency", str(concurrency), "--tokens-per-chunk",
               tokens_per_chunk, "--pin", "--quiet", "--json", out, *extra]
        # the other build's package, not this tree's: run from a neutral directory
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=900)
        if not os.path.exists(out):
            raise RuntimeError(f"{python} validate failed ({proc.returncode}): {proc.stderr.strip()}")
        with open(out) as f:
            report: dict[str, Any] = json.load(f)
    return report


def figures(r: dict[str, Any]) -> dict[str, Any]:
    series = {x["name"]: x for x in r["series"]}
    chosen = r.get("coalescing")
    first_tick = next((c for c in chosen["changes"] if c["tick_ms"] > 0), None) if chosen else None
    return {
        "verdict": r["verdict"],
        "skew_p50": r["skew"]["p50"],
        "skew_p99": r["skew"]["p99"],
        "ttft_bound_p99": series["ttft"]["error_bound_p99_ms"],
        "gap_bound_p99": series["itl_chunk"]["error_bound_p99_ms"],
        "streams_open": r["streams_open_mean"],
        "cpu_us_chunk": r["client_cpu_us_per_chunk"],
        "wakeups_s": r["wakeups"] / r["duration_s"] if r["duration_s"] else None,
        "multi_share": r["multi_event_read_share"],
        "tick_ms": chosen["tick_ms"] if chosen else None,
        "first_tick_ms": first_tick["tick_ms"] if first_tick else None,
        "first_tick_at_s": first_tick["at_s"] if first_tick else None,
        "changes": chosen["changes_total"] if chosen else None,
        # of the reads, those made on the tick (the rest on every arrival, learning included)
        "tick_share": chosen["reads_on_tick"] / max(1, chosen["reads_on_tick"] + chosen["reads_on_arrival"])
        if chosen else None,
    }


DIGITS = {"streams_open": 2, "cpu_us_chunk": 2, "tick_ms": 2, "tick_share": 2, "wakeups_s": 0, "multi_share": 4}


def _f(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-python", required=True, help="python of a venv with the other build")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--tokens-per-chunk", nargs="+", default=["1", "1-4"])
    p.add_argument("--rounds", type=int, default=3, help="runs of each build per setting, alternating")
    p.add_argument("--json", help="also write every run's figures here")
    a = p.parse_args(argv)
    builds = {"this (auto)": sys.executable, "baseline": a.baseline_python}
    with open("/proc/loadavg") as f:
        print(f"load average before: {f.read().split()[:3]}")
    results: list[dict[str, Any]] = []
    for k, tpc in enumerate(a.tokens_per_chunk):
        for rnd in range(a.rounds):
            order = list(builds) if (k + rnd) % 2 == 0 else list(reversed(builds))
            for name in order:
                fig = figures(run_validate(builds[name], a.concurrency, tpc, []))
                fig.update(build=name, tokens_per_chunk=tpc, round=rnd)
                results.append(fig)
                print(f"  {tpc:>4} tok/chunk {name:<12} {fig['verdict']} skew p50 {_f(fig['skew_p50'])} "
                      f"p99 {_f(fig['skew_p99'])} ms, "
                      f"CPU {_f(fig['cpu_us_chunk'], 2)} us/chunk, streams {_f(fig['streams_open'], 2)}, tick "
                      f"{_f(fig['tick_ms'], 2)} ms (first {_f(fig['first_tick_ms'], 2)} at {fig['first_tick_at_s']} s, "
                      f"{fig['changes']} changes)", flush=True)
    cols = ["skew_p50", "skew_p99", "ttft_bound_p99", "gap_bound_p99", "streams_open", "cpu_us_chunk", "wakeups_s",
            "multi_share", "tick_ms", "tick_share"]
    print(f"\nMedians over {a.rounds} rounds (range), validate --concurrency {a.concurrency}:\n")
    print("| tokens/chunk | build | " + " | ".join(cols) + " | verdicts |")
    print("|---|---|" + "---|" * (len(cols) + 1))
    for tpc in a.tokens_per_chunk:
        for name in builds:
            rs = [r for r in results if r["tokens_per_chunk"] == tpc and r["build"] == name]
            cells = []
            for c in cols:
                vals = [r[c] for r in rs if r[c] is not None]
                digits = DIGITS.get(c, 3)
                cells.append("-" if not vals else f"{statistics.median(vals):.{digits}f} "
                             f"({min(vals):.{digits}f}-{max(vals):.{digits}f})")
            print(f"| {tpc} | {name} | " + " | ".join(cells) + f" | {' '.join(r['verdict'] for r in rs)} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
