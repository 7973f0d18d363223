"""What a trace replay's bodies cost the client during the run: sent from their parts, against joined.

A trace's requests are built ahead, their bodies sent from runs of one shared token buffer (the core's
``BodyParts``: one sendmsg of a head, a few runs and a tail) rather than each joined into a bytes
object of its own (building a trace's requests ahead must not raise the client's CPU per chunk during
the run). Side by side in one process, against the synthetic server (its own process), the same trace
replayed in closed loop (``--no-self-timed``) with its bodies:

* ``parts``: as fastbench builds them;
* ``joined``: each prompt joined into its body's bytes before the run (what the bodies were before).

Figures: the client's CPU per output event over the run's window (``client.cpu_per_event_us``), medians
of the rounds, the two modes alternating (the first of the two flips each round).
Prints a Markdown table.

    .venv/bin/python bench/trace_run_cpu.py
    .venv/bin/python bench/trace_run_cpu.py --requests 8000 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_trace import write_trace

from fastbench import BenchConfig, run
from fastbench.load.screening import JsonPrompt, PartsPrompt
from fastbench.load.sources import trace
from fastbench.synthetic import SyntheticServer

MODES = ("parts", "joined")
_prompts_as_built = trace.TokenBlocks.prompts


def _joined_prompts(self: Any, input_lengths: Sequence[int]) -> list[JsonPrompt]:
    """The trace's prompts, each joined into its JSON's bytes (so that its body is bytes, not parts)."""
    built: list[PartsPrompt] = _prompts_as_built(self, input_lengths)
    return [JsonPrompt((prompt.json,), prompt.chars) for prompt in built]


def measure(mode: str, base_url: str, path: Path, requests: int, concurrency: int, max_tokens: int) -> float:
    """One replay with ``mode``'s bodies: the client's CPU per output event, in us."""
    trace.TokenBlocks.prompts = _joined_prompts if mode == "joined" else _prompts_as_built  # type: ignore[method-assign]
    try:
        result = run(BenchConfig(base_url=base_url, dataset_name="timed_trace", dataset_path=path,
                                 num_prompts=requests, self_timed=False, concurrency=concurrency,
                                 max_tokens=max_tokens, timed_trace_chunk_hash_size=16,
                                 timed_trace_sec_multiplier=0.001))
    finally:
        trace.TokenBlocks.prompts = _prompts_as_built  # type: ignore[method-assign]
    per_event = result.client.cpu_per_event_us
    if result.counts.completed != requests or per_event is None:
        raise SystemExit(f"{mode}: {result.counts.completed} of {requests} requests completed; the figures "
                         "would not compare")
    return per_event


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per reply (one per event)")
    parser.add_argument("--median-input", type=int, default=512, help="tokens per prompt, median")
    parser.add_argument("--itl-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    figures: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp, SyntheticServer(ttft_ms=5, itl_ms=args.itl_ms) as server:
        path = Path(tmp) / "trace.jsonl"
        write_trace(path, args.requests, 16, args.median_input)
        for round_ in range(args.rounds):
            for mode in MODES[::-1 if round_ % 2 else 1]:
                figures[mode].append(measure(mode, server.base_url, path, args.requests, args.concurrency,
                                             args.max_tokens))
    print(f"load average {os.getloadavg()[0]:.2f} after")
    print(f"\n{args.requests} requests of vLLM's 16-token blocks (median {args.median_input} prompt tokens), closed "
          f"loop at {args.concurrency}, {args.max_tokens} tokens each (one per event); medians of {args.rounds} "
          "rounds\n")
    print("| bodies | client CPU per event, us | vs joined | rounds (us) |")
    print("|---|---|---|---|")
    base = statistics.median(figures["joined"])
    for mode in MODES:
        per_event = statistics.median(figures[mode])
        print(f"| {mode} | {per_event:.2f} | {per_event / base - 1:+.1%} | "
              f"{', '.join(f'{event:.2f}' for event in figures[mode])} |")


if __name__ == "__main__":
    main()
