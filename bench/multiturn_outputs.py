"""What keeping the response texts costs the client, per output event, in multi-turn sessions.

Sessions whose history carries the server's replies (``--multi-turn-history server``, the default) need
each reply's text: the core keeps every output event of the run (as ``--save-outputs`` does) and each
later turn's body is built in the run from the decoded reply. With the dataset's replies nothing is
kept. Side by side in one run, against the synthetic server (its own process), the same sessions:

* ``dataset``: history with the dataset's replies, no texts kept;
* ``dataset + --save-outputs``: the same, with every event kept by the core (its copy alone);
* ``server``: history with the server's replies (copy, decode and a body built per later turn).

The dataset's replies are as long as the server's (``--max-tokens`` words), so both histories, and the
server's work, are the same size. Figures: the client's CPU per output event over the run's window
(``client.cpu_per_event_us``), medians of the rounds, each round running the three in turn. Prints a
Markdown table.

    .venv/bin/python bench/multiturn_outputs.py
    .venv/bin/python bench/multiturn_outputs.py --rounds 5 --sessions 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from fastbench import BenchConfig, run
from fastbench.synthetic import SyntheticServer

MODES = {
    "dataset": {"multi_turn_history": "dataset"},
    "dataset + --save-outputs": {"multi_turn_history": "dataset", "save_outputs": True},  # + save_detailed
    "server": {"multi_turn_history": "server"},
}


def _write(path: str, sessions: int, turns: int, reply_words: int) -> None:
    with open(path, "w") as f:
        for i in range(sessions):
            messages = [{"role": "system", "content": "You are a helpful assistant."}]
            for t in range(turns):
                messages.append({"role": "user", "content": f"session {i} turn {t}: " + "tell me more " * 10})
                messages.append({"role": "assistant", "content": " ".join(["word"] * reply_words)})
            f.write(json.dumps({"id": str(i), "messages": messages}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64, help="sessions, all at once (closed loop)")
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per reply (one per event)")
    parser.add_argument("--itl-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    per_event: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp, SyntheticServer(ttft_ms=5, itl_ms=args.itl_ms) as server:
        path = os.path.join(tmp, "conversations.jsonl")
        _write(path, args.sessions, args.turns, args.max_tokens)
        for _ in range(args.rounds):
            for mode, options in MODES.items():
                if options.get("save_outputs"):  # the texts go to the per-request file, written after the run
                    options = {**options, "save_detailed": os.path.join(tmp, "requests.jsonl")}
                result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions",
                                         dataset_name="jsonl", dataset_path=path, dataset_order="file",
                                         multi_turn=True, max_tokens=args.max_tokens, num_prompts=args.sessions,
                                         concurrency=args.sessions, **options))  # type: ignore[arg-type]
                if result.counts.completed != args.sessions * args.turns or result.client.cpu_per_event_us is None:
                    raise SystemExit(f"{mode}: {result.counts.completed} of {args.sessions * args.turns} turns "
                                     "completed; the figures would not compare")
                per_event[mode].append(result.client.cpu_per_event_us)
    print(f"load average {os.getloadavg()[0]:.2f} after")
    base = statistics.median(per_event["dataset"])
    print(f"\n{args.sessions} sessions x {args.turns} turns x {args.max_tokens} tokens, one per event; medians of "
          f"{args.rounds} rounds\n")
    print("| history | client CPU per event, us | vs dataset | rounds (us) |")
    print("|---|---|---|---|")
    for mode, values in per_event.items():
        median = statistics.median(values)
        print(f"| {mode} | {median:.1f} | {median / base - 1:+.0%} | {', '.join(f'{v:.1f}' for v in values)} |")


if __name__ == "__main__":
    main()
