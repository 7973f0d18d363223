"""How long building 100,000 multi-turn requests takes, beside a naive build of the same bodies.

Writes a JSONL file of conversations (10,000 of 10 turns, ~60-word user messages and ~120-word replies,
as ShareGPT's multi-turn conversations run) and builds the run's workload from it as a run does
(``await build_workload(...)``, history with the dataset's replies so that every body is built ahead;
lengths estimated, as without a tokenizer). Beside it, in the same run, the naive way: each turn's
whole body (its message list as Python dicts) serialised per request, its bodies dropped as made and, in
a second row, kept (a run holds every body before the first is sent: 600 MB of new memory, whose page
faults cost as much as the serialising on a virtual machine). Target: under 2 s for
100,000 requests. On a shared machine wall time follows the others' load (printed first); CPU time is
this build's own. Prints a Markdown table.

    .venv/bin/python bench/build_requests.py                 # 100,000 requests
    .venv/bin/python bench/build_requests.py --sessions 2000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import tempfile
import time

import orjson

from fastbench.config import BenchConfig
from fastbench.load.datasets import build_workload

TARGET_S = 2.0
TURNS = 10
WORDS = ("the", "model", "server", "token", "cache", "prefix", "answer", "question", "batch", "latency")


def _write(path: str, sessions: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for i in range(sessions):
            messages = [{"role": "system", "content": "You are a helpful assistant."}]
            for _ in range(TURNS):
                messages.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(30, 90)))})
                messages.append({"role": "assistant", "content": " ".join(rng.choices(WORDS, k=rng.randint(60, 180)))})
            f.write(orjson.dumps({"id": str(i), "messages": messages}) + b"\n")


def _naive(path: str, model: str, keep: bool) -> int:
    built = 0
    kept = []
    with open(path, "rb") as f:
        for line in f:
            messages = orjson.loads(line)["messages"]
            for k in range(1, len(messages), 2):
                body = {"model": model, "messages": messages[: k + 1], "max_tokens": 128, "stream": True,
                        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
                serialised = orjson.dumps(body)
                built += len(serialised)
                if keep:  # as a run must: every body is in memory before the first is sent
                    kept.append(serialised)
    return built


async def _build(config: BenchConfig) -> tuple[int, int]:
    # the workload stays inside: handing a 100,000-body result out of asyncio.run took a minute of repr()
    work = await build_workload(config, "m", max_model_len=None)
    return len(work.requests), sum(len(r.body) for r in work.requests)


def _timed(fn):  # type: ignore[no-untyped-def]
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000, help=f"conversations of {TURNS} turns")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three builds, in turn; medians shown")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    times: dict[str, list[tuple[float, float]]] = {"fastbench": [], "naive": [], "kept": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "conversations.jsonl")
        _write(path, args.sessions, 0)
        config = BenchConfig(endpoint="/v1/chat/completions", dataset_name="jsonl", dataset_path=path,
                             dataset_order="file", multi_turn=True, multi_turn_history="dataset",
                             num_prompts=args.sessions, max_model_len=1_000_000)
        for _ in range(args.rounds):
            (n, size), wall, cpu = _timed(lambda: asyncio.run(_build(config)))
            times["fastbench"].append((wall, cpu))
            naive_bytes, wall, cpu = _timed(lambda: _naive(path, "m", False))
            times["naive"].append((wall, cpu))
            _, wall, cpu = _timed(lambda: _naive(path, "m", True))
            times["kept"].append((wall, cpu))
    print(f"load average {os.getloadavg()[0]:.2f} after")
    wall_s = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu_s = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    target = TARGET_S * n / 100_000
    print()
    print(f"Medians of {args.rounds} rounds. Under 2 s judged on the build's own CPU time: on a quiet machine its "
          "wall time; on a loaded one the wall time waits for the others.\n")
    print("| build | requests | MB of bodies | wall s | CPU s | us/request (CPU) | under 2 s |")
    print("|---|---|---|---|---|---|---|")
    rows = (("fastbench (messages serialised once)", "fastbench", size),
            ("naive (each body serialised whole, dropped)", "naive", naive_bytes),
            ("naive, bodies kept (as a run needs them)", "kept", naive_bytes))
    for label, key, built in rows:
        verdict = ("yes" if cpu_s[key] < target else "NO") if key == "fastbench" else ""
        print(f"| {label} | {n:,} | {built / 1e6:,.0f} | {wall_s[key]:.2f} | {cpu_s[key]:.2f} | "
              f"{cpu_s[key] / n * 1e6:.1f} | {verdict} |")
    print(f"\nfastbench / naive CPU: {cpu_s['fastbench'] / cpu_s['naive']:.2f}x; with the naive bodies kept: "
          f"{cpu_s['fastbench'] / cpu_s['kept']:.2f}x")


if __name__ == "__main__":
    main()
