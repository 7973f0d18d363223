"""Each LoRA adapter's figures beside the whole run's (results.adapters): exact on a hand-built run, adding
up to the whole, and shown in the result file, the console and the card."""

from __future__ import annotations

import numpy as np
import pytest

from fastbench.config import BenchConfig
from fastbench.results.card import render_card
from fastbench.results.figures import summarize
from fastbench.results.records import COL, NCOLS, ErrorClass, RunData, TimestampSource, UsageSource
from fastbench.results.writers import render_console, result_to_json_dict

T0 = 10**12
MS = 1_000_000

# (adapter, sent ms, ttft ms, output tokens, e2el ms, prompt tokens from usage, error); None: never started
REQUESTS = [
    (0, 0, 40, 5, 120, 300, ErrorClass.OK),
    (1, 10, 60, 3, 100, 150, ErrorClass.OK),
    (0, 20, 50, 9, 250, 310, ErrorClass.OK),
    (1, 30, 70, 1, 70, 160, ErrorClass.OK),  # one token: no TPOT
    (1, 40, 0, 0, 5, -1, ErrorClass.HTTP_STATUS),
    (2, None, 0, 0, 0, 0, ErrorClass.OK),
]


def _run() -> tuple[RunData, list[int]]:
    rows = np.zeros((len(REQUESTS), NCOLS), dtype=np.int64)
    for i, (_, sent_ms, ttft, out, e2el, prompt, error) in enumerate(REQUESTS):
        if sent_ms is None:
            continue
        row, sent = rows[i], T0 + sent_ms * MS
        row[COL["index"]] = i
        row[COL["scheduled_ns"]] = row[COL["sent_ns"]] = sent
        if ttft:
            row[COL["first_byte_ns"]] = row[COL["first_token_ns"]] = row[COL["first_answer_ns"]] = sent + ttft * MS
        row[COL["end_ns"]] = sent + e2el * MS
        row[COL["prompt_tokens"]] = prompt
        row[COL["output_tokens"]] = out
        row[COL["chunks"]] = out
        row[COL["error"]] = error
        row[COL["http_status"]] = 200 if error == ErrorClass.OK else 500
        row[COL["usage_source"]] = UsageSource.PER_CHUNK
    data = RunData(rows=rows, error_messages={}, histograms={}, start_ns=T0, end_ns=T0 + 500 * MS, cap_hit=False,
                   stopped_reason="completed", timestamp_source=TimestampSource.KERNEL, reads=20,
                   multi_event_reads=0, output_events=18, kernel_stamped_reads=20, connections_opened=1,
                   concurrency_samples=np.zeros((0, 2)), mean_in_flight=1.0, client_cpu_ns=1000, warmups=0)
    return data, [r[0] for r in REQUESTS]


def test_each_adapters_figures_are_its_requests_and_add_up_to_the_whole() -> None:
    data, adapters = _run()
    config = BenchConfig(model="m", concurrency=2, num_prompts=len(REQUESTS), lora_modules=("a", "b", "c"))
    result = summarize(data, config, server_info={}, workload_info={
        "adapters": ["a", "b", "c"], "adapter_of_request": adapters, "prompt_lens": [10] * len(REQUESTS)})
    assert result.adapters is not None
    a, b, c = result.adapters["per_adapter"]
    assert (a["requests"], a["completed"], a["failed"]) == (2, 2, 0)
    assert (b["requests"], b["completed"], b["failed"]) == (3, 2, 1)
    assert (c["requests"], c["completed"], c["failed"]) == (1, 0, 0)
    assert a["ttft_ms"] == {"mean": 45.0, "median": 45.0, "p99": pytest.approx(49.9)}
    assert a["tpot_ms"]["mean"] == pytest.approx(((120 - 40) / 4 + (250 - 50) / 8) / 2)
    assert b["tpot_ms"]["median"] == pytest.approx((100 - 60) / 2)  # the one-token request has none
    assert (a["total_input_tokens"], b["total_input_tokens"]) == (610, 310)  # the server's usage counts
    assert c["ttft_ms"] == {"mean": None, "median": None, "p99": None}
    per = result.adapters["per_adapter"]
    assert sum(x["requests"] for x in per) == result.counts.total
    assert sum(x["completed"] for x in per) == result.counts.completed
    assert sum(x["failed"] for x in per) == result.counts.failed
    assert sum(x["total_input_tokens"] for x in per) == result.total_input_tokens
    assert sum(x["total_output_tokens"] for x in per) == result.total_output_tokens
    assert sum(x["request_throughput_per_s"] for x in per) == pytest.approx(result.throughput.request_throughput)
    assert sum(x["output_throughput_tok_s"] for x in per) == pytest.approx(result.throughput.output_throughput)
    assert "adapter_of_request" not in result.workload_info  # per-request lists stay out of the result

    written = result_to_json_dict(result, config, environment={})
    assert written["fastbench"]["adapters"] == result.adapters
    console = render_console(result)
    assert "LoRA adapters" in console and "\na " in console
    card = render_card(result, config)
    assert "## LoRA adapters" in card and "| b | 3 | 2 | 1 |" in card


def test_a_run_without_adapters_has_no_section() -> None:
    data, _ = _run()
    config = BenchConfig(model="m", concurrency=2, num_prompts=len(REQUESTS))
    result = summarize(data, config, server_info={}, workload_info={})
    assert result.adapters is None
    assert "adapters" not in result_to_json_dict(result, config, environment={})["fastbench"]
    assert "LoRA" not in render_console(result)
