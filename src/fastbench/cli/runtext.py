"""The lines around a run's table: first what is measured against what, the progress line while it runs,
last where the results went.

A new user's first ``fastbench --num-prompts 64`` measures the built-in synthetic server; the first lines
say so, and which workload, before the run's seconds pass; the last say which files hold the result, or
how to keep it when nothing was asked for.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from fastbench.config import BenchConfig
from fastbench.datasetoptions import flattened
from fastbench.redact import redact_text, shell_join

# The synthetic server's defaults when no --synthetic-args change them (synthetic-server --help).
SYNTHETIC_DEFAULTS = "TTFT 50 ms, a chunk every 20 ms"


def opening_lines(config: BenchConfig) -> list[str]:
    """What the run measures: the server, the model, the API and the workload's shape."""
    if config.launch is not None:
        server = f"a {config.launch.engine} server launched here for {config.launch.model}"
    elif config.base_url is None:
        tuned = shell_join(config.synthetic_args) if config.synthetic_args else SYNTHETIC_DEFAULTS
        server = f"the built-in synthetic server ({tuned}; no --base-url given, so no real model)"
    else:
        server = redact_text(config.base_url, config.api_key)
    model = config.served_model_name or config.model
    if model:
        server += f", model {model}"
    elif config.base_url is not None:
        server += ", the first model its /v1/models lists"
    return [f"fastbench: measuring {server}, {config.endpoint}",
            f"fastbench: workload: {workload_text(config)}"]


def workload_text(config: BenchConfig) -> str:
    """The dataset, its lengths where the run sets them, how many requests and how they are sent."""
    options = flattened(config.dataset_options)
    name = config.dataset_name
    if name == "random":
        ratio = options["random_range_ratio"]
        spread = f" (±{ratio:.0%})" if ratio else ""
        out = config.max_tokens if config.max_tokens is not None else options["random_output_len"]
        what = f"random, {options['random_input_len']} prompt tokens{spread} and {out} output tokens a request"
    else:
        path = f" from {os.fspath(config.dataset_path)}" if config.dataset_path else ""
        out = f", {config.max_tokens} output tokens a request" if config.max_tokens is not None else ""
        what = f"{name}{path}{out}"
    if config.pooling and config.random_batch_size > 1:
        what += f", {config.random_batch_size} inputs a request"
    cap = config.effective_concurrency
    if config.open_loop:
        load = f"arrivals at {config.rate_text}" + (f", at most {cap} in flight" if cap is not None else "")
    else:
        load = f"{cap} in flight (closed loop)"
    cap_s = f", for at most {config.max_seconds:g} s" if config.max_seconds is not None else ""
    return f"{what}; {config.num_prompts} requests, {load}{cap_s}"


def closing_lines(config: BenchConfig, result: Any, written: bool) -> list[str]:
    """Where the run's results went (``written``: the result files were written), or how to keep them."""
    files = []
    if config.result_json:
        files.append(f"result {os.fspath(config.result_json)}")
    if config.result_card:
        files.append(f"card {os.fspath(config.result_card)}")
    if config.save_detailed:
        files.append(f"per-request records {os.fspath(config.save_detailed)}")
    if config.save_result or config.append_result:
        from fastbench.results.writers import vllm_result_path  # the name depends on the result's date

        files.append(f"vllm bench serve's result {vllm_result_path(result, config)}")
    if files and written:
        return ["fastbench: written: " + "; ".join(files)]
    if files:
        return []  # the write failed: the error says so, and which file
    if config.store:
        return []  # "stored: run ... in ..." says it
    return ["fastbench: nothing saved: --result-json FILE keeps the result, --result-card FILE a Markdown card,",
            "           --store DIR the run for `fastbench runs`, compare and report"]


class ProgressLine:
    """One self-overwriting status line on stderr."""

    def __call__(self, p: dict[str, Any]) -> None:
        cap = f"/{p['max_seconds']:.0f}" if p["max_seconds"] else ""
        rate = p["output_tokens"] / p["elapsed_s"] if p["elapsed_s"] > 0 else 0.0
        sys.stderr.write(
            f"\r  {p['completed']}/{p['total']} done, {p['failed']} failed, {p['in_flight']} in flight, "
            f"{rate:,.0f} tok/s, {p['elapsed_s']:.0f}{cap} s   "
        )
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
