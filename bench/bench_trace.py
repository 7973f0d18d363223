"""How long building 100,000 trace-replay requests takes (timed_trace, mooncake), beside a naive build.

The traces are made here. The first is shaped like Mooncake's own conversation trace: each turn of a
conversation carries its history, so its blocks recur (``write_conversation_trace``). The others
share little, to bound the cost: requests arrive ~20 ms apart; each belongs to one of 2,000 sessions whose
first blocks (one to four) it shares with the session's other requests, and its remaining blocks are its
own; input lengths are log-normal around the median asked for, output lengths 16-512. The cost follows
the distinct tokens (each drawn once, printed); the bodies are sent from parts of one token buffer
(bodies MB: their bytes as sent; held MB: what they hold, each shared buffer once).
Each case writes the trace file, then builds the workload as a run does
(``await build_workload(...)`` in the run's loop, screening against a context: the file read and
parsed, every line checked, the blocks drawn, every body made) and times it, in wall time and process
CPU. Beside it, in the same run, the naive way vLLM's TimedTrace takes: each prompt a Python list of
its blocks' ids and each body serialised whole. The target: under 2 s for 100,000 requests.
On a shared machine, wall time follows the load of others (printed first); CPU time is this build's own.
Prints a Markdown table.

    .venv/bin/python bench/bench_trace.py            # 100,000 requests per case
    .venv/bin/python bench/bench_trace.py --requests 20000
    .venv/bin/python bench/bench_trace.py --baseline-python /tmp/fb/base/.venv/bin/python   # CPU s side by side
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from fastbench.config import BenchConfig
from fastbench.load.datasets import build_workload

TARGET_S = 2.0
SESSIONS = 2000
CASES = [  # name, dataset ("conversation": mooncake's, written by write_conversation_trace), block, median, endpoint
    ("mooncake, conversations (history shared), completions (token ids)", "conversation", 512, 0, "/v1/completions"),
    ("mooncake, 512-token blocks, short prompts, completions (token ids)", "mooncake", 512, 256, "/v1/completions"),
    ("mooncake, 512-token blocks, completions (token ids)", "mooncake", 512, 1024, "/v1/completions"),
    ("timed_trace, vLLM's 16-token blocks, completions (token ids)", "timed_trace", 16, 512, "/v1/completions"),
    ("mooncake, 512-token blocks, chat (words)", "mooncake", 512, 1024, "/v1/chat/completions"),
]


def write_trace(path: Path, n: int, block: int, median_input: int, seed: int = 0) -> list[dict[str, Any]]:
    """A Mooncake-shaped trace of ``n`` requests, ``block`` tokens per hash id (timestamps in ms)."""
    rng = np.random.default_rng(seed)
    inputs = np.clip(rng.lognormal(np.log(median_input), 0.6, size=n), 16, 16 * median_input).astype(int)
    outputs = rng.integers(16, 513, size=n)
    sessions = rng.integers(0, SESSIONS, size=n)
    shared_blocks = rng.integers(1, 5, size=SESSIONS)
    stamps = np.cumsum(rng.exponential(20.0, size=n)).astype(int)
    next_id = SESSIONS * 4
    rows = []
    for i in range(n):
        s = int(sessions[i])
        blocks = -(-int(inputs[i]) // block)
        shared = min(blocks, int(shared_blocks[s]))
        ids = [s * 4 + k for k in range(shared)] + list(range(next_id, next_id + blocks - shared))
        next_id += blocks - shared
        rows.append({"timestamp": int(stamps[i]), "input_length": int(inputs[i]), "output_length": int(outputs[i]),
                     "hash_ids": ids})
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return rows


def write_conversation_trace(path: Path, n: int, block: int, seed: int = 0) -> list[dict[str, Any]]:
    """A trace shaped like Mooncake's own: conversations whose every turn carries the history so far, so
    that most blocks are shared. Each of 20 applications has a one-block system prompt; a session (of
    its application) grows by a user message and a reply (~120 and 16-128 tokens) per turn, up to 8
    turns, then a new session starts. Its full blocks keep their hash ids from turn to turn; a last
    block cut short has an id of its own request (its next turn fills it with other tokens)."""
    rng = np.random.default_rng(seed)
    stamps = np.cumsum(rng.exponential(20.0, size=n)).astype(int)
    next_id = 0
    live: list[dict[str, Any]] = []
    rows = []
    for i in range(n):
        if len(live) < 400 or rng.random() < 0.05:
            live.append({"tokens": block, "ids": [int(rng.integers(0, 20))], "turns": 0})
        k = int(rng.integers(0, len(live)))
        session = live[k]
        session["tokens"] += int(np.clip(rng.lognormal(np.log(120), 0.8), 8, 2000))  # the user's message
        n_in = session["tokens"]
        while len(session["ids"]) < n_in // block:  # new full blocks: the session's own ids
            session["ids"].append(20 + next_id)
            next_id += 1
        ids = list(session["ids"])
        if n_in % block:
            ids.append(20 + next_id)  # the block cut short: this request's alone
            next_id += 1
        n_out = int(rng.integers(16, 129))
        rows.append({"timestamp": int(stamps[i]), "input_length": n_in, "output_length": n_out, "hash_ids": ids})
        session["tokens"] += n_out  # the reply joins the history
        session["turns"] += 1
        if session["turns"] == 8:
            live.pop(k)
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return rows


def _build_in_a_loop(config: BenchConfig) -> tuple[Any, float, float]:
    built: list[Any] = []

    async def build() -> tuple[float, float]:
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        built.append(await build_workload(config, "m", max_model_len=1 << 20))
        return time.perf_counter() - wall, time.process_time() - cpu

    # The workload is not the coroutine's result: Python 3.11's asyncio.run reprs the main task when it
    # restores the SIGINT handler, result included (seconds for 700 MB of bodies).
    wall, cpu = asyncio.run(build())
    return built[0], wall, cpu


def _naive(rows: list[dict[str, Any]], block: int) -> tuple[list[bytes], float]:
    """vLLM's way: each hash id's tokens a Python list, each prompt their concatenation, each body whole."""
    gc.collect()
    wall = time.perf_counter()
    rng = np.random.default_rng(0)
    blocks: dict[int, list[int]] = {}
    bodies = []
    for row in rows:
        prompt: list[int] = []
        left = row["input_length"]
        for h in row["hash_ids"]:
            if h not in blocks:
                blocks[h] = rng.integers(10000, 30000, size=block).tolist()
            prompt += blocks[h][:min(left, block)]
            left -= block
            if left <= 0:
                break
        bodies.append(orjson.dumps({"model": "m", "prompt": prompt, "max_tokens": row["output_length"],
                                    "stream": True, "stream_options": {"include_usage": True,
                                                                       "continuous_usage_stats": True}}))
    return bodies, time.perf_counter() - wall


def _held_bytes(bodies: list[Any]) -> int:
    """The bytes the bodies hold: a bytes body its own; parts their heads and tails (shared ones once)
    and each token buffer once, however many bodies are cut from it."""
    held, seen = 0, set()
    for body in bodies:
        pieces = [body] if isinstance(body, bytes) else [body.head, body.tail, body.source.buffer]
        for piece in pieces:
            if id(piece) not in seen:
                seen.add(id(piece))
                held += piece.nbytes if isinstance(piece, np.ndarray) else len(piece)
    return held


def _distinct_tokens(rows: list[dict[str, Any]], block: int) -> int:
    """The tokens a build must draw: each distinct block once, and every request's tokens past its blocks."""
    seen: set[int] = set()
    own = 0
    for row in rows:
        used = row["hash_ids"][:-(-row["input_length"] // block)]
        seen.update(used)
        own += max(0, row["input_length"] - block * len(used))
    return block * len(seen) + own


def _config(dataset: str, path: Path, n: int, block: int, endpoint: str) -> BenchConfig:
    return BenchConfig(dataset_name=dataset, dataset_path=path, num_prompts=n,  # type: ignore[arg-type]
                       endpoint=endpoint, timed_trace_chunk_hash_size=block,  # type: ignore[arg-type]
                       timed_trace_sec_multiplier=0.001)


def side_by_side(n: int, baseline: str, rounds: int) -> None:
    """Each case's build in fresh processes of this build and of ``baseline`` (another build's python),
    alternating, on the same trace file: CPU s per build, each round's, its wall s in brackets."""
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {n:,} requests per case; CPU s (wall s) "
          f"of each build, {rounds} rounds alternating (this build first)\n")
    print("| case | this build CPU s (wall s) | baseline CPU s (wall s) | baseline / this (CPU, medians) |")
    print("|---|---|---|---|")
    builds = [sys.executable, baseline]
    with tempfile.TemporaryDirectory() as tmp:
        for name, dataset, block, median, endpoint in CASES:
            path = Path(tmp) / f"{dataset}.jsonl"
            if dataset == "conversation":
                write_conversation_trace(path, n, block)
                dataset = "mooncake"
            else:
                write_trace(path, n, block, median)
            times: list[list[tuple[float, float]]] = [[], []]  # per build: (CPU s, wall s) per round
            for _ in range(rounds):
                for k, python in enumerate(builds):
                    out = subprocess.run([python, __file__, "--one", dataset, str(path), str(n), str(block), endpoint],
                                         check=True, capture_output=True, text=True).stdout
                    wall, cpu = (float(x) for x in out.split()[-2:])
                    times[k].append((cpu, wall))
            mine, base = (statistics.median(cpu for cpu, _ in t) for t in times)
            cells = [", ".join(f"{cpu:.2f} ({wall:.2f})" for cpu, wall in t) for t in times]
            print(f"| {name} | {cells[0]} | {cells[1]} | {base / mine:.2f}x |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--baseline-python", help="another build's python: CPU s side by side, alternating")
    parser.add_argument("--rounds", type=int, default=3, help="with --baseline-python")
    parser.add_argument("--one", nargs=5, metavar=("DATASET", "PATH", "N", "BLOCK", "ENDPOINT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child's build: its wall and CPU s on stdout
        dataset, path, count, block, endpoint = args.one
        work, wall, cpu = _build_in_a_loop(_config(dataset, Path(path), int(count), int(block), endpoint))
        assert len(work.requests) == int(count)
        print(f"{wall:.3f} {cpu:.3f}")
        return
    n = args.requests
    if args.baseline_python:
        side_by_side(n, args.baseline_python, args.rounds)
        return
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {n:,} requests per case; "
          f"target under {TARGET_S:g} s\n")
    print("| case | prompt tokens (mean) | distinct tokens (M) | wall s | CPU s | bodies MB | held MB | naive wall s | "
          "naive / fastbench |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, dataset, block, median, endpoint in CASES:
            path = Path(tmp) / f"{dataset}.jsonl"
            if dataset == "conversation":
                rows, dataset = write_conversation_trace(path, n, block), "mooncake"
            else:
                rows = write_trace(path, n, block, median)
            work, wall, cpu = _build_in_a_loop(_config(dataset, path, n, block, endpoint))
            assert len(work.requests) == n and work.arrival_offsets_ns is not None
            size = sum(len(r.body) for r in work.requests) / 1e6
            held = _held_bytes([r.body for r in work.requests]) / 1e6
            tokens = sum(r["input_length"] for r in rows) / n
            distinct = _distinct_tokens(rows, block) / 1e6
            del work
            naive_text = ratio = "-"
            if endpoint == "/v1/completions":
                bodies, naive_wall = _naive(rows, block)
                del bodies
                naive_text, ratio = f"{naive_wall:.2f}", f"{naive_wall / wall:.1f}x"
            verdict = "" if wall < TARGET_S else " (over target)"
            print(f"| {name} | {tokens:,.0f} | {distinct:.1f} | {wall:.2f}{verdict} | {cpu:.2f} | {size:,.0f} | "
                  f"{held:,.0f} | {naive_text} | {ratio} |")


if __name__ == "__main__":
    main()
