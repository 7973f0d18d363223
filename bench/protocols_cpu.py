"""The client's CPU per chunk on each streamed API, side by side in one run: ``fastbench validate`` at 256 streams
against the synthetic server speaking chat completions, the Responses API and Anthropic Messages, the three in
a rotating order each round, so that the host's drift falls on all alike. Target: Responses and Messages within
10 % of chat.

Each API's chunk is one output event (a chat chunk, a ``response.output_text.delta``, a ``content_block_delta``);
the CPU is the client process's over the measured window, divided by the output events, so that each API's
other events (Responses' opening and closing ones, Messages' block starts and stops) are counted in it.
"vs chat, paired" is the median over rounds of the API's CPU over chat's in the same round: one round's three
runs lie seconds apart, so the host's drift between rounds (which moves a median of ~2 s runs by 10 %) cancels.

    .venv/bin/python bench/protocols_cpu.py                  # 9 rounds, 64 tokens per request, ~2 minutes
    .venv/bin/python bench/protocols_cpu.py --tokens-per-chunk 1-4 --json raw.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
APIS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}


def run_validate(endpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "fastbench", "validate", "--endpoint", endpoint, "--concurrency",
               str(args.concurrency), "--tokens-per-chunk", args.tokens_per_chunk, "--itl-ms", str(args.itl_ms),
               "--output-len", str(args.output_len), "--num-requests", str(args.num_requests), "--pin", "--quiet",
               "--json", out]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}  # this tree's build
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=900, env=env)
        if not os.path.exists(out):
            raise RuntimeError(f"validate --endpoint {endpoint} failed ({proc.returncode}): {proc.stderr.strip()}")
        with open(out) as f:
            report: dict[str, Any] = json.load(f)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--rounds", type=int, default=9,
                   help="runs of each API, in a rotating order (fewer than 9 do not settle a 10 %% gap on a shared "
                   "2-core host)")
    p.add_argument("--tokens-per-chunk", default="1")
    p.add_argument("--itl-ms", type=float, default=20.0)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--num-requests", type=int, default=None, help="default: 3 x --concurrency")
    p.add_argument("--json", help="also write every run's figures here")
    a = p.parse_args(argv)
    if a.num_requests is None:
        a.num_requests = 3 * a.concurrency
    names = list(APIS)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            report = run_validate(APIS[name], a)
            coalescing = report.get("coalescing") or {}
            runs[name].append({"cpu_us_chunk": report["client_cpu_us_per_chunk"], "skew_p99": report["skew"]["p99"],
                               "chunks": report["chunks"], "failed": report["failed"], "verdict": report["verdict"],
                               "wakeups": report["wakeups"], "ends_watched": report["ends_watched"],
                               "ends_unwatched": coalescing.get("ends_unwatched"),
                               "streams_open_mean": report["streams_open_mean"]})
            print(f"round {r + 1} {name:<10} {report['client_cpu_us_per_chunk']:.2f} us/chunk, skew p99 "
                  f"{report['skew']['p99']:.3f} ms, {report['chunks']} chunks, {report['wakeups']} wake-ups, "
                  f"{coalescing.get('ends_unwatched')} ends unwatched, {report['streams_open_mean']:.2f} open, "
                  f"{report['failed']} failed", flush=True)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    chat = statistics.median(x["cpu_us_chunk"] for x in runs["chat"])
    print(f"\n{a.concurrency} streams, {a.output_len} tokens x {a.num_requests} requests, {a.tokens_per_chunk} "
          f"tokens/chunk, {a.itl_ms:g} ms between chunks; {a.rounds} rounds; load average {load}\n")
    print("| API | client CPU us/chunk, median (min-max) | vs chat | vs chat, paired | wake-ups per chunk, median "
          "| ends unwatched | streams open | skew p99 ms, median | failed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        cpu = [x["cpu_us_chunk"] for x in runs[name]]
        med = statistics.median(cpu)
        paired = statistics.median(x / c["cpu_us_chunk"] for x, c in zip(cpu, runs["chat"]))
        wakes = statistics.median(x["wakeups"] / x["chunks"] for x in runs[name])
        unwatched = sum(x["ends_unwatched"] or 0 for x in runs[name])
        print(f"| {name} | {med:.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | {100 * (med / chat - 1):+.1f} % | "
              f"{100 * (paired - 1):+.1f} % | {wakes:.3f} | {unwatched} of {a.num_requests * a.rounds} | "
              f"{statistics.median(x['streams_open_mean'] for x in runs[name]):.2f} | "
              f"{statistics.median(x['skew_p99'] for x in runs[name]):.3f} | {sum(x['failed'] for x in runs[name])} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"settings": vars(a), "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
