"""`fastbench validate` and the bench/ reference client: structure and sane values, not performance.

Bounds are loose on purpose: these run on small, shared machines. The figures themselves are
measured by bench/bench_client.py.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop

from _bench import load_bench_module
from fastbench import validate as fv
from fastbench.loadgen import LoadGenerator, LoadPlan, Target
from fastbench.records import COL
from fastbench.synthetic import SyntheticServer

LOOSE_SKEW_MS = 5.0


def _env() -> dict[str, str]:
    return dict(os.environ)  # the installed package, as a user runs it


def test_validate_cli_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "fastbench", "validate", "--help"], capture_output=True,
                          text=True, timeout=60, env=_env(), check=False)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--concurrency", "--request-rate", "--tokens-per-chunk", "--itl-ms", "--ttft-ms",
                 "--num-requests", "--output-len", "--tolerance-ms", "--json"):
        assert flag in proc.stdout


def test_validate_cli_run_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    rc = fv.main(["--concurrency", "16", "--num-requests", "32", "--output-len", "16", "--itl-ms", "10",
                  "--ttft-ms", "20", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["verdict"] in ("PASS", "FAIL")
    assert rc == (0 if doc["verdict"] == "PASS" else 1)
    printed = capsys.readouterr().out
    assert "verdict:" in printed and "skew" in printed

    assert doc["completed"] == 32 and doc["failed"] == 0
    assert doc["chunks"] == 32 * 16
    assert doc["tokens"] == 32 * 16
    skew = doc["skew"]
    assert skew["count"] == doc["chunks"]  # every chunk carried the server's send stamp
    assert 0 <= skew["p50"] <= skew["p99"] <= skew["max"]
    assert skew["p99"] < LOOSE_SKEW_MS
    assert doc["timestamp_source"] in ("KERNEL", "USER")
    assert doc["reads"] > 0
    assert 0 <= doc["multi_event_read_share"] <= 1
    assert doc["streams_asked"] == 16
    assert 0.9 * 16 <= doc["streams_open_mean"] <= 16.01
    # The opening ramp (16 first sends, one after another) is reported apart and counted in the
    # from-start figure only.
    assert 0 < doc["opening_ramp_ms"] < 20.0
    assert 0.9 * 16 <= doc["streams_open_mean_from_start"] <= 16.01
    cpu = doc["client_cpu_us_per_chunk"]
    assert cpu is not None and math.isfinite(cpu) and cpu > 0
    assert doc["client_cpu_ms_per_request"] > 0
    assert doc["dispatch_lag"]["count"] == 32 and doc["dispatch_lag"]["p50"] >= 0
    series = {s["name"]: s for s in doc["series"]}
    assert set(series) == {"ttft", "tpot", "itl_chunk", "itl_token"}
    assert series["ttft"]["nominal_ms"] == 20.0
    assert abs(series["itl_chunk"]["measured_p50_ms"] - 10.0) < 3.0
    assert abs(series["tpot"]["measured_p50_ms"] - 10.0) < 3.0
    assert series["itl_chunk"]["error_bound_worst_ms"] >= series["itl_chunk"]["error_bound_p99_ms"] >= 0
    assert "lateness" in doc["server"] and doc["server"]["chunks_sent"] >= doc["chunks"]
    names = {c["name"] for c in doc["checks"]}
    assert "skew p99 (ms)" in names and "streams kept open (mean)" in names
    assert doc["definitions"]["skew"]


def test_validate_api_speculative_shape() -> None:
    report = fv.validate(8, tokens_per_chunk="1-4", itl_ms=10, ttft_ms=20, num_requests=16, output_len=24)
    assert isinstance(report, fv.ValidationReport)
    assert report.completed == 16 and report.failed == 0
    assert report.tokens == 16 * 24
    assert report.tokens_per_chunk_mean is not None and 1.0 < report.tokens_per_chunk_mean <= 4.0
    assert report.chunks < report.tokens
    assert report.skew.count == report.chunks
    assert report.skew.p99 is not None and report.skew.p99 < LOOSE_SKEW_MS
    itl_token = next(s for s in report.series if s.name == "itl_token")
    itl_chunk = next(s for s in report.series if s.name == "itl_chunk")
    assert itl_token.measured_p50_ms is not None and itl_chunk.measured_p50_ms is not None
    assert itl_token.measured_p50_ms < itl_chunk.measured_p50_ms  # several tokens share one chunk gap
    assert report.verdict in ("PASS", "FAIL") and report.passed == (report.verdict == "PASS")
    assert "verdict: " + report.verdict in report.render()


def test_streams_kept_open_not_judged_without_a_turnover() -> None:
    """As many requests as streams: all go out in the opening ramp, none after, so there is no
    turnover to keep up with and no verdict on it."""
    report = fv.validate(8, itl_ms=4, ttft_ms=5, num_requests=8, output_len=8)
    assert report.completed == 8
    assert "streams kept open (mean)" not in {c.name for c in report.checks}
    assert "streams kept open: not judged" in report.render()


def test_coalesced_wake_ups_keep_the_kernel_stamps() -> None:
    """Draining every 3 ms instead of on every arrival: one wake-up serves several reads, and each
    chunk's skew is still measured from its own kernel stamp, not from the drain."""
    report = fv.validate(16, itl_ms=10, ttft_ms=20, num_requests=32, output_len=16, coalesce_ms=3)
    assert report.completed == 32 and report.failed == 0
    assert report.wakeups and report.reads / report.wakeups > 2
    # Each request's last chunk was watched for on every arrival (unless a stall of the machine
    # merged its last two chunks into one read: then it ended before it could be moved).
    assert 28 <= report.ends_watched <= 32
    assert report.timestamp_source == "KERNEL"
    # Stamped after the drain, a chunk would look up to 3 ms late; p50 stays near loopback's cost.
    assert report.skew.p50 is not None and report.skew.p50 < 0.5


