"""The figures of the APIs answered whole (embeddings, pooling, score, rerank), and those that do not apply.

Such an API answers each request with one JSON body and no stream, so it has no first token, no output
tokens and no gaps between chunks: TTFT, TTFA, TPOT, ITL, the decode and prefill rates and the output
throughputs are null with the reason, never 0. What it has: E2E latency (the receive stamp of the read that
held the answer's last byte minus the request's start, as for a stream), requests/s, inputs/s (each
request's inputs, as ``--random-batch-size`` sets them, over the completed requests) and input tokens/s
(the server's usage, its ``prompt_tokens``, else ``total_tokens``: a rerank answer's carries only that;
where an answer has none, the request's own count, as the usage statement says). vllm bench serve's keys
for them: ``total_input_sequences`` and ``input_sequence_throughput``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastbench.config import BenchConfig

REASON = "does not apply: the API answers each request whole, with no stream (no first token, no output tokens)"
# the distributions, throughputs and flat keys a whole answer has no value for
NO_DISTRIBUTIONS = ("ttft", "ttft_raw", "ttfa", "tpot", "itl", "itl_token", "prefill_rate", "decode_rate")
NO_THROUGHPUTS = ("output_throughput", "prefill_throughput", "steady_output_throughput")
# the run card's rows of streamed figures
_CARD_ROWS = ("Prefill tok/s", "Decode tok/s", "Decode tok/s, steady state", "Per-stream decode tok/s",
              "TTFT (ms)", "TPOT (ms)", "ITL (ms)", "Mean tokens per chunk")


@dataclasses.dataclass(frozen=True)
class PoolingSummary:
    """What a run of an API answered whole measured beyond the common figures."""

    api: str  # vllm bench serve's backend name
    endpoint: str
    batch_size: int  # --random-batch-size: inputs (documents) a request
    total_inputs: int  # inputs of completed requests
    input_sequence_throughput: float  # total_inputs / duration, inputs/s
    input_token_throughput: float  # input tokens of completed requests / duration (as input_throughput)
    not_applicable: dict[str, str]  # figure -> why it has no value


def summarize(config: BenchConfig, completed_index: np.ndarray, workload_info: Mapping[str, Any],
              duration_s: float, input_token_throughput: float) -> PoolingSummary | None:
    """None unless the run's API answers whole. ``completed_index``: the completed requests' row indexes."""
    if not config.pooling:
        return None
    per_request: Sequence[int] = workload_info.get("inputs_per_request") or ()
    total = sum(int(per_request[i]) if 0 <= i < len(per_request) else 1 for i in completed_index.tolist())
    return PoolingSummary(
        api=config.api, endpoint=config.endpoint, batch_size=config.random_batch_size, total_inputs=total,
        input_sequence_throughput=total / duration_s if duration_s > 0 else 0.0,
        input_token_throughput=input_token_throughput,
        not_applicable={name: REASON for name in (*NO_DISTRIBUTIONS, *NO_THROUGHPUTS)})


def usage_statement(by_source: Mapping[str, int], workload_info: Mapping[str, Any]) -> str | None:
    """Where whole answers' input tokens came from: their usage, else the request's own count (the streamed
    statement is about output tokens and chunks, which these answers have none of). None: nothing completed."""
    seen = by_source.get("FINAL", 0)
    completed = sum(by_source.values())
    if completed == 0:
        return None
    parts = [f"input tokens from the server's usage for {seen}/{completed} answers (prompt_tokens, else "
             "total_tokens)"]
    missing = completed - seen
    if missing:
        source = workload_info.get("input_length_source") or "the workload's count"
        parts.append(f"{missing}/{completed} had no usage (or usage that cannot be right): their input tokens "
                     f"are the request's own count ({source})")
    return "; ".join(parts)


def section(summary: PoolingSummary) -> dict[str, Any]:
    """The result file's ``fastbench.pooling`` section."""
    return dataclasses.asdict(summary)


def flat_keys(summary: PoolingSummary, keys: Mapping[str, Any]) -> dict[str, Any]:
    """vllm bench serve's pooling keys, and null for every streamed figure's key among ``keys``."""
    out: dict[str, Any] = {"total_input_sequences": summary.total_inputs,
                           "input_sequence_throughput": summary.input_sequence_throughput}
    for key in keys:
        if key == "output_throughput" or any(f"_{name}_ms" in key for name in ("ttft", "tpot", "itl")):
            out[key] = None
    return out


def card_rows(summary: PoolingSummary, rows: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The run card's Measured results: streamed figures said not to apply, inputs/s beside E2E latency."""
    out: list[tuple[str, Any]] = []
    for label, value in rows:
        if label in _CARD_ROWS:
            continue
        out.append((label, value))
        if label == "E2E latency (ms)":
            out += [("Inputs/s", f"{summary.input_sequence_throughput:,.2f} ({summary.total_inputs} inputs, "
                                 f"{summary.batch_size} a request)"),
                    ("Input tok/s", f"{summary.input_token_throughput:,.2f} (the server's usage, else the "
                                    "request's count)"),
                    ("TTFT, TPOT, ITL, output tok/s", REASON)]
    return out


def console_lines(summary: PoolingSummary) -> list[str]:
    """vllm bench serve's pooling line, and what does not apply."""
    return [f"{'Total inputs:':<40} {summary.total_inputs:<10}",
            f"{'Input throughput (inputs/s):':<40} {summary.input_sequence_throughput:<10.2f}",
            f"{'Input token throughput (tok/s):':<40} {summary.input_token_throughput:<10.2f}",
            "TTFT, TPOT, ITL, output throughput: n/a (whole answers, no stream)"]
