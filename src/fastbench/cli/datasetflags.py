"""The flags of trace replay (timed_trace, mooncake) and of vLLM's custom and spec_bench datasets, kept
beside cli/command.py's parser: vllm bench serve's and SGLang's names and meanings."""

from __future__ import annotations

import argparse
from typing import Any

from fastbench.cli.argtypes import whole_number


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
    g = p.add_argument_group("vLLM's custom and spec_bench datasets")
    g.add_argument("--custom-output-len", type=int, default=256,
                   help="custom: output tokens per request; -1: each line's output_tokens")
    g.add_argument("--spec-bench-output-len", type=whole_number, default=256, help="spec_bench: output tokens")
    g.add_argument("--spec-bench-category", default=None, help="spec_bench: only this category's questions")


def file_dataset_fields(ns: argparse.Namespace) -> dict[str, Any]:
    """The BenchConfig fields of add_file_dataset_args' flags (named as the fields)."""
    names = ("timed_trace_chunk_hash_size", "timed_trace_sec_multiplier", "timed_trace_label_timestamp",
             "timed_trace_label_input_length", "timed_trace_label_output_length", "timed_trace_label_hash_ids",
             "mooncake_slowdown_factor", "self_timed", "custom_output_len", "spec_bench_output_len",
             "spec_bench_category")
    return {name: getattr(ns, name) for name in names}
