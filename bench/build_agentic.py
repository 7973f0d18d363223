"""How long building 100,000 agentic requests (``--dataset-name weka``) takes: reading the corpus, planning
the trees, laying out and drawing their prompts' tokens, and the bodies.

Writes a corpus of Weka traces shaped as coding-agent captures run: each trace a root agent whose context
grows call by call (a 2,048-token system prompt, then ~256 tokens a turn: the reply, the tool's result),
with two subagents of their own context, one joined and one in the background; block_size 64. Builds the
run's workload from it as a run does (``await build_workload(...)``, /v1/completions, token-id prompts): once
from a corpus of 100 traces replayed (each replay with blocks of its own, so the tokens drawn are the same),
once from as many traces as trees (reading the corpus, ~70 MB for 1,000 traces, is then most of the time).
Target: under 2 s for 100,000 requests. On a shared machine wall time follows the others' load (printed
first); CPU time is this build's own. Reading the corpus is also timed alone. Prints a Markdown table.

    .venv/bin/python bench/build_agentic.py                  # 1,000 trees of 100 calls, from 100 traces and 1,000
    .venv/bin/python bench/build_agentic.py --trees 100 --traces 100
    .venv/bin/python bench/build_agentic.py --tool-messages  # also chat, plain and as tool turns
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
from typing import Any

import orjson

from fastbench.config import BenchConfig
from fastbench.datasetoptions import AgenticOptions
from fastbench.load.datasets import build_workload
from fastbench.load.sources import gc_paused
from fastbench.load.sources.weka import read_corpus

TARGET_S = 2.0
BLOCK = 64
ROOT_CALLS, SUB_CALLS = 70, 15  # 70 + 2 x 15 = 100 calls a tree


def _agent(rng: random.Random, first_id: int, calls: int, start_t: float, system: int) -> list[dict[str, Any]]:
    ids = list(range(first_id, first_id + system // BLOCK))
    out, t = [], start_t
    for k in range(calls):
        grow = rng.randint(2, 6)
        ids.extend(range(ids[-1] + 1, ids[-1] + 1 + grow))
        out.append({"t": round(t, 3), "type": "s", "model": "m", "in": len(ids) * BLOCK + rng.randint(1, 63),
                    "out": rng.randint(50, 400), "hash_ids": list(ids), "api_time": 2.0, "think_time": 0.5,
                    "stop": "tool_use" if k % 3 else "end_turn", "input_types": ["tool_result"] if k % 3 else []})
        t += 3.0
    return out


def _write(path: str, trees: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for n in range(trees):
            root = _agent(rng, 0, ROOT_CALLS, 0.0, 2048)
            # a trace numbers its blocks densely (a capture's counter): the subagents' after the root's
            joined = _agent(rng, 1_000, SUB_CALLS, 0.0, 1024)  # times relative to the marker
            background = _agent(rng, 2_000, SUB_CALLS, 0.0, 1024)
            requests = root[:20] + [{"t": root[19]["t"] + 2.5, "type": "subagent", "agent_id": "a1",
                                     "status": "completed", "requests": joined}] + root[20:60]
            requests += [{"t": root[59]["t"] + 2.5, "type": "subagent", "agent_id": "a2", "status": "async_launched",
                          "requests": background}] + root[60:]
            f.write(orjson.dumps({"id": f"trace-{n}", "block_size": BLOCK, "hash_id_scope": "local",
                                  "requests": requests}) + b"\n")


# what is built: /v1/completions' token ids; with --tool-messages, also the chat endpoint's words, plain and cut
# into the turns of each call's history (--agentic-tool-messages), side by side
COMPLETIONS, CHAT, TOOL_TURNS = "completions", "chat", "chat, tool turns"


async def _build(path: str, trees: int, mode: str = COMPLETIONS) -> tuple[float, float, int]:
    """(wall s, CPU s, requests) of one build."""
    config = BenchConfig(dataset_name="weka", dataset_path=path, num_prompts=trees, concurrency=64,
                         endpoint="/v1/completions" if mode == COMPLETIONS else "/v1/chat/completions",
                         dataset_options=(AgenticOptions(start="beginning", tool_messages=mode == TOOL_TURNS),))
    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    work = await build_workload(config, "model", max_model_len=None)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return wall, cpu, len(work.requests)


def _read(path: str) -> float:
    """Wall s of reading the corpus alone, as the build reads it (the collector paused)."""
    gc.collect()
    with gc_paused():
        wall0 = time.perf_counter()
        read_corpus(path)
        return time.perf_counter() - wall0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", type=int, default=1000)
    parser.add_argument("--traces", type=int, nargs="*", default=[100, 1000], help="corpus sizes to build from")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tool-messages", action="store_true",
                        help="also build for the chat endpoint, plain and with --agentic-tool-messages")
    args = parser.parse_args()
    modes = [COMPLETIONS, CHAT, TOOL_TURNS] if args.tool_messages else [COMPLETIONS]
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for traces in args.traces:
            path = os.path.join(tmp, f"corpus-{traces}.jsonl")
            _write(path, traces, 0)
            size = os.path.getsize(path) / 1e6
            reads = [_read(path) for _ in range(args.rounds)]
            runs: dict[str, list[tuple[float, float, int]]] = {mode: [] for mode in modes}
            for _ in range(args.rounds):  # the modes side by side in each round
                for mode in modes:
                    runs[mode].append(asyncio.run(_build(path, args.trees, mode)))
            rows += [(traces, size, mode, runs[mode], reads) for mode in modes]
    print()
    print("| corpus | built for | requests | wall s (median, min) | CPU s (median) | of which reading, s (median) | "
          "target (median) |")
    print("|---|---|---:|---:|---:|---:|---|")
    for traces, size, mode, built, reads in rows:
        walls, cpus, requests = [r[0] for r in built], [r[1] for r in built], built[0][2]
        verdict = "PASS" if statistics.median(walls) < TARGET_S * requests / 100_000 else "FAIL"
        print(f"| {traces:,} traces, {size:.0f} MB | {mode} | {requests:,} | {statistics.median(walls):.2f}, "
              f"{min(walls):.2f} | "
              f"{statistics.median(cpus):.2f} | {statistics.median(reads):.2f} | < {TARGET_S:g} s per 100,000: "
              f"{verdict} |")


if __name__ == "__main__":
    main()
