"""The flags of the shared-prefix datasets, of trace replay (timed_trace, mooncake) and of vLLM's custom and
spec_bench datasets, kept beside cli/command.py's parser: vllm bench serve's and SGLang's names and meanings;
and every dataset's options object made from its flags (``fastbench.datasetoptions``)."""

from __future__ import annotations

import argparse
from typing import Any

from fastbench import datasetoptions
from fastbench.cli.argtypes import whole_number
from fastbench.datasetoptions import DatasetOptions


def add_file_dataset_args(p: argparse.ArgumentParser) -> None:
    """Trace replay and vLLM's other file datasets: vllm bench serve's and SGLang's flags and meanings."""
    g = p.add_argument_group("trace replay", "timed_trace (vllm bench serve's) and mooncake (the Mooncake traces' "
                             "JSONL): requests sent at the trace's times, prompts sharing the blocks their hash ids "
                             "name")
    g.add_argument("--timed-trace-chunk-hash-size", type=whole_number, default=16,
                   help="timed_trace: tokens per hash id (mooncake: 512)")
    g.add_argument("--timed-trace-sec-multiplier", type=float, default=1.0,
                   help="timed_trace: timestamp x this = seconds (0.001 for milliseconds); scales the pace too")
    for field in ("timestamp", "input-length", "output-length", "hash-ids"):
        g.add_argument(f"--timed-trace-label-{field}", default=field.replace("-", "_"),
                       help=f"timed_trace: the field holding each request's {field.replace('-', ' ')}")
    g.add_argument("--mooncake-slowdown-factor", type=float, default=1.0,
                   help="mooncake: the trace's gaps times this (2: half the pace), as SGLang's")
    g.add_argument("--self-timed", action=argparse.BooleanOptionalAction, default=None,
                   help="trace datasets: send at the trace's times (default); --no-self-timed: by --request-rate "
                   "or closed loop")
    g = p.add_argument_group("agentic replay", "weka: coding-agent traces (the Weka format) replayed as agent trees, "
                             "each call sent when the calls it depends on have ended and its recorded gap has passed; "
                             "--num-prompts counts trees (docs/agentic.md)")
    g.add_argument("--agentic-time-scale", type=float, default=1.0,
                   help="the trace's gaps times this (0: each call as soon as its dependencies end)")
    g.add_argument("--agentic-idle-gap-cap", type=float, default=None, metavar="SECONDS",
                   help="no gap waits longer than this (after the scale)")
    g.add_argument("--agentic-start", choices=("staggered", "beginning"), default="staggered",
                   help="closed loop: the first trees start part-way along, the cache filled by a warm-up "
                   "(staggered: a steady state from the first second), or all at their first calls")
    g.add_argument("--agentic-session-header", default=None, metavar="NAME",
                   help="each call carries this header, its value the call's agent (TREE or TREE::AGENT), for a "
                   "router to pin a session to one backend (e.g. x-session-id)")
    g.add_argument("--agentic-tool-messages", action="store_true",
                   help="chat: send each call as the turns its trace recorded (user, assistant, tool call, tool "
                   "result) with a tools list, not as one user message; the chat template's tokens for them are "
                   "the server's (docs/agentic.md)")
    g = p.add_argument_group("vLLM's custom and spec_bench datasets")
    g.add_argument("--custom-output-len", type=int, default=256,
                   help="custom: output tokens per request; -1: each line's output_tokens")
    g.add_argument("--spec-bench-output-len", type=whole_number, default=256, help="spec_bench: output tokens")
    g.add_argument("--spec-bench-category", default=None, help="spec_bench: only this category's questions")


def add_shared_prefix_args(p: argparse.ArgumentParser, g: argparse._ArgumentGroup) -> None:
    """Shared prefixes, for prefix-cache studies: vllm bench serve's and SGLang's flags and meanings."""
    g.add_argument("--random-prefix-len", type=whole_number, default=0,
                   help="random: one fixed random prefix of this many tokens before every prompt; the prompt is "
                   "this plus --random-input-len's draw (as vllm bench serve)")
    g.add_argument("--random-batch-size", type=whole_number, default=1,
                   help="embeddings, pooling, rerank: inputs per request (rerank: documents with the query), as "
                   "vllm bench serve; --num-prompts counts the inputs")
    g.add_argument("--no-reranker", action="store_true",
                   help="random-rerank: the model has no native reranker; the query is one of each batch (vLLM's)")
    g = p.add_argument_group("shared-prefix datasets", "prefix_repetition (vllm bench serve's): each prompt is one "
                             "of N random prefixes plus its own random suffix; generated-shared-prefix (SGLang's): "
                             "groups of prompts sharing a system prompt, each with its own question")
    g.add_argument("--prefix-repetition-prefix-len", type=whole_number, default=256, help="prefix tokens")
    g.add_argument("--prefix-repetition-suffix-len", type=whole_number, default=256, help="suffix tokens")
    g.add_argument("--prefix-repetition-num-prefixes", type=whole_number, default=10, help="distinct prefixes")
    g.add_argument("--prefix-repetition-output-len", type=whole_number, default=128, help="output tokens")
    g.add_argument("--gsp-num-groups", type=whole_number, default=64, help="groups (system prompts)")
    g.add_argument("--gsp-prompts-per-group", type=whole_number, default=16, help="prompts per group")
    g.add_argument("--gsp-system-prompt-len", type=whole_number, default=2048, help="system prompt tokens")
    g.add_argument("--gsp-question-len", type=whole_number, default=128, help="question tokens")
    g.add_argument("--gsp-output-len", type=whole_number, default=256, help="output tokens")
    g.add_argument("--reset-prefix-cache", action="store_true",
                   help="empty the server's prefix cache before the first request (vLLM's POST /reset_prefix_cache, "
                   "served with VLLM_SERVER_DEV_MODE=1, which fastbench sets for --launch vllm; SGLang's "
                   "/flush_cache); where impossible, the notes say so")


def dataset_options(ns: argparse.Namespace, **given: Any) -> tuple[DatasetOptions, ...]:
    """Every dataset's options object from its flags, whose dests are its fields' flat names
    (``random_input_len``); ``given`` replaces what the parse says (vllm's --input-len, --output-len)."""
    return datasetoptions.folded((), {name: given.get(name, getattr(ns, name)) for name in datasetoptions.FLAT_NAMES})
