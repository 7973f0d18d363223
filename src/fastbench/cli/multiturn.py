"""The command line's multi-turn options (``--multi-turn`` and those it enables): added to the run's parser
by ``cli.command``, read back into BenchConfig's ``multi_turn`` and ``MultiTurnOptions`` (the flags' dests are
its fields' flat names; see ``fastbench.load.sessions``)."""

from __future__ import annotations

import argparse

from fastbench.cli.argtypes import whole_number


def add_args(p: argparse.ArgumentParser) -> None:
    """The options of multi-turn sessions, in a group of their own."""
    g = p.add_argument_group("multi-turn sessions", "conversations (--dataset-name sharegpt, or jsonl with a "
                             "'messages' list per line) replayed turn by turn, each turn's prompt the history so far "
                             "plus the next user message; --num-prompts counts sessions (docs/multiturn.md)")
    g.add_argument("--multi-turn", action="store_true", help="replay whole conversations as sessions")
    g.add_argument("--multi-turn-history", default="server", choices=("server", "dataset"),
                   help="whose replies the history carries: the server's (as vLLM's multi-turn benchmark) or the "
                   "dataset's (every body built ahead)")
    g.add_argument("--think-time", dest="think_time_s", type=float, default=0.0, metavar="SECONDS",
                   help="mean seconds between a reply and the session's next turn")
    g.add_argument("--think-time-distribution", default="constant", choices=("constant", "uniform", "exponential"),
                   help="constant, uniform on [0, 2 x mean], or exponential; drawn from --seed")
    g.add_argument("--max-turns", type=whole_number, default=None,
                   help="most turns (user messages) a session sends (vLLM's --max-turns counts both roles)")
    g.add_argument("--chat-template", default=None, metavar="TEMPLATE.JSON",
                   help="/v1/completions: {\"message\": \"<|{role}|>\\n{content}\\n\", \"generation_prompt\": "
                   "\"<|assistant|>\\n\"} (that is the default)")

