"""Misbehaving servers: every fault of the synthetic server is recorded and classified, the run
completes, nothing is lost, and the good requests' figures are untouched."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import orjson
import pytest
import uvloop

from fastbench import BenchConfig, SyntheticServer, run
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.records import COL, ErrorClass, RunData, UsageSource

TOKENS = 8
BODY = orjson.dumps({
    "model": "m", "prompt": "hello world", "max_tokens": TOKENS, "stream": True, "ignore_eos": True,
    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
})


def drive(server_args: list[str], n: int = 9, concurrency: int = 3, **plan: Any) -> RunData:
    with SyntheticServer("--ttft-ms", "5", "--itl-ms", "2", *server_args) as server:
        target = Target.parse(server.base_url, "/v1/completions")
        gen = LoadGenerator(target, LoadPlan(bodies=[BODY] * n, warmup_bodies=[], concurrency=concurrency, **plan))
        return uvloop.run(gen.run())


def errors(data: RunData) -> list[int]:
    return [int(e) for e in data.rows[:, COL["error"]]]


@pytest.mark.parametrize("fault,error,words,extra", [
    ("reset-mid-stream", ErrorClass.PROTOCOL, "connection", []),
    ("http-500", ErrorClass.HTTP_STATUS, "HTTP 500", []),
    ("http-429", ErrorClass.HTTP_STATUS, "HTTP 429", []),
    ("not-sse", ErrorClass.PROTOCOL, "not an event stream", []),
    ("malformed-sse", ErrorClass.PROTOCOL, "not a JSON object", []),
    ("oversized-event", ErrorClass.PROTOCOL, "1 MiB", []),
    ("no-done", ErrorClass.PROTOCOL, "[DONE]", []),
    ("error-event", ErrorClass.SERVER_ERROR, "error event", []),
    ("stall", ErrorClass.TIMEOUT, "request-timeout", ["--stall-s", "3"]),
])
def test_fault_is_classified_and_others_unaffected(fault: str, error: ErrorClass, words: str,
                                                   extra: list[str]) -> None:
    data = drive(["--fault", fault, "--fault-every", "3", *extra], request_timeout_s=1.0)
    errs = errors(data)
    assert np.all(data.rows[:, COL["sent_ns"]] > 0)  # every request was sent and recorded
    assert errs.count(error) == 3, (errs, data.error_messages)
    assert errs.count(ErrorClass.OK) == 6
    failed = [i for i, e in enumerate(errs) if e]
    assert sorted(data.error_messages) == failed
    for i in failed:
        assert words in data.error_messages[i], data.error_messages[i]
    ok = data.rows[np.array(errs) == 0]
    assert list(ok[:, COL["output_tokens"]]) == [TOKENS] * 6
    # Only the good requests are in the chunk series.
    assert data.histograms["itl_chunk"].get_total_count() == 6 * (TOKENS - 1)


def test_reset_before_headers_is_a_connect_error() -> None:
    data = drive(["--fault", "reset-before-headers"], n=4, concurrency=2)
    assert errors(data) == [ErrorClass.CONNECT] * 4
    assert "reset" in data.error_messages[0].lower()


def test_trickle_is_slow_but_fine() -> None:
    data = drive(["--fault", "trickle", "--trickle-us", "50"], n=3)
    assert errors(data) == [0, 0, 0]
    assert list(data.rows[:, COL["output_tokens"]]) == [TOKENS] * 3


def test_close_after_each_response_reconnects() -> None:
    data = drive(["--fault", "close-after-response"], n=6, concurrency=2)
    assert errors(data) == [0] * 6
    assert data.connections_opened == 6


def test_contradictory_usage_is_not_trusted() -> None:
    data = drive(["--fault", "usage-contradictory", "--fault-every", "2"], n=4, concurrency=1)
    assert errors(data) == [0] * 4
    sources = list(data.rows[:, COL["usage_source"]])
    assert sources.count(UsageSource.INCONSISTENT) == 2
    assert sources.count(UsageSource.PER_CHUNK) == 2
    # The untrusted ones count their output chunks instead.
    bad = data.rows[data.rows[:, COL["usage_source"]] == UsageSource.INCONSISTENT]
    assert list(bad[:, COL["output_tokens"]]) == list(bad[:, COL["chunks"]])
    good = data.rows[data.rows[:, COL["usage_source"]] == UsageSource.PER_CHUNK]
    assert list(good[:, COL["output_tokens"]]) == [TOKENS] * 2


def test_refused_connections() -> None:
    data = drive(["--fault", "refuse"], n=3)
    assert errors(data) == [ErrorClass.CONNECT] * 3
    with SyntheticServer("--fault", "refuse") as server:
        proc = subprocess.run([sys.executable, "-m", "fastbench", "--base-url", server.base_url,
                               "--num-prompts", "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert server.base_url.split("//")[1] in proc.stderr.strip().splitlines()[-1]


def test_max_error_rate_stops_early_and_marks_the_run_collapsed() -> None:
    with SyntheticServer("--ttft-ms", "5", "--itl-ms", "2", "--fault", "http-500") as server:
        result = run(BenchConfig(base_url=server.base_url, concurrency=2, num_prompts=200,
                                 random_input_len=8, random_output_len=4, max_error_rate=0.5))
    c = result.counts
    assert result.stopped_reason == "max error rate"
    assert 20 <= c.failed < 200
    assert c.completed + c.failed + c.cancelled + c.not_started == 200
    assert result.collapsed
    assert result.counts.failed_by_class == {"HTTP_STATUS": c.failed}


def test_collapsed_run_card_says_so_instead_of_a_throughput(tmp_path: Any) -> None:
    from fastbench.results.card import render_card
    from fastbench.results.writers import render_console

    with SyntheticServer("--ttft-ms", "1", "--itl-ms", "1", "--fault", "http-500", "--fault-every", "1") as server:
        config = BenchConfig(base_url=server.base_url, concurrency=2, num_prompts=30, random_input_len=8,
                             random_output_len=4)
        result = run(config)
    assert result.collapsed and result.counts.completed == 0
    card = render_card(result, config)
    assert "COLLAPSED" in card
    measured = card.split("Measured results", 1)[1].split("Full run command", 1)[0]
    decode_row = next(line for line in measured.splitlines() if line.startswith("| Decode tok/s"))
    assert "not a throughput" in decode_row and "0.00" not in decode_row
    assert "COLLAPSED RUN" in render_console(result)


def test_max_error_rate_counts_failed_connects() -> None:
    data = drive(["--fault", "refuse"], n=200, concurrency=2, max_error_rate=0.5)
    assert data.stopped_reason == "max error rate"
    started = int((data.rows[:, COL["sent_ns"]] > 0).sum())
    assert 20 <= started < 200