def test_coalesced_closed_loop_watches_streams_about_to_end() -> None:
    """Reads on a 4 ms timer: a stream's last chunk waits for the next drain before its slot's
    next request goes out. Given the expected lengths, the core watches a stream about to end on
    every arrival instead, and the turnover stays well under a millisecond."""
    n, streams = 48, 8
    slot_p50 = {}
    for watch_ends in (True, False):
        plan = LoadPlan(bodies=[fv.request_body(8)] * n, warmup_bodies=[fv.request_body(1)] * streams,
                        concurrency=streams, coalesce_s=0.004,
                        expected_output_tokens=[8] * n if watch_ends else None)
        with SyntheticServer(ttft_ms=10, itl_ms=10) as server:
            data = uvloop.run(LoadGenerator(Target.parse(server.base_url, fv.ENDPOINT), plan).run())
        assert (data.rows[:, COL["error"]] == 0).all()
        assert data.reads / data.extra["wakeups"] > 1.5  # still coalesced
        slot = fv._pair_slot_to_send(data.rows, streams)
        assert slot is not None and slot.p50 is not None
        slot_p50[watch_ends] = slot.p50
    # Unwatched, the wait depends on where the drains fall between arrivals (0.8-2 ms here).
    assert slot_p50[True] < 0.5
    assert slot_p50[False] > 3 * slot_p50[True]


def test_reference_client_measures() -> None:
    rc = load_bench_module("reference_client")
    with SyntheticServer(ttft_ms=10, itl_ms=5) as server:
        out = asyncio.run(rc.run(server.base_url, 4, 8, 8))
    assert out["requests"] == {"completed": 8, "failed": 0}
    assert out["chunks"] == 64 and out["tokens"] == 64
    assert out["skew_ms"]["count"] == 64
    assert 0 <= out["skew_ms"]["p50"] < 1000
    assert out["itl_chunk_ms"]["count"] == 8 * 7
    assert out["client_cpu"]["us_per_chunk"] > 0
    assert out["client_maxrss_kb"] > 0
    assert out["window"]["start_ns"] <= out["window"]["last_sent_ns"] <= out["window"]["end_ns"]
