"""What keeping the response texts costs the client, per output event, in multi-turn sessions.

Sessions whose history carries the server's replies (``--multi-turn-history server``, the default) need
each reply's text: the core keeps the answer's strings as it scans each event (their raw bytes, in one
buffer per connection), a reply is decoded once at its turn's end, and each later turn's body is built
in the run from it. With the dataset's replies nothing is kept. Side by side in one run, against the
synthetic server (its own process), the same sessions:

* ``dataset``: history with the dataset's replies, no texts kept;
* ``dataset + --save-outputs``: the same, with every event kept by the core (its copy alone);
* ``server``: history with the server's replies (answer kept, decoded and a body built per later turn).

``--baseline-python`` runs the same rounds with another build's interpreter (a venv of main's code),
each round alternating the two builds (the first of the two flips each round), so that both are
measured under the same load.

The dataset's replies are as long as the server's (``--max-tokens`` words), so both histories, and the
server's work, are the same size. Figures: the client's CPU per output event over the run's window
(``client.cpu_per_event_us``), medians of the rounds, each round running the three in turn. Prints a
Markdown table.

    .venv/bin/python bench/multiturn_outputs.py
    .venv/bin/python bench/multiturn_outputs.py --rounds 5 --sessions 128
    .venv/bin/python bench/multiturn_outputs.py --baseline-python /tmp/fb/base-speed15/.venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def measure(mode: str, base_url: str, path: str, tmp: str, sessions: int, max_tokens: int, turns: int) -> float:
    """One run of ``mode``: the client's CPU per output event over its window, in us."""
    options: dict[str, object] = dict(MODES[mode])
    if options.get("save_outputs"):  # the texts go to the per-request file, written after the run
        options["save_detailed"] = os.path.join(tmp, "requests.jsonl")
    result = run(BenchConfig(base_url=base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                             dataset_path=path, dataset_order="file", multi_turn=True, max_tokens=max_tokens,
                             num_prompts=sessions, concurrency=sessions, **options))  # type: ignore[arg-type]
    if result.counts.completed != sessions * turns or result.client.cpu_per_event_us is None:
        raise SystemExit(f"{mode}: {result.counts.completed} of {sessions * turns} turns completed; the figures "
                         "would not compare")
    return result.client.cpu_per_event_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=64, help="sessions, all at once (closed loop)")
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per reply (one per event)")
    parser.add_argument("--itl-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-python", help="another build's python: its rounds alternate with this one's")
    parser.add_argument("--one", nargs=4, metavar=("MODE", "BASE_URL", "PATH", "TMP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child's single run: its figure on stdout
        print(measure(*args.one, sessions=args.sessions, max_tokens=args.max_tokens, turns=args.turns))
        return
    builds = {"this build": sys.executable}
    if args.baseline_python:
        builds["baseline"] = args.baseline_python
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    per_event: dict[tuple[str, str], list[float]] = {(b, m): [] for b in builds for m in MODES}
    with tempfile.TemporaryDirectory() as tmp, SyntheticServer(ttft_ms=5, itl_ms=args.itl_ms) as server:
        path = os.path.join(tmp, "conversations.jsonl")
        _write(path, args.sessions, args.turns, args.max_tokens)
        for round_ in range(args.rounds):
            for mode in MODES:
                # the builds' order flips each round: a run right after the same prompts finds the server's
                # prefix cache warmer (shorter TTFTs, a shorter window)
                for build, python in list(builds.items())[::-1 if round_ % 2 else 1]:
                    if not args.baseline_python:  # in this process, as before
                        per_event[build, mode].append(measure(mode, server.base_url, path, tmp, args.sessions,
                                                              args.max_tokens, args.turns))
                        continue
                    out = subprocess.run(
                        [python, __file__, "--one", mode, server.base_url, path, tmp, "--sessions", str(args.sessions),
                         "--turns", str(args.turns), "--max-tokens", str(args.max_tokens)],
                        check=True, capture_output=True, text=True).stdout
                    per_event[build, mode].append(float(out.split()[-1]))
    print(f"load average {os.getloadavg()[0]:.2f} after")
    print(f"\n{args.sessions} sessions x {args.turns} turns x {args.max_tokens} tokens, one per event; medians of "
          f"{args.rounds} rounds\n")
    print("| build | history | client CPU per event, us | vs dataset | rounds (us) |")
    print("|---|---|---|---|---|")
    for build in builds:
        base = statistics.median(per_event[build, "dataset"])
        for mode in MODES:
            values = per_event[build, mode]
            median = statistics.median(values)
            print(f"| {build} | {mode} | {median:.1f} | {median / base - 1:+.0%} | "
                  f"{', '.join(f'{v:.1f}' for v in values)} |")


if __name__ == "__main__":
    main()
