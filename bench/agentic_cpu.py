"""The client's CPU per chunk during an agentic replay, side by side with a plain multi-turn run.

An agentic replay sends each call when its dependencies have ended (a task per call, the trees' bookkeeping
in Python per request, bodies sent from runs of one token buffer); none of that may reach the per-chunk
path. Against the synthetic server (its own process), in one process, alternating each round:

* ``agentic``: ``--dataset-name weka``, a corpus made here (bench/build_agentic.py's shape: a root whose
  context grows call by call, a joined and a background subagent), gaps scaled to 0 (back to back);
* ``multi-turn``: ``--multi-turn`` over JSONL conversations with as many turns per session, history from
  the dataset (every body built ahead), no think time.

Both in closed loop at the same concurrency, the same tokens per reply (one per event). Figures: the
client's CPU per output event over the window (``client.cpu_per_event_us``), medians of the rounds.
Prints a Markdown table.

    .venv/bin/python bench/agentic_cpu.py
    .venv/bin/python bench/agentic_cpu.py --trees 64 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
from pathlib import Path

import orjson
from build_agentic import BLOCK, _agent

from fastbench import BenchConfig, run
from fastbench.datasetoptions import AgenticOptions
from fastbench.synthetic import SyntheticServer

MODES = ("agentic", "multi-turn")
ROOT_CALLS, SUB_CALLS = 20, 5
CALLS_PER_TREE = ROOT_CALLS + 2 * SUB_CALLS


def write_corpus(path: Path, trees: int) -> None:
    rng = random.Random(0)
    with open(path, "wb") as f:
        for n in range(trees):
            root = _agent(rng, 0, ROOT_CALLS, 0.0, 1024)
            joined = _agent(rng, 1_000, SUB_CALLS, 0.0, 512)
            background = _agent(rng, 2_000, SUB_CALLS, 0.0, 512)
            requests = root[:5] + [{"t": root[4]["t"] + 1, "type": "subagent", "agent_id": "a1", "status": "completed",
                                    "requests": joined}] + root[5:15]
            requests += [{"t": root[14]["t"] + 1, "type": "subagent", "agent_id": "a2", "requests": background}]
            requests += root[15:]
            f.write(orjson.dumps({"id": f"trace-{n}", "block_size": BLOCK, "requests": requests}) + b"\n")


def write_conversations(path: Path, sessions: int) -> None:
    rng = random.Random(0)
    words = ("the", "model", "server", "token", "cache", "prefix", "answer", "question", "batch", "latency")
    with open(path, "wb") as f:
        for _ in range(sessions):
            messages = [{"role": "system", "content": " ".join(rng.choices(words, k=700))}]
            for _ in range(CALLS_PER_TREE):
                messages.append({"role": "user", "content": " ".join(rng.choices(words, k=rng.randint(100, 300)))})
                messages.append({"role": "assistant", "content": " ".join(rng.choices(words, k=64))})
            f.write(orjson.dumps({"messages": messages}) + b"\n")


def measure(mode: str, base_url: str, tmp: Path, trees: int, concurrency: int, max_tokens: int) -> float:
    common = {"base_url": base_url, "num_prompts": trees, "concurrency": concurrency, "max_tokens": max_tokens,
              "ignore_eos": True, "progress": False}
    if mode == "agentic":
        config = BenchConfig(dataset_name="weka", dataset_path=tmp / "corpus.jsonl",
                             dataset_options=AgenticOptions(time_scale=0.0, start="beginning"), **common)
    else:
        config = BenchConfig(dataset_name="jsonl", dataset_path=tmp / "conversations.jsonl", multi_turn=True,
                             multi_turn_history="dataset", **common)
    result = run(config)
    per_event = result.client.cpu_per_event_us
    expected = trees * CALLS_PER_TREE
    if result.counts.completed != expected or per_event is None:
        raise SystemExit(f"{mode}: {result.counts.completed} of {expected} requests completed; the figures would "
                         "not compare")
    return per_event


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=128, help="trees (agentic) and sessions (multi-turn)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per reply (one per event)")
    parser.add_argument("--itl-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    figures: dict[str, list[float]] = {mode: [] for mode in MODES}
    server_args = {"ttft_ms": 5, "itl_ms": args.itl_ms, "max_model_len": 1 << 16}  # the trees' contexts fit
    with tempfile.TemporaryDirectory() as name, SyntheticServer(**server_args) as server:
        tmp = Path(name)
        write_corpus(tmp / "corpus.jsonl", args.trees)
        write_conversations(tmp / "conversations.jsonl", args.trees)
        for round_ in range(args.rounds):
            for mode in MODES[::-1 if round_ % 2 else 1]:
                figures[mode].append(measure(mode, server.base_url, tmp, args.trees, args.concurrency,
                                             args.max_tokens))
    print(f"load average {os.getloadavg()[0]:.2f} after")
    print(f"\n{args.trees} trees of {CALLS_PER_TREE} calls (agentic) and {args.trees} sessions of {CALLS_PER_TREE} "
          f"turns (multi-turn), closed loop at {args.concurrency}, {args.max_tokens} tokens a reply (one per event); "
          f"medians of {args.rounds} rounds\n")
    print("| run | client CPU per event, us | vs multi-turn | rounds (us) |")
    print("|---|---|---|---|")
    base = statistics.median(figures["multi-turn"])
    for mode in MODES:
        per_event = statistics.median(figures[mode])
        print(f"| {mode} | {per_event:.2f} | {per_event / base - 1:+.1%} | "
              f"{', '.join(f'{event:.2f}' for event in figures[mode])} |")


if __name__ == "__main__":
    main()
